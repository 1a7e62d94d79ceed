"""Celery tasks: run one turn, sweep stale turns. Thin by design (CONTRIBUTING.md#thin-interfaces).

Pool: a turn spends nearly all its time waiting on the LLM, so one worker
process runs many turns at once with the threads pool —
``celery -A config worker --pool threads --concurrency 16`` — rather than a
~110 MB prefork child per turn (docs/architecture.md#processes-embedded-and-production). Each task
thread runs the
driver under its own ``asyncio.run``; the ORM pool (``DatabaseThreads``) is
shared by all task threads of the process, while the LLM provider is built per
task because its async HTTP client belongs to the event loop it first ran on.

``acks_late``: the message is acknowledged only when the task returns, so a
worker that dies before it claimed the turn leaves the message to be delivered
again (``CELERY_TASK_REJECT_ON_WORKER_LOST``). Redelivery is always safe: the
driver claims with a conditional update (``queued → running``), so a duplicate
or late delivery of a turn that was claimed already does nothing and writes
nothing. A worker that dies *after* the claim is not redelivered into the turn
— the turn stays ``running`` without heartbeats until the sweeper marks it
interrupted and someone resumes it (``turn_resume_and_enqueue``). Cancel never
depends on revoke: the driver polls the turn's cancel flag.

The tasks are ``shared_task``: this module imports nothing from the Django
wiring. They run on the project's Celery app (``config.celery``), which the
worker loads with ``-A config`` and every Django process creates at start
(``config.apps``); the worker finds this module by autodiscovery.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from common.db import DatabaseThreads
from turns.jobs.run import make_job_provider, run_turn_job
from turns.jobs.sweep import turns_sweep as sweep

_db: DatabaseThreads | None = None
_db_lock = threading.Lock()


def shared_db() -> DatabaseThreads:
    """The process's ORM thread pool, shared by every task thread (created on first use)."""
    global _db
    with _db_lock:
        if _db is None:
            _db = DatabaseThreads(max_workers=16)
        return _db


async def _run(turn_id: int, job_id: str) -> None:
    provider = make_job_provider()
    try:
        await run_turn_job(turn_id, provider=provider, db=shared_db(), job_id=job_id)
    finally:
        await provider.aclose()


#: The delivery policy of a task that drives turns (``turn_run`` here,
#: ``evaluation.tasks.eval_example_run``): acknowledged when it returns, and
#: when the database failed before the claim (a restart) — nothing was
#: written — the same delivery is tried again later rather than the turn left
#: queued until the sweeper hands it over again. After the claim the driver
#: ends the turn interrupted itself and does not raise.
DRIVER_TASK_OPTIONS: dict[str, Any] = {
    "acks_late": True,
    "ignore_result": True,
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "max_retries": 12,
}


@shared_task(name="turns.tasks.turn_run", **DRIVER_TASK_OPTIONS)
def turn_run(turn_id: int) -> None:
    """Drive turn ``turn_id`` (an id, never a model instance) to a terminal event."""
    asyncio.run(_run(turn_id, job_id=turn_run.request.id or ""))


@shared_task(name="turns.tasks.turns_sweep", ignore_result=True)
def turns_sweep() -> int:
    """Celery beat: mark turns without a heartbeat for ``TURN_STALE_S`` as
    interrupted, and queue again those queued for longer (their hand-over was
    lost). Returns how many turns were marked."""
    return sweep(stale_s=float(settings.TURN_STALE_S)).interrupted

"""The Celery app (docs/architecture.md#processes-embedded-and-production): turn jobs, the
stale-turn sweeper and the
scheduled evaluations.

Configuration comes from Django settings under the ``CELERY_`` namespace;
tasks are found in each app's ``tasks.py``. Importing this module connects to
nothing and reads no settings, so it is safe without a broker.

Run (see ``turns.jobs.tasks`` for why a threads pool)::

    celery -A config worker --pool threads --concurrency 16 --loglevel INFO
    celery -A config beat --loglevel INFO \
        --scheduler django_celery_beat.schedulers:DatabaseScheduler

Beat reads its schedule from the database (``CELERY_BEAT_SCHEDULER``): the
sweeper below is written there at beat's start, the evaluation schedules by
the admin (``evaluation.schedules``).

``CELERY_TASK_DEFAULT_QUEUE`` (environment, default ``celery``) names the
queue; deployments (and the end-to-end test) sharing one broker use their own.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery import Celery
from celery.signals import worker_process_shutdown, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agentlab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# the turns' tasks live with the other job modules (turns/jobs/tasks.py)
app.autodiscover_tasks(["turns.jobs"])
# evaluation's tasks live beside what they run: the examples' task with the
# run (evaluation/run/worker.py), the schedules' with the schedules
app.autodiscover_tasks(["evaluation.run"], related_name="worker")
app.autodiscover_tasks(["evaluation.schedules"], related_name="firing")
# Belongs with the other CELERY_* settings; read here so that this module
# stays the only place that must know about it.
app.conf.task_default_queue = os.environ.get("CELERY_TASK_DEFAULT_QUEUE") or "celery"


@app.on_after_configure.connect
def _beat_schedule(sender: Celery, **kwargs: Any) -> None:
    """Sweep stale turns every ``TURN_STALE_S / 2`` seconds (at least 5 s).

    Connected to ``on_after_configure`` so that settings are read only when
    Celery itself first reads its configuration, never on import.
    """
    from django.conf import settings

    every = max(5.0, float(settings.TURN_STALE_S) / 2)
    sender.add_periodic_task(every, sender.signature("turns.tasks.turns_sweep"), name="sweep stale turns")


@worker_shutdown.connect
def _close_mcp_sessions(**kwargs: Any) -> None:
    """Stop the MCP servers this worker started (stdio children) and close its
    sessions before it exits; ``atexit`` would too, later and less surely."""
    from agentlab.agent.mcp.hub import mcp_hub_close

    mcp_hub_close()


#: Longest a process's exit waits for its queued spans to be exported (seconds).
TRACE_FLUSH_S = 5.0


@worker_shutdown.connect
def _flush_traces_at_shutdown(**kwargs: Any) -> None:
    """The worker's main process stops: export the spans still queued (the
    threads pool's turns), waiting at most :data:`TRACE_FLUSH_S`."""
    _flush_traces()


@worker_process_shutdown.connect
def _metrics_process_gone(pid: int | None = None, **kwargs: Any) -> None:
    """A prefork child exits: its queued spans are exported first (it leaves
    with ``os._exit``, so no ``atexit`` would: ``--max-tasks-per-child 1``
    lost every turn's spans), bounded by :data:`TRACE_FLUSH_S`; then its live
    gauges leave the multiprocess sum (``agentlab.telemetry.metrics.process_gone``)."""
    from agentlab.telemetry.metrics import process_gone

    _flush_traces()
    process_gone(pid)


def _flush_traces() -> None:
    """``flush_tracing`` bounded by :data:`TRACE_FLUSH_S`; a failure is logged, never raised."""
    from agentlab.telemetry import flush_tracing

    try:
        if not flush_tracing(TRACE_FLUSH_S):
            logging.getLogger(__name__).warning(
                "spans still queued after %g s at exit were not exported", TRACE_FLUSH_S
            )
    except Exception:  # an exit must not fail on its telemetry
        logging.getLogger(__name__).warning("flushing the spans at exit failed", exc_info=True)


@worker_ready.connect
def _preload_model(**kwargs: Any) -> None:
    """Load the embedded model on a thread when the worker is ready, if it is
    the configured provider, so the first turn does not wait for it."""
    from agentlab.telemetry import telemetry_start
    from turns.llm import preload_configured_model

    telemetry_start()  # the tracer and metrics, before the first turn needs them
    threading.Thread(target=preload_configured_model, name="agentlab-preload", daemon=True).start()

"""The guard that keeps a scheduled ``celery`` run from waiting for itself.

A scheduled run with ``celery`` sends its examples' turns to a queue and
follows them from the worker slot its own task holds (``run_eval`` →
``evaluation.run.on_workers.follow_run``). If every slot that reads that queue
is held by such a follower — one worker with one slot, say — no turn is
ever taken and the follower waits forever. Before it sends anything, the
scheduled run asks the workers (Celery's remote control: ``active_queues``,
``stats``, ``active``) how many slots read the turn queue and are not held
by a scheduled run; with none it refuses, with a message saying what to
change. A worker busy in its only slot (the solo pool) does not answer,
and so counts as none.

It is a snapshot: schedules firing at the same moment each see the others
holding their slots, and may all refuse — never all wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery import current_app

from evaluation.run.on_workers import workers_reading

#: Seconds to wait for the workers' replies.
INSPECT_TIMEOUT_S = 2.0


def free_slots(
    *,
    queue: str,
    active_queues: Mapping[str, Sequence[Mapping[str, Any]]],
    stats: Mapping[str, Mapping[str, Any]],
    active: Mapping[str, Sequence[Mapping[str, Any]]],
    follower_task: str,
) -> int:
    """Slots that read ``queue`` and are not held by a ``follower_task``, from
    the workers' replies: ``active_queues`` ``{worker: [{"name": queue}]}``,
    ``stats`` ``{worker: {"pool": {"max-concurrency": n}}}`` (a worker that
    gave none counts as 1), ``active`` ``{worker: [{"name": task}]}``."""
    total = 0
    for worker in workers_reading(queue, active_queues):
        pool = (stats.get(worker) or {}).get("pool") or {}
        slots = int(pool.get("max-concurrency") or 1)
        following = sum(1 for task in active.get(worker) or () if task.get("name") == follower_task)
        total += max(0, slots - following)
    return total


def eval_slots(*, queue: str, follower_task: str, timeout: float = INSPECT_TIMEOUT_S) -> int:
    """``free_slots`` from the live workers' answers within ``timeout`` seconds."""
    inspect = current_app.control.inspect(timeout=timeout)
    return free_slots(
        queue=queue,
        active_queues=inspect.active_queues() or {},
        stats=inspect.stats() or {},
        active=inspect.active() or {},
        follower_task=follower_task,
    )


def capacity_problem(*, queue: str, follower_task: str) -> str | None:
    """Why a scheduled ``celery`` run on ``queue`` would wait for itself, or ``None``."""
    if eval_slots(queue=queue, follower_task=follower_task) > 0:
        return None
    return (
        f"no free worker slot reads queue {queue!r}: the run's turns would wait for ever behind the "
        "scheduled run that follows them. Start a worker on that queue (celery -A config worker "
        f"--pool threads -Q {queue}) or give it more slots (--concurrency)"
    )

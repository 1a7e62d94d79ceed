"""``run_eval --celery``: send a planned run's examples to Celery workers and
follow them from the database until every prediction is complete.

The command plans the run as in process (``evaluation.run.plan``), then
``follow_run`` sends one ``evaluation.tasks.eval_example_run`` per planned
example — the prediction id only, after the commit — to the run's queue, and
polls the run's predictions every ``poll_s`` seconds. While it follows, it is
the run's caretaker (it holds the run's lease):

- a prediction completed by a worker counts as done (``on_done``);
- a turn that ended outside the evaluation policy (cancelled while queued by
  ``cancel_run``, or driven by a generic turn job) has its prediction
  completed from the turn row (``prediction_record``);
- a running turn whose heartbeat is older than ``TURN_STALE_S`` (its worker
  was killed) is marked interrupted (``turns_sweep_stale``), and an
  interrupted turn is resumed (``turn_resume``) and sent again: the driver
  continues from its event log, so no recorded LLM reply is asked again;
- a queued turn sent more than ``TURN_STALE_S`` ago is sent again (its message
  was lost with a killed worker's prefetch): the claim is conditional, so a
  duplicate delivery writes nothing;
- with ``max_in_flight``, no more than that many of the run's turns are sent
  and not yet complete (a per-run cap; otherwise the workers' concurrency is
  the bound). ``follow_runs`` follows several runs at once (an experiment's
  variants), the cap then shared fairly between them.

Ctrl-C stops following; the sent turns keep running on the workers, and
``run_eval`` with the same run id follows them again.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from celery import Task, current_app
from django.conf import settings
from django.db import transaction
from kombu.exceptions import OperationalError as KombuOperationalError
from kombu.utils.url import maybe_sanitize_url

from common.errors import StateConflict
from evaluation.models import Prediction, Run, RunStatus
from evaluation.run.exits import RunOutage
from evaluation.run.plan import PlannedExample
from evaluation.run.record import prediction_record
from turns.jobs.sweep import turns_sweep_stale
from turns.models import TERMINAL_STATUSES, TurnStatus
from turns.services import turn_cancel, turn_resume

logger = logging.getLogger(__name__)

#: Predictions read per query while following (the ``IN`` list of one ``SELECT``).
FOLLOW_BATCH = 1000


class BrokerUnavailable(Exception):
    """The Celery broker cannot be reached (the message names it and why)."""


#: The registered name of the examples' task (``evaluation.run.worker``),
#: kept from when it lived in ``evaluation/tasks.py``: a name in a queued
#: message is a wire contract.
EVAL_TASK = "evaluation.tasks.eval_example_run"


def example_task() -> Task:
    """The examples' Celery task, looked up by :data:`EVAL_TASK` in the
    current app's registry: the sender needs its name and options, not the
    worker's driving code. The first lookup in a process that is not a worker
    loads the app's task modules as a worker does at start-up (its
    autodiscovery, ``config.celery``, finds ``evaluation.run.worker``).
    Raises ``KeyError`` if no task module registered it."""
    if EVAL_TASK not in current_app.tasks:
        current_app.loader.import_default_modules()
    return current_app.tasks[EVAL_TASK]


def broker_check(*, timeout_s: int = 5) -> None:
    """Raise ``BrokerUnavailable`` unless a connection to the Celery broker
    (``CELERY_BROKER_URL``) can be made within about ``timeout_s`` seconds:
    ``run_eval --celery`` checks this before it writes anything, so that a
    broker that is down costs no half-written run."""
    try:
        with current_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, interval_start=0, timeout=timeout_s)
    except (KombuOperationalError, OSError) as exc:
        raise BrokerUnavailable(f"the Celery broker cannot be reached ({_broker_shown()}): {exc}") from None


def workers_reading(queue: str, active_queues: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """The workers that read ``queue``, from their ``active_queues`` replies
    (``{worker: [{"name": queue, …}]}``, Celery's remote control)."""
    return [worker for worker, queues in active_queues.items() if queue in {q.get("name") for q in queues}]


def queue_readers(queue: str, *, timeout_s: float = 1.0) -> int:
    """How many live workers read ``queue`` (``workers_reading``; a worker
    that does not answer within ``timeout_s`` seconds — busy in its only
    slot — is not counted)."""
    return len(workers_reading(queue, current_app.control.inspect(timeout=timeout_s).active_queues() or {}))


def broker_precheck(run_id: str) -> None:
    """The Celery broker answers — checked before the run is written (a
    broker that is down costs nothing); raises ``RunOutage`` (not written)."""
    try:
        broker_check()
    except BrokerUnavailable as exc:
        raise RunOutage(
            run_id, f"{str(exc).rstrip('.')}; the run was not started", what="broker", written=False
        ) from None


def queue_warning(*, queue: str, planned: int) -> str | None:
    """The line a ``--celery`` run's plan line is followed by when it has
    examples to send and no worker reads its ``queue`` now, else ``None``."""
    if not planned or queue_readers(queue):
        return None
    return (
        f"no Celery worker reads queue {queue!r} now: the run waits until one does "
        f"(celery -A config worker --pool threads -Q {shlex.quote(queue)}); "
        "Ctrl-C stops waiting"
    )


def _broker_shown() -> str:
    """``CELERY_BROKER_URL`` without its password, for messages."""
    return str(maybe_sanitize_url(settings.CELERY_BROKER_URL))


def eval_send(prediction_ids: Sequence[int], *, queue: str, batch: int | None = None) -> None:
    """Send the examples' task (:func:`example_task`) for ``prediction_ids`` to ``queue``, ``batch``
    ids per message (``None``: ``AGENTLAB_EVAL_BATCH``), once the current
    transaction commits (at once outside one): a worker must find the turn
    rows it is to claim (what ``DjangoTask.apply_async_on_commit`` does). A
    message's examples are driven at once by one worker slot: fewer
    messages, one database read and one loop hand-over per batch."""
    size = max(1, int(settings.AGENTLAB_EVAL_BATCH if batch is None else batch))
    ids = list(prediction_ids)
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        transaction.on_commit(partial(example_task().apply_async, (chunk,), queue=queue))


class FollowState:
    """What ``follow_run`` knows of the run between polls: the predictions
    still open, and when each was last sent (``time.monotonic()``)."""

    def __init__(self, planned: Sequence[PlannedExample]) -> None:
        self.pending: set[int] = {item.prediction_id for item in planned}
        self.order: list[int] = [item.prediction_id for item in planned]
        self.sent: dict[int, float] = {}

    def in_flight(self) -> int:
        """Sent and not complete."""
        return sum(1 for prediction_id in self.sent if prediction_id in self.pending)


@dataclass(frozen=True)
class Followed:
    """One run ``follow_runs`` follows: its ``planned`` examples and
    ``on_done(prediction id)``, called once per completed prediction."""

    run: Run
    planned: Sequence[PlannedExample]
    on_done: Callable[[int], None] | None = None


def follow_runs(
    runs: Sequence[Followed],
    *,
    queue: str,
    max_in_flight: int | None = None,
    on_poll: Callable[[], object] | None = None,
    poll_s: float = 0.5,
    stale_s: float | None = None,
) -> set[int]:
    """Send the runs' planned examples to the workers on ``queue`` and follow
    them until every prediction is complete (see the module docstring).
    ``max_in_flight`` bounds the turns sent and not complete of all the runs
    together, shared max-min fairly: a free place goes to the run with the
    fewest in flight (``run_experiment``'s variants;
    ``evaluation.run.sharing``). ``on_poll()`` is called after every look (a
    progress line that is due is written even when nothing finished).
    ``stale_s``: ``None`` takes ``TURN_STALE_S``. Returns the primary keys of
    the runs cancelled meanwhile (``cancel_run`` set their status to
    ``cancelled``). Raises ``KeyboardInterrupt`` as it comes (the turns keep
    running) and database errors as they come (the runs stay resumable)."""
    stale = float(settings.TURN_STALE_S) if stale_s is None else stale_s
    states = [FollowState(followed.planned) for followed in runs]
    cancelled: set[int] = set()
    while True:
        cancelled |= set(
            Run.objects.filter(pk__in=[f.run.pk for f in runs], status=RunStatus.CANCELLED).values_list(
                "pk", flat=True
            )
        )
        for followed, state in zip(runs, states, strict=True):
            _poll(state, stale_s=stale, on_done=followed.on_done, cancelled=followed.run.pk in cancelled)
        if on_poll is not None:
            on_poll()
        if not any(state.pending for state in states):
            return cancelled
        sending = [s for f, s in zip(runs, states, strict=True) if f.run.pk not in cancelled]
        rooms = _rooms(sending, max_in_flight)
        for state, room in zip(sending, rooms, strict=True):
            _send_due(state, queue=queue, room=room, resend_s=stale)
        time.sleep(poll_s)


def follow_run(
    run: Run,
    planned: Sequence[PlannedExample],
    *,
    queue: str,
    max_in_flight: int | None = None,
    on_done: Callable[[int], None] | None = None,
    on_poll: Callable[[], object] | None = None,
    poll_s: float = 0.5,
    stale_s: float | None = None,
) -> bool:
    """``follow_runs`` of one run; whether it was cancelled meanwhile."""
    cancelled = follow_runs(
        [Followed(run=run, planned=planned, on_done=on_done)],
        queue=queue,
        max_in_flight=max_in_flight,
        on_poll=on_poll,
        poll_s=poll_s,
        stale_s=stale_s,
    )
    return run.pk in cancelled


def _rooms(states: Sequence[FollowState], max_in_flight: int | None) -> list[int | None]:
    """How many new turns each run may send now: no bound without
    ``max_in_flight``; else the free places, one at a time to the run with
    the fewest in flight that has unsent examples."""
    if max_in_flight is None:
        return [None] * len(states)
    flying = [state.in_flight() for state in states]
    unsent = [sum(1 for p in state.order if p in state.pending and p not in state.sent) for state in states]
    rooms = [0] * len(states)
    free = max(0, max_in_flight - sum(flying))
    while free > 0:
        candidates = [i for i in range(len(states)) if unsent[i] > rooms[i]]
        if not candidates:
            break
        chosen = min(candidates, key=lambda i: (flying[i] + rooms[i], i))
        rooms[chosen] += 1
        free -= 1
    return list(rooms)


def _poll(
    state: FollowState, *, stale_s: float, on_done: Callable[[int], None] | None, cancelled: bool = False
) -> None:
    """One look at the open predictions: count the completed ones, complete
    those whose turn ended outside the policy, interrupt the stale turns and
    resume the interrupted ones (they are sent again by ``_send_due``) — or,
    in a ``cancelled`` run, cancel those and the queued ones."""
    pending = sorted(state.pending)
    rows: list[tuple[int, object, int | None, str | None]] = []
    for start in range(0, len(pending), FOLLOW_BATCH):
        rows += Prediction.objects.filter(pk__in=pending[start : start + FOLLOW_BATCH]).values_list(
            "pk", "completed_at", "turn_id", "turn__status"
        )
    active: list[int] = []
    for prediction_id, completed_at, turn_id, status in rows:
        if completed_at is None and (turn_id is None or status in TERMINAL_STATUSES):
            prediction_record(prediction_id=prediction_id)  # ended outside the policy
        elif completed_at is None:
            if cancelled and status in (TurnStatus.INTERRUPTED, TurnStatus.QUEUED) and turn_id is not None:
                _quietly(turn_cancel, turn_id=turn_id)  # nothing sends it any more
            elif status == TurnStatus.INTERRUPTED and turn_id is not None:
                _quietly(turn_resume, turn_id=turn_id)
                state.sent.pop(prediction_id, None)  # queued again: send it again
            elif status in (TurnStatus.RUNNING, TurnStatus.WAITING) and turn_id is not None:
                active.append(turn_id)
            continue
        state.pending.discard(prediction_id)
        if on_done is not None:
            on_done(prediction_id)
    if active and turns_sweep_stale(stale_s=stale_s, turn_ids=active):
        logger.warning("run_eval --celery: a worker stopped driving some turns; they are resumed")


def _quietly(action: Callable[..., object], *, turn_id: int) -> None:
    """``action(turn_id=…)`` (``turn_resume``, ``turn_cancel``); a turn that
    moved on meanwhile (``StateConflict``) is seen at the next poll."""
    with contextlib.suppress(StateConflict):
        action(turn_id=turn_id)


def _send_due(state: FollowState, *, queue: str, room: int | None, resend_s: float) -> None:
    """Send the open predictions never sent (at most ``room`` of them;
    ``None``: all), and again those sent more than ``resend_s`` seconds ago
    whose turn is still queued."""
    now = time.monotonic()
    queued = set(
        Prediction.objects.filter(
            pk__in=[p for p, at in state.sent.items() if p in state.pending and now - at > resend_s],
            turn__status=TurnStatus.QUEUED,
        ).values_list("pk", flat=True)
    )
    fresh: list[int] = []
    for prediction_id in state.order:
        if room is not None and len(fresh) >= room:
            break
        if prediction_id in state.pending and prediction_id not in state.sent:
            fresh.append(prediction_id)
    due = [*fresh, *sorted(queued)]
    if due:
        eval_send(due, queue=queue)
        for prediction_id in due:
            state.sent[prediction_id] = now

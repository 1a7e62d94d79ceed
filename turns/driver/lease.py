"""The driver's hold on a turn (docs/architecture.md#the-driver;
CONTRIBUTING.md#conditional-claims): taking it, and keeping it while it runs.

**The claim.** ``turn_claim`` is what the driver calls; ``event_append_claim``
is the one statement behind it: a conditional ``UPDATE … WHERE status =
'queued'`` that both takes the turn and reserves the seqs of its first
events, so a duplicate job delivery does nothing and writes nothing.
(healthchecks ``sendalerts``.)

**The watch: heartbeats and the cancel flag.** One ``TurnWatcher`` per
process watches every turn any driver of the process runs, on a thread of
its own with its own database connection: Celery's threads pool runs each
task under its own ``asyncio.run``, so a watcher per event loop (or per
database pool) meant one per task — with 8 turns in a worker, 8 heartbeat
``UPDATE``s a second from 7 connections, each touching all 8 rows in no set
order, and deadlocks between them and the event appends.

Every ``CANCEL_POLL_S`` the watcher runs **one statement** for all its turns:
on a heartbeat tick (every ``HEARTBEAT_S``, at most a quarter of
``TURN_STALE_S``) an ``UPDATE … RETURNING`` that writes the heartbeats of
the turns still held by their drivers and returns their cancel flags, which
locks the rows in id order first (``SELECT … ORDER BY id FOR NO KEY UPDATE``
on PostgreSQL, the lock an ``UPDATE`` takes anyway); on the other ticks a
``SELECT`` of the same. An event append locks one turn row; two lockers that
take rows in one order cannot wait on each other in a circle.

A turn whose flag is set, or that is no longer held (swept to interrupted
while its driver was merely slow), gets its ``cancel`` event set on its own
loop: its appends would be refused anyway, and the loop should stop spending.
A turn the watcher cannot see (deleted with its conversation) is left to its
driver, whose next write finds it gone.
The thread exits (closing its connection) ``LINGER_S`` after the last turn
left (it holds no connection while no turn runs), and starts again with
the next.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from common.db import column_of, concrete_field, connections_retire_broken, pk_column
from common.sql import execute, turn_claim_sql, turns_beat_sql, turns_poll_sql
from turns.event_types import PhaseData, TurnStartedData
from turns.events import NewEvent, events_check, events_insert_reserved
from turns.models import EventType, Turn, TurnEvent, TurnPhase, TurnStatus


@dataclass(frozen=True)
class ClaimedTurn:
    """A turn as its claim left it: the columns a driver starts from.
    ``fresh`` means it never ran before (no recorded step to rebuild)."""

    id: int
    question: str
    context: dict[str, Any]
    meta: dict[str, Any]
    timings: dict[str, Any]
    attempts: int
    max_steps: int
    job_id: str
    last_seq: int
    fresh: bool
    #: ``None``: ``AGENTLAB_MAX_OUTPUT_TOKENS``
    max_output_tokens: int | None = None
    #: ``Turn.agent_options``: ``system_prompt``, ``temperature`` when set
    agent_options: dict[str, Any] = field(default_factory=dict)
    #: for its trace and metrics (``agentlab.telemetry``): its conversation and
    #: when it was created (a datetime, or text on SQLite)
    conversation_id: int | None = None
    created_at: Any = None


_CLAIM_COLUMNS = (
    "question",
    "context",
    "meta",
    "timings",
    "attempts",
    "max_steps",
    "job_id",
    "last_seq",
    "max_output_tokens",
    "agent_options",
    "conversation",
    "created_at",
)


def event_append_claim(
    *, turn_id: int, job_id: str, count: int, events: Callable[[ClaimedTurn], Sequence[NewEvent]]
) -> tuple[ClaimedTurn, list[TurnEvent]] | None:
    """Claim a queued turn and append its first ``count`` events, in the
    caller's transaction.

    One ``UPDATE … WHERE status = 'queued' … RETURNING`` sets the turn
    running under claim token ``job_id`` (``heartbeat_at``, ``phase = act``,
    ``started_at`` if unset, ``attempts`` at least 1) and reserves ``count``
    seqs; one ``INSERT`` then writes ``events(turn)``, built from the claimed
    row (e.g. with its attempt number). A conditional update is the claim, as
    in healthchecks' ``sendalerts``; making it the statement that reserves the
    seqs, and returning only the columns a driver needs, saves reading the row
    back and a second update.

    Returns ``(turn as claimed, its new events)``, or ``None`` when the turn
    is not queued (a duplicate delivery, already taken, gone) — nothing is
    written then. Raises ``ValueError`` when ``events(turn)`` does not give
    ``count`` events of known types (roll the transaction back).
    """
    if count < 1:
        raise ValueError("a claim appends at least one event")
    now = timezone.now()
    turn = turn_claim_update(turn_id=turn_id, job_id=job_id, count=count, now=now)
    if turn is None:
        return None
    new = list(events(turn))
    events_check(new)
    if len(new) != count:
        raise ValueError(f"the claim reserved {count} seqs but {len(new)} events were given")
    rows = events_insert_reserved(turn_id=turn_id, after=turn.last_seq - count, events=new, now=now)
    return turn, rows


def turn_claim_update(*, turn_id: int, job_id: str, count: int, now: datetime) -> ClaimedTurn | None:
    """The claim's one statement (see ``event_append_claim``), in the
    caller's transaction: the turn as claimed, its ``last_seq`` advanced by
    ``count``; ``None`` when it is not queued. The caller inserts the
    ``count`` events (``event_append_claim``; the group-commit writer, with
    its batch's, ``turns.driver.writer``)."""
    connection = connections[Turn.objects.db]

    def prep(name: str, value: Any) -> Any:
        return concrete_field(Turn, name).get_db_prep_save(value, connection)

    text = turn_claim_sql(
        connection,
        table=Turn._meta.db_table,
        pk=pk_column(Turn),
        returning=tuple(column_of(Turn, name) for name in _CLAIM_COLUMNS),
    )
    params = [
        TurnStatus.RUNNING,
        prep("heartbeat_at", now),
        job_id,
        prep("updated_at", now),
        TurnPhase.ACT,
        prep("started_at", now),
        count,
        turn_id,
        TurnStatus.QUEUED,
    ]
    claimed, _ = execute(connection, text, params)
    row = claimed[0] if claimed else None
    if row is None:
        return None
    values = dict(zip((*_CLAIM_COLUMNS, "fresh"), row, strict=True))
    max_output = values["max_output_tokens"]
    return ClaimedTurn(
        id=turn_id,
        question=values["question"],
        context=_json_value(values["context"]),
        meta=_json_value(values["meta"]),
        timings=_json_value(values["timings"]),
        attempts=int(values["attempts"]),
        max_steps=int(values["max_steps"]),
        job_id=values["job_id"],
        last_seq=int(values["last_seq"]),
        fresh=bool(values["fresh"]),
        max_output_tokens=int(max_output) if max_output is not None else None,
        agent_options=_json_value(values["agent_options"]),
        conversation_id=values["conversation"],
        created_at=values["created_at"],
    )


def _json_value(raw: Any) -> dict[str, Any]:
    """A JSON column read by a plain cursor: text on SQLite, and on
    PostgreSQL too (Django loads jsonb as text and decodes it in the field)."""
    value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return dict(value or {})


def turn_claim(*, turn_id: int, job_id: str = "") -> ClaimedTurn | None:
    """Claim a queued turn for this job: ``queued → running`` by a conditional
    update, with its ``turn.started`` and ``phase: act`` events
    (``event_append_claim``). Returns the turn as claimed — ``fresh`` when it
    never ran before, so there is no recorded step to rebuild — or ``None``
    when someone else has it (or it is no longer queued); then nothing is
    written. (healthchecks ``sendalerts``.)

    The claim stores a token unique to this claim in ``turn.job_id`` (the job
    id plus a random suffix); every later write of this driver is conditional
    on it (``event_append_many(holder=…)``).
    """
    token = claim_token(job_id)
    with transaction.atomic():
        claimed = event_append_claim(turn_id=turn_id, job_id=token, count=2, events=claim_events)
    return None if claimed is None else claimed[0]


def claim_token(job_id: str) -> str:
    """The claim token a claim by job ``job_id`` stores in ``Turn.job_id``:
    the job id (at most 40 characters; ``inline`` for none) and a random suffix."""
    return f"{job_id[:40] or 'inline'}:{uuid.uuid4().hex[:16]}"


def claim_events(turn: ClaimedTurn) -> list[NewEvent]:
    """A claim's two events: ``turn.started`` (its attempt, its token) and ``phase: act``."""
    return [
        NewEvent(EventType.TURN_STARTED, TurnStartedData(attempt=turn.attempts, job_id=turn.job_id)),
        NewEvent(EventType.PHASE, PhaseData(phase=TurnPhase.ACT)),
    ]


logger = logging.getLogger(__name__)

#: How often the driver looks at the cancel flag while a turn runs, and polls
#: a pending approval (seconds). Read at call time (``watch.CANCEL_POLL_S``),
#: so a test may shorten it.
CANCEL_POLL_S = 0.5
#: How long the watcher thread stays (without querying) after its last turn
#: left, before it exits and closes its connection (seconds).
LINGER_S = 1.0

_ACTIVE = (TurnStatus.RUNNING, TurnStatus.WAITING)
# Ends only the turn's own driver writes (an interrupted turn was swept by someone else).
_FINISHED = (TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELLED)


def turns_poll(*, holders: Mapping[int, str], beat: bool) -> dict[int, tuple[bool, bool | None]]:
    """For each watched turn (``turn id → claim token``): ``(cancel flag,
    still held)``. One statement for any number of turns.

    With ``beat``: an ``UPDATE … RETURNING`` writes the heartbeat of every
    turn still held by its token (rows locked in id order first, see the
    module docstring) and returns their flags; a turn it did not return is
    ``None`` (not known this tick: the next plain poll tells). Without: a
    ``SELECT`` of every watched turn; one no longer running under its token
    is ``False``, one not visible at all (deleted, or not committed where
    this connection could see it) ``None`` — its driver's next write tells.
    """
    if not holders:
        return {}
    connection = connections[Turn.objects.db]
    table, pk = Turn._meta.db_table, pk_column(Turn)
    ids = sorted(holders)
    if beat:
        text = turns_beat_sql(connection, table=table, pk=pk, count=len(ids))
        now = concrete_field(Turn, "heartbeat_at").get_db_prep_save(timezone.now(), connection)
        params: list[Any] = [now, *ids, *(holders[i] for i in ids), *_ACTIVE]
    else:
        text = turns_poll_sql(connection, table=table, pk=pk, count=len(ids))
        params = list(ids)
    rows, _ = execute(connection, text, params)
    seen = {
        int(turn_id): (bool(flag), _held(job_id, status, holders.get(int(turn_id))))
        for turn_id, job_id, status, flag in rows
    }
    return {turn_id: seen.get(turn_id, (False, None)) for turn_id in holders}


def _held(job_id: str, status: str, holder: str | None) -> bool | None:
    """Whether a turn row is still held by ``holder``: ``None`` when its own
    driver has just ended it (a terminal status under the same token, seen
    before the driver stops watching: not a lost claim), else whether it is
    running or waiting under that token."""
    if job_id == holder and status in _FINISHED:
        return None
    return job_id == holder and status in _ACTIVE


@dataclass(frozen=True)
class _Watched:
    holder: str
    cancel: asyncio.Event
    loop: asyncio.AbstractEventLoop


class TurnWatcher:
    """Watches every turn driven in this process (see the module docstring).

    ``add`` and ``discard`` are called by drivers from any thread (on their
    event loop); the polling runs on the watcher's own thread. A failed poll
    (the database restarting) is logged, the broken connection closed, and
    the next tick reconnects.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[int, _Watched] = {}
        self._thread: threading.Thread | None = None
        #: set while no turn is watched and the thread holds no connection
        self._idle = threading.Event()
        self._idle.set()
        #: statements run (a test counts them)
        self.polls = 0

    def add(self, *, turn_id: int, holder: str, cancel: asyncio.Event) -> None:
        """Watch turn ``turn_id`` held under claim token ``holder``; ``cancel``
        is set (on the caller's running loop) when its flag is set or the
        claim is lost."""
        watched = _Watched(holder=holder, cancel=cancel, loop=asyncio.get_running_loop())
        with self._lock:
            self._turns[turn_id] = watched
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentlab-turn-watch", daemon=True)
                self._thread.start()

    def discard(self, turn_id: int, holder: str) -> None:
        """Stop watching ``turn_id`` if it is still watched under ``holder``."""
        with self._lock:
            current = self._turns.get(turn_id)
            if current is not None and current.holder == holder:
                del self._turns[turn_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._turns)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no turn is watched and the watcher's connection is
        closed (``InlineExecutor.stop`` does, before its own connections);
        returns whether it happened within ``timeout`` seconds."""
        return self._idle.wait(timeout)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to exit (it does ``LINGER_S`` after the last
        turn left); tests call this before the database is dropped."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        try:
            self._watch()
        finally:
            connections.close_all()  # this thread's own connections
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None  # gone for any reason: the next add() starts one
                if not self._turns:
                    self._idle.set()

    def _watch(self) -> None:
        beat_every = max(CANCEL_POLL_S, min(float(settings.HEARTBEAT_S), float(settings.TURN_STALE_S) / 4))
        last_beat = time.monotonic()
        idle_since: float | None = None
        while True:
            time.sleep(CANCEL_POLL_S)
            with self._lock:
                watched = dict(self._turns)
                if not watched:
                    if idle_since is None:
                        idle_since = time.monotonic()
                        # no connection kept while no turn runs (a test
                        # database must be droppable after its last turn)
                        connections.close_all()
                        self._idle.set()
                    if time.monotonic() - idle_since >= LINGER_S:
                        self._thread = None
                        return
                    continue
            idle_since = None
            beat = time.monotonic() - last_beat >= beat_every
            try:
                states = turns_poll(holders={t: w.holder for t, w in watched.items()}, beat=beat)
            except DatabaseError as exc:
                # an outage: the turns' own writes fail and say so (run_eval
                # exits 75 with one line); no traceback from here on top
                logger.info("turn watch: polling %d turns failed: %s", len(watched), exc)
                connections_retire_broken()
                continue
            except Exception:  # the thread must outlive any one failed tick
                logger.warning("turn watch: polling %d turns failed", len(watched), exc_info=True)
                continue
            finally:
                self.polls += 1
            if beat:
                last_beat = time.monotonic()
            for turn_id, w in watched.items():
                flagged, held = states[turn_id]
                if flagged or held is False:
                    self._cancel(turn_id, w, lost=held is False)

    def _cancel(self, turn_id: int, watched: _Watched, *, lost: bool) -> None:
        with self._lock:
            if self._turns.get(turn_id) is not watched:
                return
        if lost:
            logger.warning("turn %s: the claim %s was lost; stopping", turn_id, watched.holder)
        try:
            watched.loop.call_soon_threadsafe(watched.cancel.set)
        except RuntimeError:  # its loop has closed: the driver is gone already
            self.discard(turn_id, watched.holder)


_watcher = TurnWatcher()


def turn_watcher() -> TurnWatcher:
    """The process's ``TurnWatcher``."""
    return _watcher

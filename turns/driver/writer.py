"""The group-commit writer of the event log (issue 44;
docs/architecture.md#the-group-commit-writer).

A driver's every step is durable before its next one starts; with 32 or 256
turns in flight, the steps that become durable in the same few milliseconds
share one transaction instead of taking one each — the group commit of
PostgreSQL (``commit_delay``), of Kafka's producer batches, of SQLite's one
WAL writer.

``GroupWriter`` is one thread with one connection per ``DatabaseThreads``
pool (``turn_writer(db)``). Callers hand it an append (``AppendRequest``:
``event_append_many``'s arguments and a ``then`` hook that must commit with
it) or a claim (``ClaimRequest``: ``lease.turn_claim``'s) and await their
own part's outcome (``append``; ``events_write`` and ``claim_write`` are
the coroutines drivers call). The thread takes the
first waiting request, then whatever else arrives within
``AGENTLAB_WRITER_WAIT_MS`` up to ``AGENTLAB_WRITER_BATCH`` requests, and
writes them in one transaction (``turns.events.event_append_batch``); every
caller is answered only after the commit, each with its own events or its own
error (``TurnNotHeld`` for a turn whose claim is gone, ``ValueError`` for a
bad payload) while the rest of the batch commits. A batch that fails as a
whole (a ``then`` that raised, a value the database refused, a lost
connection) is rolled back and written again request by request, so one bad
request fails alone. A batch of one request is written the way it always
was (``event_append_many``, called through its module, then ``then``), which
is no dearer for one turn.

``AGENTLAB_WRITER_BATCH=0`` turns the writer off: ``append`` then runs
``event_append_many`` on a pool thread, one transaction per append, as
before the writer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from common.db import IDLE_CHECK_S, DatabaseThreads, connections_retire_broken

# called through the module, so that a test can break every write of the driver at once
from turns import events as event_log
from turns.driver.lease import (
    ClaimedTurn,
    claim_events,
    claim_token,
    event_append_claim,
    turn_claim_update,
)
from turns.events import AppendRequest, NewEvent, events_reserved_rows
from turns.models import TurnEvent

logger = logging.getLogger(__name__)

_STOP = object()


@dataclass(frozen=True)
class ClaimRequest:
    """A claim of a queued turn (``lease.turn_claim``) under claim token
    ``token`` (``lease.claim_token``); its outcome is the ``ClaimedTurn``, or
    ``None`` when the turn was not queued."""

    turn_id: int
    token: str


class _Part:
    """A queued request, the future its caller awaits, and the caller's
    context (contextvars) its ``then`` runs in."""

    __slots__ = ("context", "future", "request")

    def __init__(self, request: AppendRequest | ClaimRequest) -> None:
        self.request = request
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        then = request.then if isinstance(request, AppendRequest) else None
        self.context = contextvars.copy_context() if then is not None else None


class GroupWriter:
    """One writer thread that group-commits event appends (see the module
    docstring). ``max_batch``: the most requests per transaction (≥ 1);
    ``max_wait_s``: how long the thread waits for more after the first
    (0: it takes only what is already queued) — only while the last batch
    had more than one request: a lone writer (one chat turn) is not kept
    waiting for company that is not coming, while under load every batch
    waits. ``close()`` writes what is queued, stops the thread and closes
    its connection.

    ``batches`` and ``requests`` count the transactions written and the
    requests in them (retries included), for tests and benchmarks."""

    def __init__(self, *, max_batch: int, max_wait_s: float) -> None:
        if max_batch < 1 or max_wait_s < 0:
            raise ValueError(
                f"GroupWriter needs max_batch ≥ 1 and max_wait_s ≥ 0, not {max_batch}, {max_wait_s}"
            )
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._used_at = time.monotonic()
        #: whether the last batch had company (wait for more while it had)
        self._busy = True
        self.batches = 0
        self.requests = 0

    def submit(self, request: AppendRequest | ClaimRequest) -> concurrent.futures.Future[Any]:
        """Queue ``request``; the future gets its outcome once committed (an
        append's events, a claim's ``ClaimedTurn`` or ``None``) or its error.
        Raises ``RuntimeError`` after ``close()``."""
        part = _Part(request)
        with self._lock:
            if self._closed:
                raise RuntimeError("the event writer is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentlab-event-writer", daemon=True)
                self._thread.start()
            self._queue.put(part)
        return part.future

    async def append(self, request: AppendRequest | ClaimRequest) -> Any:
        """``request``'s outcome once its batch has committed (see ``submit``);
        raises what ``event_append_many`` (or the claim) raises for it."""
        return await asyncio.wrap_future(self.submit(request))

    def close(self) -> None:
        """Write what is queued, then stop the thread (its connection closed)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()

    def _run(self) -> None:
        try:
            while (batch := self._take()) is not None:
                try:
                    self._write(batch)
                except BaseException as exc:  # the thread must outlive any one batch
                    logger.exception("event writer: a batch could not be answered")
                    for part in batch:
                        if not part.future.done():
                            part.future.set_exception(exc)
        finally:
            connections.close_all()  # this thread's own connection

    def _take(self) -> list[_Part] | None:
        """The next batch (``None``: stop, after the queued ones are written)."""
        first = self._queue.get()
        if first is _STOP:
            return None
        batch: list[_Part] = [first]
        deadline = time.monotonic() + (self.max_wait_s if self._busy else 0.0)
        while len(batch) < self.max_batch:
            try:
                wait = deadline - time.monotonic()
                nxt = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if nxt is _STOP:
                self._queue.put(_STOP)  # after this batch
                break
            batch.append(nxt)
        self._busy = len(batch) > 1
        return batch

    def _write(self, batch: list[_Part]) -> None:
        """Write ``batch`` in one transaction and answer its callers; a batch
        that fails as a whole is written again request by request."""
        self.batches += 1
        self.requests += len(batch)
        try:
            if time.monotonic() - self._used_at > IDLE_CHECK_S:
                connections_retire_broken()  # as DatabaseThreads does before a call on an idle connection
            if len(batch) == 1:
                outcomes: list[Any] = [_write_one(batch[0])]
            else:
                outcomes = _write_many(batch)
        except BaseException as exc:  # handed to the caller, whatever it is
            if isinstance(exc, DatabaseError):
                connections_retire_broken()
            if len(batch) == 1:
                _answer(batch[0], exc)
            else:
                logger.info("event writer: a batch of %d failed (%s); writing it one by one", len(batch), exc)
                for part in batch:
                    self._write([part])
            return
        finally:
            self._used_at = time.monotonic()
        for part, outcome in zip(batch, outcomes, strict=True):
            _answer(part, outcome)


def _answer(part: _Part, outcome: Any) -> None:
    if isinstance(outcome, BaseException):
        part.future.set_exception(outcome)
    else:
        part.future.set_result(outcome)


def _write_one(part: _Part) -> Any:
    """One request as it was written before the writer — ``event_append_many``
    and its ``then``, or ``event_append_claim`` — in one transaction."""
    request = part.request
    with transaction.atomic():
        if isinstance(request, ClaimRequest):
            claimed = event_append_claim(
                turn_id=request.turn_id, job_id=request.token, count=2, events=claim_events
            )
            return None if claimed is None else claimed[0]
        rows = event_log.event_append_many(
            turn_id=request.turn_id,
            events=request.events,
            turn_fields=request.turn_fields,
            holder=request.holder,
        )
        if request.then is not None:
            assert part.context is not None
            part.context.run(request.then)
    return rows


def _write_many(batch: list[_Part]) -> list[Any]:
    """Several requests in one transaction: the claims first, in turn id
    order, each one statement (``turn_claim_update``), their events joining
    the appends' one ``INSERT`` (``event_append_batch``, each ``then`` in its
    caller's context). Outcomes in ``batch`` order."""
    now = timezone.now()
    outcomes: dict[int, Any] = {}
    reserved: list[TurnEvent] = []
    appends: list[tuple[int, AppendRequest]] = []
    claims = sorted(
        ((i, p.request) for i, p in enumerate(batch) if isinstance(p.request, ClaimRequest)),
        key=lambda item: item[1].turn_id,
    )
    with transaction.atomic():
        for i, claim in claims:
            turn = turn_claim_update(turn_id=claim.turn_id, job_id=claim.token, count=2, now=now)
            outcomes[i] = turn
            if turn is not None:
                events = claim_events(turn)
                reserved += events_reserved_rows(
                    turn_id=turn.id, after=turn.last_seq - len(events), events=events, now=now
                )
        for i, part in enumerate(batch):
            if isinstance(part.request, AppendRequest):
                appends.append((i, _with_context(part)))
        written = event_log.event_append_batch([r for _, r in appends], reserved=reserved, now=now)
    outcomes.update((i, outcome) for (i, _), outcome in zip(appends, written, strict=True))
    return [outcomes[i] for i in range(len(batch))]


def _with_context(part: _Part) -> AppendRequest:
    """``part``'s append, its ``then`` (if any) run in its caller's context."""
    request = part.request
    assert isinstance(request, AppendRequest)
    if request.then is None:
        return request
    assert part.context is not None
    return AppendRequest(
        turn_id=request.turn_id,
        events=request.events,
        turn_fields=request.turn_fields,
        holder=request.holder,
        then=_in_context(part.context, request.then),
        prepared=request.prepared,
    )


def _in_context(context: contextvars.Context, fn: Callable[[], None]) -> Callable[[], None]:
    return lambda: context.run(fn)


def turn_writer(db: DatabaseThreads) -> GroupWriter:
    """The event writer of ``db``'s pool, started on first use and closed
    with the pool (``AGENTLAB_WRITER_BATCH``, ``AGENTLAB_WRITER_WAIT_MS``)."""
    return db.companion(
        "turns.driver.writer",
        lambda: GroupWriter(
            max_batch=max(1, int(settings.AGENTLAB_WRITER_BATCH)),
            max_wait_s=float(settings.AGENTLAB_WRITER_WAIT_MS) / 1000,
        ),
    )


async def events_write(
    db: DatabaseThreads,
    *,
    turn_id: int,
    events: Sequence[NewEvent],
    turn_fields: Mapping[str, Any] | None = None,
    holder: str | None = None,
    then: Callable[[], None] | None = None,
) -> list[TurnEvent]:
    """``event_append_many`` (its arguments, returns and errors) from a
    coroutine, through ``db``'s group-commit writer; ``then`` runs in the
    same transaction after the turn row has its new fields (a terminal
    event's ``TurnPolicy.on_finish``). Returns once the events are durable.
    With ``AGENTLAB_WRITER_BATCH=0`` (or a ``db`` that keeps no writer,
    ``_writer_of``): through ``db.run``, a transaction of its own."""
    request = AppendRequest(turn_id=turn_id, events=events, turn_fields=turn_fields, holder=holder, then=then)
    writer = _writer_of(db)
    if writer is None:
        return await db.run(_write_alone, request)
    return await writer.append(request)


async def claim_write(db: DatabaseThreads, *, turn_id: int, job_id: str = "") -> ClaimedTurn | None:
    """``lease.turn_claim`` (its arguments and returns) from a coroutine,
    through ``db``'s group-commit writer: the claim's statement and events
    share a transaction with whatever else is queued. With
    ``AGENTLAB_WRITER_BATCH=0``: on one of ``db``'s threads."""
    request = ClaimRequest(turn_id=turn_id, token=claim_token(job_id))
    writer = _writer_of(db)
    if writer is None:
        return await db.run(_write_alone, request)
    return await writer.append(request)


def _writer_of(db: DatabaseThreads) -> GroupWriter | None:
    """``db``'s writer; ``None`` when the writer is off
    (``AGENTLAB_WRITER_BATCH=0``) or ``db`` is not a pool that can keep one
    (a stand-in whose ``run`` calls on the caller's thread, in its
    transaction: a writer thread would not see that transaction's rows)."""
    if int(settings.AGENTLAB_WRITER_BATCH) < 1 or not hasattr(db, "companion"):
        return None
    return turn_writer(db)


def _write_alone(request: AppendRequest | ClaimRequest) -> Any:
    return _write_one(_Part(request))

"""The replay-then-live contract of a turn's event log, for any transport
(docs/architecture.md#streaming-replay-then-live).

One implementation serves the websocket consumer (``turns.consumers``) and
the server-sent-events view (``turns.sse``): a ``TurnStream`` holds the
stream's position (``last_sent``) and decides what to send; a
``StreamTransport`` only puts frames on its wire. The rules (Zulip
``do_events_register``: subscribe, snapshot, apply what arrived in between,
dropping what was already sent by seq):

1. the caller joins the turn's doorbell group **first**, so no doorbell rung
   after the replay read can be missed, then calls ``start()``, which replays
   ``seq > after`` from the database;
2. ``doorbell(message)``: if the first carried event newer than
   ``last_sent`` is exactly ``last_sent + 1`` the carried events are sent
   (no query — the usual case); if it is further ahead a doorbell was lost,
   so the gap ``seq > last_sent`` is read from the database instead;
   anything ``<= last_sent`` is dropped;
3. ``tick(last_seq)`` (the shared heartbeat ticker, every ``HEARTBEAT_S``):
   if the turn's ``last_seq`` is beyond ``last_sent`` the gap is read, then
   a heartbeat is sent, so a lost doorbell only delays an event until the
   tick;
4. after the terminal event: an end frame with the turn's status, and the
   transport closes.

Each seq is sent exactly once and never skipped; a per-stream
``asyncio.Lock`` keeps a doorbell and a tick from interleaving their
read-then-send.

What both transports share lives here too: the stream pool, the threads the
stream reads run on (``stream_db``; not Channels' ``database_sync_to_async``,
which funnels every query of the process through one thread), and the
heartbeat ticks, one ``StreamTicker`` per event loop rather than a task per
connection. A task per connection made one event read per socket per
``HEARTBEAT_S``; sockets opened in a burst (1,000 in a few seconds) then
ticked in a burst too, a thousand reads through the stream pool that
stalled the loop while other turns streamed. The shared ticker wakes every
``min(TICK_STEP_S, HEARTBEAT_S / 4)``, takes the streams whose heartbeat is
due, reads the ``last_seq`` of all their turns in one query, lets only those
that are behind read their gap, and sends each its heartbeat. A stream's
first tick is due at a random phase within ``HEARTBEAT_S`` of joining and
then every ``HEARTBEAT_S``, so a burst of connections does not tick
together. An event whose doorbell was lost is thus at most about
``HEARTBEAT_S + TICK_STEP_S`` late. Reading ``last_seq`` is enough to know
whether anything is missing because it is advanced in the same transaction
that inserts the events (``turns.events``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from django.conf import settings
from django.db import DatabaseError, connection

from common.db import DatabaseThreads
from turns.models import TERMINAL_EVENT_TYPES, EventType, Turn, TurnStatus
from turns.selectors import events_after

logger = logging.getLogger(__name__)

#: Events read from the database per query when replaying or filling a gap.
REPLAY_BATCH = 500

END_STATUS = {
    EventType.TURN_ANSWERED: TurnStatus.SUCCEEDED,
    EventType.TURN_ASKED: TurnStatus.SUCCEEDED,
    EventType.TURN_FAILED: TurnStatus.FAILED,
    EventType.TURN_CANCELLED: TurnStatus.CANCELLED,
}
TERMINAL = frozenset(str(t) for t in TERMINAL_EVENT_TYPES)
END_STATUSES = frozenset({TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELLED})

#: How long a stream stays open after a ``turn.answered`` whose review is still
#: running (``review_pending``) for that review to arrive (seconds); it ends
#: when the late ``review`` event is sent, or after this.
LATE_REVIEW_STREAM_S = 120.0

#: ``read(turn_id, after, limit)`` → event frames with ``seq > after``, oldest first.
ReadFrames = Callable[[int, int, int], Awaitable[list[dict[str, Any]]]]


class StreamTransport(Protocol):
    """What a transport does with the frames a ``TurnStream`` decides on."""

    async def send_event(self, frame: dict[str, Any]) -> None:
        """Send one event frame (``{"seq", "type", "data", "at"}``)."""

    async def send_heartbeat(self) -> None:
        """Send a heartbeat (no seq)."""

    async def send_end(self, status: str) -> None:
        """Send the end of the stream with the turn's ``status``, then close."""


class Ticking(Protocol):
    """What the heartbeat ticker (:class:`StreamTicker`) serves."""

    turn_id: int

    async def _tick(self, last_seq: int | None) -> None: ...


def parse_after(raw: str | None) -> int | None:
    """The ``after`` seq a client sent (``?after=`` or ``Last-Event-ID``): ASCII
    digits, at most 18 (surrounding whitespace ignored); ``None`` (not sent)
    means 0; anything else — ``""``, ``-1``, ``٣`` (an Arabic-Indic digit,
    which ``str.isdigit`` and ``int`` accept) — is ``None`` (refused)."""
    if raw is None:
        return 0
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        return None
    return int(raw)


class TurnStream:
    """One subscriber's stream of turn ``turn_id`` (see the module docstring).

    ``after`` is the last seq the client has; ``read`` reads frames from the
    database. Register the stream with the heartbeat ticker after
    ``start()`` unless ``ended``; ``stop()`` when the client goes away.
    """

    def __init__(self, *, turn_id: int, after: int, transport: StreamTransport, read: ReadFrames) -> None:
        self.turn_id = turn_id
        self.last_sent = after
        self.transport = transport
        self._read = read
        self.ended = False
        self._lock = asyncio.Lock()
        #: a terminal event was sent whose late review is awaited: its end
        #: status and when it was sent (``time.monotonic()``)
        self._awaiting_review: tuple[str, float] | None = None

    async def start(self, *, status: str, last_seq: int) -> None:
        """Replay ``seq > after``; a finished turn whose log the client
        already has (``status``/``last_seq`` read before joining) just ends."""
        async with self._lock:
            await self._catch_up()
            if not self.ended and status in END_STATUSES and self.last_sent >= last_seq:
                # The client saw the terminal event but not the end frame
                # (or waits for its late review: then the stream waits too).
                last = await self._read(self.turn_id, last_seq - 1, 1) if last_seq else []
                if last and _review_pending(last[-1]):
                    self._awaiting_review = (status, time.monotonic())
                else:
                    await self._end(status)

    def stop(self) -> None:
        """The client went away: send nothing more."""
        self.ended = True

    async def doorbell(self, message: dict[str, Any]) -> None:
        """``{"type": "turn.doorbell", "events": [frame, …]}`` (``turns.doorbell``)."""
        if self.ended:
            return
        async with self._lock:
            if self.ended:
                return
            # A doorbell may carry the frames of several coalesced rings, not
            # necessarily in seq order: use only the run that continues the
            # stream exactly, and read anything beyond it from the database.
            frames = sorted(
                (f for f in message.get("events") or () if f.get("seq", 0) > self.last_sent),
                key=lambda f: f["seq"],
            )
            if not frames:
                return  # all of it was sent already (replayed, or read on a tick)
            run = [f for i, f in enumerate(frames) if f["seq"] == self.last_sent + 1 + i]
            try:
                if run:
                    await self._send_frames(run)
                if len(run) < len(frames) and not self.ended:
                    await self._catch_up()  # a doorbell went missing: read the gap
            except DatabaseError:
                logger.warning(
                    "turn %s stream: gap read failed; the next tick retries", self.turn_id, exc_info=True
                )

    async def tick(self, last_seq: int | None) -> None:
        """A heartbeat tick: read the gap if the turn's ``last_seq`` (``None``:
        not known) is beyond ``last_sent``, then send a heartbeat."""
        async with self._lock:
            if self.ended:
                return
            if last_seq is not None and last_seq > self.last_sent:
                try:
                    await self._catch_up()
                except DatabaseError:
                    logger.warning("turn %s stream: tick read failed", self.turn_id, exc_info=True)
                if self.ended:
                    return
            if self._awaiting_review and time.monotonic() - self._awaiting_review[1] > LATE_REVIEW_STREAM_S:
                await self._end(self._awaiting_review[0])  # the review never came (its worker stopped)
                return
            await self.transport.send_heartbeat()

    # the ticker's name for it (:class:`StreamTicker`)
    _tick = tick

    # --- sending (always under self._lock) ------------------------------------

    async def _catch_up(self) -> None:
        """Send everything after ``last_sent`` from the database, in batches.

        Whether the stream ends is decided on the newest frame once a read
        comes back short: a full batch whose last frame is terminal may still
        be followed (by a late review), and if it is not, the short (empty)
        read after it is what says so."""
        newest: dict[str, Any] | None = None
        while not self.ended:
            frames = await self._read(self.turn_id, self.last_sent, REPLAY_BATCH)
            if frames:
                await self._send_frames(frames, may_end=False)
                newest = frames[-1]
            if len(frames) < REPLAY_BATCH:
                if newest is not None and not self.ended:
                    await self._end_after(newest)
                return

    async def _send_frames(self, frames: list[dict[str, Any]], *, may_end: bool = True) -> None:
        """Send consecutive frames starting at ``last_sent + 1``; with
        ``may_end``, then end the stream if the newest one ends it (``_end_after``)."""
        for frame in frames:
            seq = frame["seq"]
            if seq <= self.last_sent:
                continue
            if seq != self.last_sent + 1:  # never skip: the caller reads the gap instead
                raise AssertionError(f"turn {self.turn_id}: seq {seq} after {self.last_sent}")
            await self.transport.send_event(frame)
            self.last_sent = seq
            if frame["type"] in TERMINAL:  # an answer whose review follows, or an end
                pending = _review_pending(frame)
                self._awaiting_review = (END_STATUS[frame["type"]], time.monotonic()) if pending else None
        if may_end:
            await self._end_after(frames[-1])

    async def _end_after(self, last: dict[str, Any]) -> None:
        """End the stream if ``last``, the newest frame known, was sent and is
        terminal — or, for an answer whose review was still running, is that
        late ``review``."""
        if last["seq"] != self.last_sent:
            return
        if self._awaiting_review is not None:
            if last["type"] == EventType.REVIEW:
                await self._end(self._awaiting_review[0])
        elif last["type"] in TERMINAL:
            await self._end(END_STATUS[last["type"]])

    async def _end(self, status: str) -> None:
        self.ended = True
        await self.transport.send_end(str(status))


def _review_pending(frame: dict[str, Any]) -> bool:
    """Whether ``frame`` is a ``turn.answered`` whose review was still running
    when it was written (the review follows it as a late ``review`` event)."""
    return frame["type"] == EventType.TURN_ANSWERED and bool((frame.get("data") or {}).get("review_pending"))


#: The longest the shared ticker sleeps between looking for due heartbeats
#: (seconds); it never sleeps more than a quarter of ``HEARTBEAT_S``.
TICK_STEP_S = 0.5


#: Turns whose ``last_seq`` one tick query reads at most (SQLite's bound on
#: query parameters is the tighter one).
TICK_BATCH = 500


_db: DatabaseThreads | None = None


_db_lock = threading.Lock()


def stream_db() -> DatabaseThreads:
    """The process's pool for stream reads. Not Channels' ``database_sync_to_async``,
    which funnels every query of the process through one thread."""
    global _db
    with _db_lock:
        if _db is None:
            _db = DatabaseThreads(max_workers=8)
        return _db


def stream_db_close() -> None:
    """Close the pool and its connections (tests; a process that stops serving)."""
    global _db
    with _db_lock:
        pool, _db = _db, None
    if pool is not None:
        pool.close()


def _reading(fn: Any, *args: Any) -> Any:
    # A pool thread has no request cycle to retire a broken connection (a
    # database restart): drop it on error so the next read reconnects.
    try:
        return fn(*args)
    except DatabaseError:
        connection.close()
        raise


def _turn_access(turn_id: int) -> tuple[int, str, int] | None:
    """(owner id, status, last_seq) of a turn, or ``None``."""
    return Turn.objects.filter(pk=turn_id).values_list("owner_id", "status", "last_seq").first()


def stream_frames_after(turn_id: int, after: int, limit: int = REPLAY_BATCH) -> list[dict[str, Any]]:
    """Event frames of a turn with ``seq > after``, oldest first (one query)."""
    return [event.as_frame() for event in events_after(turn_id=turn_id, after=after, limit=limit)]


async def read_frames(turn_id: int, after: int, limit: int) -> list[dict[str, Any]]:
    """``stream_frames_after`` on the stream pool (``turns.live.ReadFrames``)."""
    frames: list[dict[str, Any]] = await stream_db().run(_reading, stream_frames_after, turn_id, after, limit)
    return frames


async def turn_access(turn_id: int) -> tuple[int, str, int] | None:
    """(owner id, status, last_seq) of a turn, or ``None``, on the stream pool."""
    access: tuple[int, str, int] | None = await stream_db().run(_reading, _turn_access, turn_id)
    return access


def turns_last_seq(turn_ids: Iterable[int]) -> dict[int, int]:
    """``{turn id: last_seq}`` of the given turns, one query per ``TICK_BATCH``
    ids; a turn that does not exist (any more) is left out."""
    ids = sorted(set(turn_ids))
    found: dict[int, int] = {}
    for start in range(0, len(ids), TICK_BATCH):
        found.update(
            Turn.objects.filter(pk__in=ids[start : start + TICK_BATCH]).values_list("pk", "last_seq")
        )
    return found


class StreamTicker:
    """The heartbeat ticks of all stream consumers on one event loop.

    ``add(consumer)`` makes its first tick due at a random phase within
    ``HEARTBEAT_S`` (seconds, read from settings on each step) and the next
    ones every ``HEARTBEAT_S`` after that; ``discard(consumer)`` stops them.
    While any consumer is registered a task wakes every
    ``min(TICK_STEP_S, HEARTBEAT_S / 4)`` seconds and runs ``tick()``. The
    task ends when the last consumer leaves and starts again with the next.

    Use ``stream_ticker()`` to get the running loop's ticker; its methods must
    be called on that loop.
    """

    def __init__(self) -> None:
        #: consumer → loop time (seconds) its next tick is due
        self._due: dict[Ticking, float] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._due

    @property
    def running(self) -> bool:
        """Whether the ticking task is alive (only while consumers are registered)."""
        return self._task is not None and not self._task.done()

    def add(self, consumer: Ticking) -> None:
        """Register ``consumer`` for heartbeat ticks (again: no change)."""
        if consumer in self._due:
            return
        loop = asyncio.get_running_loop()
        self._due[consumer] = loop.time() + random.uniform(0, float(settings.HEARTBEAT_S))
        if not self.running:
            self._task = loop.create_task(self._run(), name="turn-stream-ticker")

    def discard(self, consumer: Ticking) -> None:
        """Stop ticking for ``consumer`` (not registered: no change)."""
        self._due.pop(consumer, None)

    async def _run(self) -> None:
        try:
            while self._due:
                await asyncio.sleep(min(TICK_STEP_S, float(settings.HEARTBEAT_S) / 4))
                try:
                    await self.tick()
                except Exception:  # one bad tick must not stop every stream's heartbeat
                    logger.exception("turn stream ticker: tick failed")
        finally:
            self._task = None  # a done task would keep its loop, our weak key, alive

    async def tick(self) -> None:
        """Serve the consumers whose tick is due: one ``last_seq`` query for
        all their turns, a gap read only for those behind, then a heartbeat
        each. A failed ``last_seq`` read is logged and the heartbeats still go
        out (the next tick reads again)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        every = float(settings.HEARTBEAT_S)
        due = [consumer for consumer, at in self._due.items() if at <= now]
        if not due:
            return
        for consumer in due:
            # Keep the phase: the next tick is due a period after this one
            # was, unless the loop fell more than a period behind.
            after = self._due[consumer] + every
            self._due[consumer] = after if after > now else now + every
        try:
            last_seqs = await stream_db().run(_reading, turns_last_seq, [c.turn_id for c in due])
        except DatabaseError:
            logger.warning("turn stream ticker: last_seq read failed", exc_info=True)
            last_seqs = {}
        results = await asyncio.gather(
            *(c._tick(last_seqs.get(c.turn_id)) for c in due), return_exceptions=True
        )
        for consumer, result in zip(due, results, strict=True):
            if isinstance(result, Exception):
                # Most likely a socket that went away without a disconnect.
                logger.warning(
                    "turn %s stream: tick failed; no more ticks for it", consumer.turn_id, exc_info=result
                )
                self.discard(consumer)


_tickers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StreamTicker] = weakref.WeakKeyDictionary()


def stream_ticker() -> StreamTicker:
    """The ``StreamTicker`` of the running event loop (made on first use).
    Raises ``RuntimeError`` outside a running loop."""
    loop = asyncio.get_running_loop()
    ticker = _tickers.get(loop)
    if ticker is None:
        ticker = _tickers[loop] = StreamTicker()
    return ticker

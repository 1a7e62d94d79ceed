"""Websocket stream of one turn's event log: ``ws/turns/<turn_id>/?after=<seq>``.

The protocol (DESIGN.md §5–§6): the server sends every event with ``seq >
after`` in order, then live ones, each exactly once; a ``{"type":
"heartbeat"}`` frame every ``HEARTBEAT_S``; after the terminal event a
``{"type": "stream.end", "status": <turn status>}`` frame and a normal close
(1000). Frames other than events carry no ``seq``.

How exactness is kept (Zulip ``do_events_register``: subscribe, snapshot,
apply what arrived in between, dropping what was already sent by seq):

1. join the turn's group **first**, so no doorbell rung after the replay
   read can be missed;
2. replay ``seq > after`` from the database;
3. on each doorbell: if the first carried event newer than ``last_sent`` is
   exactly ``last_sent + 1`` send the carried events (no query — the usual
   case); if it is further ahead some doorbell was lost, so read the gap
   ``seq > last_sent`` from the database instead; anything ``<= last_sent``
   is dropped;
4. on each heartbeat tick, if the turn's ``last_seq`` is beyond
   ``last_sent``, read ``seq > last_sent`` too, so a lost or dropped doorbell
   (a full channel) only delays an event until the tick.

A per-connection ``asyncio.Lock`` keeps the doorbell handler and the tick
from interleaving their read-then-send, which could otherwise send a seq twice.

The ticks come from one ``StreamTicker`` per event loop, not a task per
connection. A task per connection made one event read per socket per
``HEARTBEAT_S``; sockets opened in a burst (1,000 in a few seconds) then
ticked in a burst too, a thousand reads through the stream pool that
stalled the loop while other turns streamed. The shared ticker wakes every
``min(TICK_STEP_S, HEARTBEAT_S / 4)``, takes the consumers whose heartbeat
is due, reads the ``last_seq`` of all their turns in one query, lets only
those that are behind read their gap, and sends each its heartbeat. A
consumer's first tick is due at a random phase within ``HEARTBEAT_S`` of
joining and then every ``HEARTBEAT_S``, so a burst of connections does not
tick together. An event whose doorbell was lost is thus at most about
``HEARTBEAT_S + TICK_STEP_S`` late. Reading ``last_seq`` is enough to know
whether anything is missing because it is advanced in the same transaction
that inserts the events (``turns.events``).

Refusals: the handshake is accepted and then closed with a code, because a
websocket refused during the handshake reaches the browser only as 1006:

======  =========================================
4400    the ``after`` parameter is not an integer >= 0
4401    not logged in
4403    the turn belongs to someone else (staff see all)
4404    no such turn
======  =========================================
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import weakref
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError, connection

from common.db import DatabaseThreads

from .doorbell import turn_group
from .models import TERMINAL_EVENT_TYPES, EventType, Turn, TurnStatus
from .selectors import events_after

logger = logging.getLogger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_NORMAL = 1000

#: Events read from the database per query when replaying or filling a gap.
REPLAY_BATCH = 500
#: The longest the shared ticker sleeps between looking for due heartbeats
#: (seconds); it never sleeps more than a quarter of ``HEARTBEAT_S``.
TICK_STEP_S = 0.5
#: Turns whose ``last_seq`` one tick query reads at most (SQLite's bound on
#: query parameters is the tighter one).
TICK_BATCH = 500

_END_STATUS = {
    EventType.TURN_ANSWERED: TurnStatus.SUCCEEDED,
    EventType.TURN_ASKED: TurnStatus.SUCCEEDED,
    EventType.TURN_FAILED: TurnStatus.FAILED,
    EventType.TURN_CANCELLED: TurnStatus.CANCELLED,
}
_TERMINAL = frozenset(str(t) for t in TERMINAL_EVENT_TYPES)
_HEARTBEAT = json.dumps({"type": "heartbeat"})

# --- database reads (run on the stream pool's threads) --------------------------

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


# --- the shared heartbeat ticker ----------------------------------------------


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
        self._due: dict[TurnStreamConsumer, float] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._due

    @property
    def running(self) -> bool:
        """Whether the ticking task is alive (only while consumers are registered)."""
        return self._task is not None and not self._task.done()

    def add(self, consumer: TurnStreamConsumer) -> None:
        """Register ``consumer`` for heartbeat ticks (again: no change)."""
        if consumer in self._due:
            return
        loop = asyncio.get_running_loop()
        self._due[consumer] = loop.time() + random.uniform(0, float(settings.HEARTBEAT_S))
        if not self.running:
            self._task = loop.create_task(self._run(), name="turn-stream-ticker")

    def discard(self, consumer: TurnStreamConsumer) -> None:
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


# --- the consumer ---------------------------------------------------------------


class TurnStreamConsumer(AsyncWebsocketConsumer):
    """Streams one turn's event log exactly once per seq (see the module docstring)."""

    turn_id: int
    last_sent: int

    async def connect(self) -> None:
        raw_id = str(self.scope["url_route"]["kwargs"]["turn_id"])
        self.turn_id = int(raw_id) if raw_id.isdigit() and len(raw_id) <= 18 else 0
        self.last_sent = 0
        self._ended = False
        self._joined = False
        self._lock = asyncio.Lock()
        await self.accept()

        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        after = self._parse_after()
        if after is None:
            await self._refuse(CLOSE_BAD_REQUEST)
            return
        access = await stream_db().run(_reading, _turn_access, self.turn_id) if self.turn_id else None
        if access is None:
            await self._refuse(CLOSE_NOT_FOUND)
            return
        owner_id, status, last_seq = access
        if owner_id != user.pk and not user.is_staff:
            await self._refuse(CLOSE_FORBIDDEN)
            return

        # Join before reading: a doorbell rung after the replay's read is then
        # queued for us, and whatever it repeats is dropped by seq.
        await self.channel_layer.group_add(turn_group(self.turn_id), self.channel_name)
        self._joined = True
        self.last_sent = after
        async with self._lock:
            await self._catch_up()
            if not self._ended and status in _END_STATUSES and self.last_sent >= last_seq:
                # The client already has the whole log of a finished turn (it
                # saw the terminal event but not the end frame): just end.
                await self._end(status)
        if not self._ended:
            stream_ticker().add(self)

    async def disconnect(self, code: int) -> None:
        self._ended = True
        stream_ticker().discard(self)
        if self._joined:
            self._joined = False
            await self.channel_layer.group_discard(turn_group(self.turn_id), self.channel_name)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Run the handler of ``message["type"]`` (``ValueError`` for none).

        Channels' own ``dispatch`` first awaits ``close_old_connections()``
        on its single sync thread, for every message of every consumer: a
        thread hop per doorbell that all the process's streams queue for.
        It guards the connection that ``database_sync_to_async`` code uses;
        this consumer uses none — its reads go through ``stream_db()``, whose
        threads drop a broken connection themselves (``_reading``).
        """
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Clients have nothing to say on this stream; what they send is ignored."""

    # --- the doorbell and the tick ----------------------------------------------

    async def turn_doorbell(self, message: dict[str, Any]) -> None:
        """``{"type": "turn.doorbell", "events": [frame, …]}`` from ``turns.doorbell.ring_turn``."""
        if self._ended or not self._joined:
            return
        async with self._lock:
            if self._ended:
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
                if len(run) < len(frames) and not self._ended:
                    await self._catch_up()  # a doorbell went missing: read the gap
            except DatabaseError:
                logger.warning(
                    "turn %s stream: gap read failed; the next tick retries", self.turn_id, exc_info=True
                )

    async def _tick(self, last_seq: int | None) -> None:
        """A heartbeat tick from the ``StreamTicker``: read the gap if the
        turn's ``last_seq`` (``None``: not known) is beyond ``last_sent``,
        then send a heartbeat."""
        async with self._lock:
            if self._ended:
                return
            if last_seq is not None and last_seq > self.last_sent:
                try:
                    await self._catch_up()
                except DatabaseError:
                    logger.warning("turn %s stream: tick read failed", self.turn_id, exc_info=True)
                if self._ended:
                    return
            await self.send(text_data=_HEARTBEAT)

    # --- sending (always under self._lock) ------------------------------------

    async def _catch_up(self) -> None:
        """Send everything after ``last_sent`` from the database, in batches."""
        while not self._ended:
            frames = await stream_db().run(
                _reading, stream_frames_after, self.turn_id, self.last_sent, REPLAY_BATCH
            )
            if not frames:
                return
            await self._send_frames(frames, may_end=len(frames) < REPLAY_BATCH)
            if len(frames) < REPLAY_BATCH:
                return

    async def _send_frames(self, frames: list[dict[str, Any]], *, may_end: bool = True) -> None:
        """Send consecutive frames starting at ``last_sent + 1``; end the stream
        when the newest one is terminal (and ``may_end``)."""
        for frame in frames:
            seq = frame["seq"]
            if seq <= self.last_sent:
                continue
            if seq != self.last_sent + 1:  # never skip: the caller reads the gap instead
                raise AssertionError(f"turn {self.turn_id}: seq {seq} after {self.last_sent}")
            await self.send(text_data=json.dumps(frame, separators=(",", ":")))
            self.last_sent = seq
        last = frames[-1]
        if may_end and last["seq"] == self.last_sent and last["type"] in _TERMINAL:
            await self._end(_END_STATUS[last["type"]])

    async def _end(self, status: str) -> None:
        self._ended = True
        stream_ticker().discard(self)
        await self.send(text_data=json.dumps({"type": "stream.end", "status": str(status)}))
        await self.close(code=CLOSE_NORMAL)

    async def _refuse(self, code: int) -> None:
        self._ended = True
        await self.close(code=code)

    def _parse_after(self) -> int | None:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        raw = (query.get("after") or ["0"])[-1] or "0"
        try:
            after = int(raw)
        except ValueError:
            return None
        return after if after >= 0 else None


_END_STATUSES = frozenset({TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELLED})

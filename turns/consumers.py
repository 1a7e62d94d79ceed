"""Websocket stream of one turn's event log: ``ws/turns/<turn_id>/?after=<seq>``.

The protocol (DESIGN.md §5–§6): the server sends every event with ``seq >
after`` in order, then live ones, each exactly once; a ``{"type":
"heartbeat"}`` frame every ``HEARTBEAT_S``; after the terminal event a
``{"type": "stream.end", "status": <turn status>}`` frame and a normal close
(1000). Frames other than events carry no ``seq``.

How exactness is kept — join the group first, replay, then doorbells and
ticks, each seq sent once — is ``turns.live.TurnStream``, shared with the
server-sent-events view (``turns.sse``); this consumer is its websocket
transport.

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
from .live import REPLAY_BATCH, Ticking, TurnStream, parse_after
from .models import Turn
from .selectors import events_after

logger = logging.getLogger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_NORMAL = 1000

#: The longest the shared ticker sleeps between looking for due heartbeats
#: (seconds); it never sleeps more than a quarter of ``HEARTBEAT_S``.
TICK_STEP_S = 0.5
#: Turns whose ``last_seq`` one tick query reads at most (SQLite's bound on
#: query parameters is the tighter one).
TICK_BATCH = 500

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


# --- the consumer ---------------------------------------------------------------


class TurnStreamConsumer(AsyncWebsocketConsumer):
    """Streams one turn's event log exactly once per seq: the websocket
    transport of ``turns.live.TurnStream`` (see the module docstring)."""

    turn_id: int
    stream: TurnStream | None

    async def connect(self) -> None:
        raw_id = str(self.scope["url_route"]["kwargs"]["turn_id"])
        self.turn_id = int(raw_id) if raw_id.isdigit() and len(raw_id) <= 18 else 0
        self.stream = None
        self._joined = False
        await self.accept()

        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        after = self._parse_after()
        if after is None:
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        access = await turn_access(self.turn_id) if self.turn_id else None
        if access is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        owner_id, status, last_seq = access
        if owner_id != user.pk and not user.is_staff:
            await self.close(code=CLOSE_FORBIDDEN)
            return

        # Join before reading: a doorbell rung after the replay's read is then
        # queued for us, and whatever it repeats is dropped by seq.
        await self.channel_layer.group_add(turn_group(self.turn_id), self.channel_name)
        self._joined = True
        self.stream = TurnStream(turn_id=self.turn_id, after=after, transport=self, read=read_frames)
        await self.stream.start(status=status, last_seq=last_seq)
        if not self.stream.ended:
            stream_ticker().add(self)

    @property
    def last_sent(self) -> int:
        """The last seq sent (0 before the stream started)."""
        return self.stream.last_sent if self.stream is not None else 0

    async def disconnect(self, code: int) -> None:
        if self.stream is not None:
            self.stream.stop()
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

    async def turn_doorbell(self, message: dict[str, Any]) -> None:
        """``{"type": "turn.doorbell", "events": [frame, …]}`` from ``turns.doorbell.ring_turn``."""
        if self.stream is not None and self._joined:
            await self.stream.doorbell(message)

    async def _tick(self, last_seq: int | None) -> None:
        """A heartbeat tick from the ``StreamTicker`` (``TurnStream.tick``)."""
        if self.stream is not None:
            await self.stream.tick(last_seq)

    # --- the websocket transport (turns.live.StreamTransport) ---------------------

    async def send_event(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(frame, separators=(",", ":")))

    async def send_heartbeat(self) -> None:
        await self.send(text_data=_HEARTBEAT)

    async def send_end(self, status: str) -> None:
        stream_ticker().discard(self)
        await self.send(text_data=json.dumps({"type": "stream.end", "status": status}))
        await self.close(code=CLOSE_NORMAL)

    def _parse_after(self) -> int | None:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        return parse_after((query.get("after") or ["0"])[-1])


class NoRouteConsumer(AsyncWebsocketConsumer):
    """Any websocket path that is not a stream: accepted, then closed with
    4404 (a close code the page can explain, not a server error)."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)

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
4. on each heartbeat tick read ``seq > last_sent`` too, so a lost or
   dropped doorbell (a full channel) only delays an event until the tick.

A per-connection ``asyncio.Lock`` keeps the doorbell handler and the tick
from interleaving their read-then-send, which could otherwise send a seq twice.

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
import threading
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError, connection

from agentlab.db import DatabaseThreads

from .events import events_after, turn_group
from .models import TERMINAL_EVENT_TYPES, EventType, Turn, TurnStatus

logger = logging.getLogger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_NORMAL = 1000

#: Events read from the database per query when replaying or filling a gap.
REPLAY_BATCH = 500

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
        self._ticker: asyncio.Task[None] | None = None
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
            self._ticker = asyncio.create_task(self._tick_forever(float(settings.HEARTBEAT_S)))

    async def disconnect(self, code: int) -> None:
        self._ended = True
        if self._ticker is not None and self._ticker is not asyncio.current_task():
            self._ticker.cancel()
        if self._joined:
            self._joined = False
            await self.channel_layer.group_discard(turn_group(self.turn_id), self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Clients have nothing to say on this stream; what they send is ignored."""

    # --- the doorbell and the tick ----------------------------------------------

    async def turn_doorbell(self, message: dict[str, Any]) -> None:
        """``{"type": "turn.doorbell", "events": [frame, …]}`` from ``turns.events.ring_turn``."""
        if self._ended or not self._joined:
            return
        async with self._lock:
            if self._ended:
                return
            # A doorbell may carry the frames of several coalesced rings, not
            # necessarily in seq order: use only the run that continues the
            # stream exactly, and read anything beyond it from the database.
            frames = sorted((f for f in message.get("events") or () if f.get("seq", 0) > self.last_sent),
                            key=lambda f: f["seq"])
            if not frames:
                return  # all of it was sent already (replayed, or read on a tick)
            run = [f for i, f in enumerate(frames) if f["seq"] == self.last_sent + 1 + i]
            try:
                if run:
                    await self._send_frames(run)
                if len(run) < len(frames) and not self._ended:
                    await self._catch_up()  # a doorbell went missing: read the gap
            except DatabaseError:
                logger.warning("turn %s stream: gap read failed; the next tick retries", self.turn_id,
                               exc_info=True)

    async def _tick_forever(self, every: float) -> None:
        while not self._ended:
            await asyncio.sleep(every)
            async with self._lock:
                if self._ended:
                    return
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
            frames = await stream_db().run(_reading, stream_frames_after, self.turn_id, self.last_sent,
                                           REPLAY_BATCH)
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

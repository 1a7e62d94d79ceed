"""The replay-then-live contract of a turn's event log, for any transport (DESIGN.md §5–§7).

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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from django.db import DatabaseError

from .models import TERMINAL_EVENT_TYPES, EventType, TurnStatus

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
    """What the heartbeat ticker (``turns.consumers.StreamTicker``) serves."""

    turn_id: int

    async def _tick(self, last_seq: int | None) -> None: ...


def parse_after(raw: str | None) -> int | None:
    """The ``after`` seq a client sent (``?after=`` or ``Last-Event-ID``): an
    integer >= 0; ``None`` or "" mean 0; anything else is ``None`` (refused)."""
    raw = (raw or "0").strip() or "0"
    if not raw.isdigit() or len(raw) > 18:
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

    async def start(self, *, status: str, last_seq: int) -> None:
        """Replay ``seq > after``; a finished turn whose log the client
        already has (``status``/``last_seq`` read before joining) just ends."""
        async with self._lock:
            await self._catch_up()
            if not self.ended and status in END_STATUSES and self.last_sent >= last_seq:
                # The client saw the terminal event but not the end frame.
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
            await self.transport.send_heartbeat()

    # the ticker's name for it (``turns.consumers.StreamTicker``)
    _tick = tick

    # --- sending (always under self._lock) ------------------------------------

    async def _catch_up(self) -> None:
        """Send everything after ``last_sent`` from the database, in batches."""
        while not self.ended:
            frames = await self._read(self.turn_id, self.last_sent, REPLAY_BATCH)
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
            await self.transport.send_event(frame)
            self.last_sent = seq
        last = frames[-1]
        if may_end and last["seq"] == self.last_sent and last["type"] in TERMINAL:
            await self._end(END_STATUS[last["type"]])

    async def _end(self, status: str) -> None:
        self.ended = True
        await self.transport.send_end(str(status))

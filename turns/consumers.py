"""Websocket stream of one turn's event log: ``ws/turns/<turn_id>/?after=<seq>``.

The protocol (docs/chat-and-api.md#the-websocket-protocol): the server
sends every event with ``seq > after`` in order, then live ones, each exactly once; a ``{"type":
"heartbeat"}`` frame every ``HEARTBEAT_S``; after the terminal event a
``{"type": "stream.end", "status": <turn status>}`` frame and a normal close
(1000). Frames other than events carry no ``seq``.

How exactness is kept — join the group first, replay, then doorbells and
ticks, each seq sent once — is ``turns.live.TurnStream``, shared with the
server-sent-events view (``turns.sse``); so are the heartbeat ticks (one
``turns.live.StreamTicker`` per event loop) and the pool the stream reads
run on (``turns.live.stream_db``). This module is only the websocket
transport.

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

import json
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer

from agentlab.telemetry import subscribers_changed
from turns.doorbell import turn_group
from turns.live import (
    TurnStream,
    parse_after,
    read_frames,
    stream_ticker,
    turn_access,
)

logger = logging.getLogger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_NORMAL = 1000


_HEARTBEAT = json.dumps({"type": "heartbeat"})


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
        subscribers_changed("websocket", 1)
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
            subscribers_changed("websocket", -1)
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
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        return parse_after((query.get("after") or [None])[-1])


class NoRouteConsumer(AsyncWebsocketConsumer):
    """Any websocket path that is not a stream: accepted, then closed with
    4404 (a close code the page can explain, not a server error)."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)

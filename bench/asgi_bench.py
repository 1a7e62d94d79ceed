"""ASGI app for bench/stream_latency.py: the real application, plus a minimal
Channels consumer at ``ws/bench/forward/<turn_id>/`` that only forwards the
same doorbells (no database, no seq checks) — the baseline exactness is
compared with. Not used outside the benchmark."""

from __future__ import annotations

import json

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.routing import ProtocolTypeRouter, URLRouter
from django.urls import path

from config.asgi import application as real_application
from turns.doorbell import turn_group


class MinimalForwarder(AsyncWebsocketConsumer):
    async def dispatch(self, message: dict) -> None:
        # Like TurnStreamConsumer.dispatch: no close_old_connections() thread
        # hop per message, which a consumer without database code needs no
        # more than the real one does; the baseline stays like for like.
        await getattr(self, get_handler_name(message))(message)

    async def connect(self) -> None:
        self.group = turn_group(int(self.scope["url_route"]["kwargs"]["turn_id"]))
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(self.group, self.channel_name)

    async def turn_doorbell(self, message: dict) -> None:
        for frame in message["events"]:
            await self.send(text_data=json.dumps(frame, separators=(",", ":")))


_forwarder = URLRouter([path("ws/bench/forward/<int:turn_id>/", MinimalForwarder.as_asgi())])


async def application(scope, receive, send):
    if scope["type"] == "websocket" and scope["path"].startswith("/ws/bench/"):
        return await _forwarder(scope, receive, send)
    return await real_application(scope, receive, send)


__all__ = ["ProtocolTypeRouter", "application"]

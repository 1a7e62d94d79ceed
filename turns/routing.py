"""Websocket routes of the turns app (DESIGN.md §6)."""

from __future__ import annotations

from django.urls import path

from .consumers import TurnStreamConsumer

websocket_urlpatterns = [
    path("ws/turns/<int:turn_id>/", TurnStreamConsumer.as_asgi()),
]

"""Websocket routes of the turns app (DESIGN.md §6)."""

from __future__ import annotations

from django.urls import path

from .consumers import TurnStreamConsumer

websocket_urlpatterns = [
    # Any id reaches the consumer, which refuses a malformed one with 4404 like
    # an unknown turn; an unrouted path would be an HTTP 500 from daphne.
    path("ws/turns/<str:turn_id>/", TurnStreamConsumer.as_asgi()),
]

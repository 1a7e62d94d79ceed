"""Websocket routes of the turns app (docs/chat-and-api.md#the-websocket-protocol)."""

from __future__ import annotations

from django.urls import path, re_path

from turns.consumers import NoRouteConsumer, TurnStreamConsumer

websocket_urlpatterns = [
    # Any id reaches the consumer, which refuses a malformed one with 4404 like
    # an unknown turn.
    path("ws/turns/<str:turn_id>/", TurnStreamConsumer.as_asgi()),
    # Anything else is refused with 4404 too; unrouted, it would be an error
    # in daphne's log and an abrupt close (1006) in the browser.
    re_path(r"", NoRouteConsumer.as_asgi()),
]

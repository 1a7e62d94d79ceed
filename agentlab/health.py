"""``GET /healthz``: can this server reach its database and its channel layer?

For load balancers and supervisors: 200 ``{"status": "ok", "database": "ok",
"channel_layer": "ok"}`` when a ``SELECT 1`` answers and a message sent to a
fresh channel of the channel layer comes back, each within
``HEALTH_TIMEOUT_S``; otherwise 503 with ``"status": "unavailable"`` and the
failing part's value ``"error: <ExceptionType>"`` (no host names or
messages: the endpoint needs no login). Not redirected to HTTPS
(``SECURE_REDIRECT_EXEMPT``), so a probe over plain HTTP on the private
network works.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

#: How long each check may take (seconds).
HEALTH_TIMEOUT_S = 3.0


def _database_ok() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


async def _channel_layer_ok() -> None:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured")
    channel = await layer.new_channel("healthz.")
    await layer.send(channel, {"type": "health.ping"})
    message = await layer.receive(channel)
    if message.get("type") != "health.ping":
        raise RuntimeError("the channel layer returned another message")


async def _check(check: Callable[[], Awaitable[None]]) -> str:
    try:
        await asyncio.wait_for(check(), HEALTH_TIMEOUT_S)
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    return "ok"


@never_cache
@require_GET
async def healthz(request: HttpRequest) -> JsonResponse:
    """The health of the database and the channel layer (see the module docstring)."""
    database, channel_layer = await asyncio.gather(
        _check(sync_to_async(_database_ok)), _check(_channel_layer_ok)
    )
    healthy = database == "ok" and channel_layer == "ok"
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "database": database, "channel_layer": channel_layer},
        status=200 if healthy else 503,
    )

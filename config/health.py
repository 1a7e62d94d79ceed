"""``GET /healthz`` (liveness) and ``GET /readyz`` (readiness), the convention
of load balancers and orchestrators.

- ``/healthz``: the process answers HTTP — 200 ``{"status": "ok"}``, with no
  dependency checked. A supervisor restarts a server that fails it; it must
  not fail because the database or Redis is slow or busy, or a busy but
  healthy server would be restarted.
- ``/readyz``: can this server do its work — a ``SELECT 1`` on the database
  and the channel layer reachable, each within ``HEALTH_TIMEOUT_S``: 200
  ``{"status": "ok", "database": "ok", "channel_layer": "ok"}``, else 503
  with ``"status": "unavailable"`` and the failing part's value ``"error:
  <ExceptionType>"`` (no host names or messages: no login is needed). A load
  balancer takes a server that fails it out of rotation.

The Redis channel layer is checked with a ``PING`` on a connection of the
check's own, not by a message round trip through the layer: the layer's
connection pool and its one receive loop per process are what 200 streaming
turns keep busy, and a round trip queued behind them timed out on a working
server (13 of 19 polls under load). A ``PING`` on its own connection answers
in a millisecond whatever the layer is doing. Another layer (the in-memory
one of a developer's machine) is checked by a round trip.

The database is checked on a thread of the check's own, with that thread's
own connection (kept between probes, closed after a failure so the next
probe reconnects): ``sync_to_async``'s default is the server's one shared
sync thread, where the check waited behind request work and answered 503
``error: TimeoutError`` on a healthy database (1 of 82 polls while 200
turns ran). A 503 now means the database did not answer, not that the
server was busy.

Neither is redirected to HTTPS (``SECURE_REDIRECT_EXEMPT``), so a probe over
plain HTTP on the private network works.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from common.sql import execute, ping_sql

#: How long each check may take (seconds).
HEALTH_TIMEOUT_S = 3.0


#: The database check's own thread (and so its own connection): never the shared sync thread.
_DATABASE_CHECK = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentlab-readyz")


def _database_ok() -> None:
    """``SELECT 1`` on this thread's connection; a failed one is closed, so
    the next probe opens a new one."""
    connection.close_if_unusable_or_obsolete()
    try:
        execute(connection, ping_sql(connection), [])
    except Exception:
        connection.close()
        raise


def database_check_close() -> None:
    """Close the database check's connection (its thread keeps it between
    probes): before a test database is dropped, say."""
    # the proxy resolved on the check's thread: that thread's connection
    _DATABASE_CHECK.submit(lambda: connection.close()).result(timeout=HEALTH_TIMEOUT_S)


async def _channel_layer_ok() -> None:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured")
    hosts = getattr(layer, "hosts", None)
    if hosts:  # channels_redis: a PING per host on a connection of our own
        for host in hosts:
            await _redis_ping(host)
        return
    channel = await layer.new_channel("healthz.")
    await layer.send(channel, {"type": "health.ping"})
    message = await layer.receive(channel)
    if message.get("type") != "health.ping":
        raise RuntimeError("the channel layer returned another message")


async def _redis_ping(host: dict[str, Any]) -> None:
    import redis.asyncio as aioredis

    options = {k: v for k, v in host.items() if k not in ("address", "max_connections")}
    client = aioredis.Redis.from_url(host["address"], **options)
    try:
        if not await client.ping():
            raise RuntimeError("Redis did not answer PING")
    finally:
        await client.aclose()


async def _check(check: Callable[[], Awaitable[None]]) -> str:
    try:
        await asyncio.wait_for(check(), HEALTH_TIMEOUT_S)
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    return "ok"


@never_cache
@require_GET
async def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers (see the module docstring)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
async def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database and the channel layer (see the module docstring)."""
    database, channel_layer = await asyncio.gather(
        _check(sync_to_async(_database_ok, thread_sensitive=False, executor=_DATABASE_CHECK)),
        _check(_channel_layer_ok),
    )
    healthy = database == "ok" and channel_layer == "ok"
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "database": database, "channel_layer": channel_layer},
        status=200 if healthy else 503,
    )

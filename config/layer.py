"""The channel layer's Redis host, as channels_redis takes it.

Imported by the settings only when ``REDIS_URL`` is set, so that a command
on the embedded defaults (no Redis) does not import redis-py at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError


def redis_host(address: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """A channels_redis host: ``address`` (a ``redis://`` URL), ``options``
    (the settings' ``REDIS_CHANNEL_HOST_OPTIONS``) and a redis-py ``Retry``.

    After a Redis restart every pooled connection is dead, and redis-py
    retries nothing by default on a pool built from a URL: the first command
    on each one failed ("Connection closed by server") and the stream that
    ran it ended with an error. With the retry a command that meets a dead
    connection reconnects and is sent again (twice at most, 50 ms then
    100 ms apart); the layer's writes are safe to repeat (group membership,
    doorbells that a stream drops by seq).
    """
    retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2, supported_errors=(RedisConnectionError,))
    return {"address": address, **options, "retry": retry}

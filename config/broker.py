"""The Celery broker transport for Redis: kombu's own, with one guard on the
path that ended the worker after a Redis restart with turns in flight
(issue 47: a worker log of the incident, filed with the issue).

The failing path (kombu 5.7, celery 5.7): on a lost broker connection the
consumer calls ``on_connection_error_after_connected``, which first runs
``Connection.collect()``. Its ``Channel.close`` (``kombu.transport.redis``)
reads the broken BRPOP first and raises a connection error before the
channel is marked closed; ``collect`` swallows it and then drops the
transport's connection info (``Transport.client = None``). The consumer then
calls ``Connection.close()``, which closes the same channel again — now for
real: ``QoS.restore_unacked_once`` runs because the worker holds unacked
messages (an idle worker holds none, and survives), ``restore_unacked``
builds a new connection pool, and ``Channel._connparams`` reads
``self.connection.client.hostname`` from ``None``: ``AttributeError``, which
is no connection error, so nothing ignores it and the worker exits
("Unrecoverable error"). Related upstream reports: celery/kombu#970
(``restore_unacked_once`` failing at shutdown), celery/celery#9054 (a worker
that stops after a Redis restart); none covers this exact path.

The guard: a channel remembers the connection parameters it was built with
and uses them when the connection info is gone. Restoring the unacked
messages then meets Redis down as a connection error, which
``Connection.maybe_close_channel`` ignores, and the consumer reconnects. The
messages stay in Redis's unacked index (or are lost with a Redis that lost
its data): the tasks in flight finish and ack through their channel once
Redis is back; one that cannot ack is restored by kombu after the visibility
timeout and its duplicate delivery is a no-op (the driver's conditional
claim); a turn whose message was lost is handed to a job again by the
sweeper (``turns_requeue_lost``). At-least-once, as docs/architecture.md says.

``CELERY_BROKER_TRANSPORT`` names :class:`Transport` for ``redis://`` and
``rediss://`` broker URLs (``config.settings``).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["Channel", "Transport"]


class Channel(kombu_redis.Channel):
    """kombu's Redis channel whose connection parameters outlive the
    connection info (see the module docstring)."""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        """kombu's parameters while the transport knows its connection; the
        ones this channel last built after that; a Redis ``ConnectionError``
        when it never built any (ignored by the close that asked)."""
        saved: dict[bool, dict[str, Any]] = self.__dict__.setdefault("_agentlab_connparams", {})
        if self.connection is None or self.connection.client is None:
            if asynchronous not in saved:
                raise RedisConnectionError("the broker connection is closed (its connection info is gone)")
            return dict(saved[asynchronous])
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]  # not in the stubs
        saved[asynchronous] = dict(params)
        return params


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel

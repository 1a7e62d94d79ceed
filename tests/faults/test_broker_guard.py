"""The guard of ``config.broker`` on the incident's last frames (issue 47,
item 1), through a private ``redis-server``: a channel holding an unacked
message is closed after its transport lost the connection info —
``Channel.close`` → ``QoS.restore_unacked_once`` → ``restore_unacked`` →
``_connparams``, as in the incident's worker log filed with issue 47
(where ``Connection.collect`` had dropped ``Transport.client`` before the
consumer's ``Connection.close``; here that state is set directly). kombu's
own transport raises ``AttributeError`` there, which nothing ignores; the
guarded one raises a connection error while Redis is down (ignored by
``maybe_close_channel``) and restores the message once Redis is up."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from kombu import Connection, Exchange, Queue

from .servers import PrivateRedis

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


@pytest.fixture
def redis():
    server = PrivateRedis(persist=False).start()
    yield server
    server.destroy()


def holding_one_unacked(url: str, transport: str | None) -> tuple[Connection, list]:
    """A connection whose channel delivered one message it has not acked."""
    conn = Connection(url, transport=transport)
    queue = Queue("turns", Exchange("turns"), "turns")
    with conn.Producer() as producer:
        producer.publish({"turn": 1}, exchange=queue.exchange, routing_key="turns", declare=[queue])
    got: list = []
    conn.Consumer(queue, callbacks=[lambda body, message: got.append(body)], accept=["json"]).consume()
    conn.drain_events(timeout=5)
    channel: Any = conn.default_channel
    assert got == [{"turn": 1}] and len(channel.qos._delivered) == 1
    return conn, got


def test_kombus_own_channel_fails_on_the_lost_connection_info(redis):
    conn, _ = holding_one_unacked(redis.url(1), None)
    redis.shutdown_nosave()
    conn.transport.client = None  # what Connection.collect() left behind in the incident
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'hostname'"):
        conn.maybe_close_channel(conn.default_channel)


def test_the_guarded_channel_meets_redis_down_as_a_connection_error(redis):
    conn, _ = holding_one_unacked(redis.url(1), "config.broker:Transport")
    redis.shutdown_nosave()
    conn.transport.client = None
    channel: Any = conn.default_channel
    conn.maybe_close_channel(channel)  # a connection error, ignored: the worker reconnects
    assert channel.closed


def test_the_guarded_channel_restores_its_unacked_message_when_redis_is_up(redis):
    conn, _ = holding_one_unacked(redis.url(1), "config.broker:Transport")
    conn.transport.client = None
    conn.maybe_close_channel(conn.default_channel)
    with Connection(redis.url(1)) as fresh:
        message = fresh.SimpleQueue("turns").get(timeout=5)
        assert message.payload == {"turn": 1}  # back in the queue: delivered again (at-least-once)
        message.ack()

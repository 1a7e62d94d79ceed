"""Fixtures for streaming and job tests: a fresh channel layer, fast heartbeats,
websocket apps that authenticate as a given user, and clean-up of the
process-wide pools (their connections would keep PostgreSQL from dropping
the test database)."""

from __future__ import annotations

import uuid

import pytest
from channels.routing import URLRouter
from django.contrib.auth.models import AnonymousUser

from agentlab.testing.net import port_open
from config.layer import redis_host
from tests.redis_support import LAYER_URL, REDIS


@pytest.fixture
def stream_settings(settings):
    """In-memory layer with capacity 100, heartbeats every 0.2 s, no start-up work."""
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 100}}
    }
    settings.HEARTBEAT_S = 0.2
    settings.AGENTLAB_RUN_AT_START = False
    return settings


@pytest.fixture
def redis_layer(stream_settings):
    if not port_open(*REDIS):
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")
    stream_settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [redis_host(LAYER_URL, stream_settings.REDIS_CHANNEL_HOST_OPTIONS)],
                "capacity": 100,
                "prefix": f"test-{uuid.uuid4().hex[:8]}",
            },
        }
    }
    return stream_settings


@pytest.fixture(autouse=True)
def _close_process_pools():
    yield
    from turns import live
    from turns.jobs import handover as jobs
    from turns.jobs import tasks

    live.stream_db_close()
    previous = jobs.inline_executor_reset(None)
    if previous is not None:
        previous.stop()
    if tasks._db is not None:
        tasks._db.close()
        tasks._db = None


def ws_app(user=None):
    """The websocket routes, with ``scope["user"]`` set to ``user`` (anonymous if None)."""
    from turns.routing import websocket_urlpatterns

    inner = URLRouter(websocket_urlpatterns)

    async def app(scope, receive, send):
        return await inner(dict(scope, user=user or AnonymousUser()), receive, send)

    return app

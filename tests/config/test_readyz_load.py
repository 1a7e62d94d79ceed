"""``/readyz`` under load (issue 47, item 9): the database check runs on a
thread and connection of its own, so it answers while the server's shared
sync thread is busy with request work — a 503 means the database is down,
not that the server is busy."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import RequestFactory

from config import health

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _check_connection_closed():
    """The database check's thread keeps its connection: closed after each test."""
    yield
    health.database_check_close()


def _busy_request_work(seconds: float) -> None:
    """A sync view's work on the shared sync thread (``thread_sensitive``)."""
    time.sleep(seconds)


async def test_readyz_answers_while_the_shared_sync_thread_is_busy(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    request = RequestFactory().get("/readyz")
    busy = asyncio.ensure_future(sync_to_async(_busy_request_work)(health.HEALTH_TIMEOUT_S + 2))
    await asyncio.sleep(0.2)  # the shared thread is taken
    started = time.monotonic()
    response = await health.readyz(request)
    took = time.monotonic() - started
    body = json.loads(response.content)
    assert (response.status_code, body) == (200, {"status": "ok", "database": "ok", "channel_layer": "ok"})
    assert took < health.HEALTH_TIMEOUT_S  # it did not wait for the busy thread
    assert not busy.done()
    await busy


async def test_readyz_says_so_when_the_database_does_not_answer(settings, monkeypatch):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

    def down() -> None:
        raise ConnectionRefusedError("the database is down")

    monkeypatch.setattr(health, "_database_ok", down)
    response = await health.readyz(RequestFactory().get("/readyz"))
    assert response.status_code == 503
    assert json.loads(response.content)["database"] == "error: ConnectionRefusedError"


def test_the_check_s_connection_is_its_own_and_reopens_after_a_failure():
    own = health._DATABASE_CHECK.submit(lambda: (health._database_ok(), id(connection.connection))[1]).result(
        10
    )
    assert own != id(connection.connection)  # not this thread's (nor the shared thread's) connection
    health._DATABASE_CHECK.submit(lambda: connection.connection.close()).result(10)  # the server dropped it
    health._DATABASE_CHECK.submit(health._database_ok).result(10)  # the next probe reconnects, no error
    again = health._DATABASE_CHECK.submit(lambda: id(connection.connection)).result(10)
    assert again != own

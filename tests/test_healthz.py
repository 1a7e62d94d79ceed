"""``GET /healthz`` (issue 18): the database and the channel layer, 200 or 503."""

from __future__ import annotations

import pytest
from channels_redis.core import RedisChannelLayer

from agentlab import health
from agentlab.testing.net import free_port

pytestmark = pytest.mark.django_db


def test_healthz_is_ok_when_the_database_and_the_channel_layer_answer(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "channel_layer": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_healthz_is_503_naming_a_channel_layer_that_does_not_answer(client, monkeypatch):
    # a real Redis channel layer pointed at a port nothing listens on
    layer = RedisChannelLayer(hosts=[{"address": f"redis://127.0.0.1:{free_port()}/0"}])
    monkeypatch.setattr(health, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(health, "HEALTH_TIMEOUT_S", 2.0)
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["database"]) == ("unavailable", "ok")
    assert body["channel_layer"].startswith("error: ")


def test_healthz_is_not_redirected_to_https_but_other_pages_are(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz").status_code == 200
    assert client.get("/accounts/login/").status_code == 301


def test_healthz_only_answers_get(client):
    assert client.post("/healthz").status_code == 405

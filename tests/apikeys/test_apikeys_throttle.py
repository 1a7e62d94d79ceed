"""API keys are rate-limited per key with django-ninja's throttling (issue 18);
browser sessions are not."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from apikeys.services import apikey_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counts(settings):
    settings.AGENTLAB_API_KEY_RATE = "3/min"
    cache.clear()
    yield
    cache.clear()


def test_a_key_over_its_rate_gets_429_with_retry_after_and_other_keys_are_not_counted(client, staff):
    _, raw = apikey_create(name="ci", created_by=staff)
    _, other = apikey_create(name="dashboard", created_by=staff)
    statuses = [client.get("/api/runs", HTTP_X_API_KEY=raw).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    throttled = client.get("/api/runs", HTTP_X_API_KEY=raw)
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "throttled"
    assert 1 <= int(throttled["Retry-After"]) <= 60
    assert client.get("/api/runs", HTTP_X_API_KEY=other).status_code == 200


def test_sessions_are_not_rate_limited(client, owner):
    client.force_login(owner)
    assert {client.get("/api/runs").status_code for _ in range(6)} == {200}


def test_an_empty_rate_means_no_limit(client, staff, settings):
    settings.AGENTLAB_API_KEY_RATE = ""
    _, raw = apikey_create(name="ci", created_by=staff)
    assert {client.get("/api/runs", HTTP_X_API_KEY=raw).status_code for _ in range(6)} == {200}

"""``/metrics`` of a deployment through a real daphne: refused without the
token, served with it (not redirected to HTTPS), and summing what another
process counted in the shared ``PROMETHEUS_MULTIPROC_DIR``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.daphne_support import daphne_running

ROOT = Path(__file__).resolve().parent.parent.parent
TOKEN = "metrics-token-for-the-test"
COUNT = "from agentlab.telemetry.metrics import metrics; metrics().turns_started.labels('evaluation').inc(5)"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("metrics")
    prom = tmp / "prom"
    prom.mkdir()
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AGENTLAB_", "DJANGO_", "CELERY_", "OTEL_"))
        },
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "AGENTLAB_SQLITE_PATH": str(tmp / "metrics.sqlite3"),
        "ALLOWED_HOSTS": "agentlab.example.com,127.0.0.1",  # a deployment
        "SECRET_KEY": "a-long-random-value-for-the-metrics-test-0123456789",
        "AGENTLAB_METRICS_TOKEN": TOKEN,
        "PROMETHEUS_MULTIPROC_DIR": str(prom),
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        env.pop(name, None)
    subprocess.run([sys.executable, "-c", COUNT], cwd=ROOT, env=env, check=True, timeout=60)
    log = tmp / "daphne.log"
    with daphne_running(env, log) as base, httpx.Client(base_url=base, timeout=30) as client:
        yield {"client": client, "log": log}


def test_a_deployment_refuses_metrics_without_the_token(deployment):
    client: httpx.Client = deployment["client"]
    missing = client.get("/metrics")
    assert missing.status_code == 401, missing.text
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert missing.json()["error"]["code"] == "unauthenticated"
    wrong = client.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401
    assert client.post("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405


def test_with_the_token_it_serves_what_every_process_counted(deployment):
    client: httpx.Client = deployment["client"]
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text  # plain HTTP: not redirected to HTTPS
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    # counted by another process, summed from the shared directory
    assert samples[("agentlab_turns_started_total", (("kind", "evaluation"),))] == 5
    assert ("agentlab_llm_call_duration_seconds_count", (("provider", "openai"), ("role", "agent"))) not in (
        samples
    )

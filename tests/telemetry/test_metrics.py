"""``/metrics``: the Prometheus exposition parsed with ``prometheus_client``'s
own parser, its values moving as turns run, the multiprocess sum, and who
may read it in a deployment."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentlab.telemetry.metrics import exposition
from config.deploy import allow_list
from tests.telemetry.test_traces import CHAT_REPLIES, chat_turn

ROOT = Path(__file__).resolve().parent.parent.parent


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) → value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(all_samples, name: str, **labels: str) -> float:
    return all_samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("stream_settings")
def test_the_counts_move_as_a_chat_turn_runs(owner, settings, client):
    before = samples(client.get("/metrics").content.decode())
    turn = chat_turn(owner, settings, CHAT_REPLIES)
    assert turn.status == "succeeded"
    response = client.get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    after = samples(response.content.decode())

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("agentlab_turns_started_total", kind="chat") == 1
    assert moved("agentlab_turns_finished_total", kind="chat", outcome="answered") == 1
    assert moved("agentlab_turn_duration_seconds_count", kind="chat") == 1
    assert moved("agentlab_turn_queue_wait_seconds_count", kind="chat") == 1
    assert moved("agentlab_llm_call_duration_seconds_count", provider="openai", role="agent") == 2
    assert moved("agentlab_llm_tokens_total", model="stub-model", role="agent", type="input") == 50
    assert moved("agentlab_llm_tokens_total", model="stub-model", role="agent", type="output") == 11
    assert moved("agentlab_tool_calls_total", tool="calculator") == 1
    assert moved("agentlab_tool_calls_total", tool="final_answer") == 1
    assert moved("agentlab_tool_errors_total", tool="calculator") == 0
    # every event of its log, turn.queued included, was written after the first scrape
    assert moved("agentlab_events_appended_total") == turn.last_seq
    assert moved("agentlab_eval_examples_driven_total", outcome="answered") == 0


@pytest.mark.django_db(transaction=True)
async def test_llm_errors_are_counted_by_provider_and_kind_and_examples_by_outcome(owner, db_threads):
    from agentlab.agent.providers.scripted import ScriptedProvider
    from agentlab.agent.types import ProviderError
    from turns.driver import EVALUATION, drive_turn
    from turns.models import TurnKind
    from turns.services import turn_create

    before = samples(exposition(None)[0].decode())
    turn = await db_threads.run(turn_create, owner=owner, question="q", kind=TurnKind.EVALUATION)
    provider = ScriptedProvider([ProviderError("slow down", transient=False, kind="rate_limit")])
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads)
    assert result is not None and result.outcome == "failed"
    after = samples(exposition(None)[0].decode())
    errors = ("agentlab_llm_call_errors_total", {"provider": "scripted", "kind": "rate_limit"})
    assert value(after, errors[0], **errors[1]) - value(before, errors[0], **errors[1]) == 1
    examples = ("agentlab_eval_examples_driven_total", {"outcome": "failed"})
    assert value(after, examples[0], **examples[1]) - value(before, examples[0], **examples[1]) == 1


CHILD = """
import os
from agentlab.telemetry.metrics import metrics
m = metrics()
m.turns_started.labels("chat").inc(3)
m.subscribers.labels("sse").inc()
print(os.getpid())
"""


def test_the_multiprocess_mode_sums_what_every_process_counted(tmp_path, monkeypatch):
    from agentlab.telemetry.metrics import process_gone

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    pids = [
        int(
            subprocess.run(
                [sys.executable, "-c", CHILD],
                cwd=ROOT,
                env=env,
                check=True,
                timeout=60,
                capture_output=True,
                text=True,
            ).stdout
        )
        for _ in range(2)
    ]
    text, content_type = exposition(str(tmp_path))
    assert content_type.startswith("text/plain")
    parsed = samples(text.decode())
    assert value(parsed, "agentlab_turns_started_total", kind="chat") == 6
    assert value(parsed, "agentlab_stream_subscribers", transport="sse") == 2
    # a Celery child that exits is marked gone (worker_process_shutdown): its live gauge leaves the sum
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    process_gone(pids[0])
    parsed = samples(exposition(str(tmp_path))[0].decode())
    assert value(parsed, "agentlab_stream_subscribers", transport="sse") == 1
    assert value(parsed, "agentlab_turns_started_total", kind="chat") == 6  # counters stay


def test_metrics_off_is_a_404(client, telemetry_env):
    from agentlab.telemetry.switches import reset_switches

    telemetry_env["AGENTLAB_METRICS"] = "false"
    reset_switches()
    response = client.get("/metrics")
    assert response.status_code == 404 and "AGENTLAB_METRICS" in response.json()["error"]["message"]


def test_in_a_deployment_metrics_need_the_token_or_an_allowed_address(client, settings):
    settings.DEPLOYMENT = True
    settings.AGENTLAB_METRICS_TOKEN, settings.AGENTLAB_METRICS_ALLOW = "", []
    closed = client.get("/metrics")
    assert closed.status_code == 403 and "AGENTLAB_METRICS_TOKEN" in closed.json()["error"]["message"]

    settings.AGENTLAB_METRICS_TOKEN = "s3cret-token"
    missing = client.get("/metrics")
    assert missing.status_code == 401 and missing["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Basic s3cret-token"}).status_code == 401
    ok = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200 and b"agentlab_turns_started_total" in ok.content

    settings.AGENTLAB_METRICS_TOKEN = ""
    settings.AGENTLAB_METRICS_ALLOW = allow_list(["10.1.0.0/16"], name="AGENTLAB_METRICS_ALLOW")
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    refused = client.get("/metrics", REMOTE_ADDR="10.2.0.1")
    assert refused.status_code == 403 and "AGENTLAB_METRICS_ALLOW" in refused.json()["error"]["message"]
    assert client.post("/metrics").status_code == 405


def test_outside_a_deployment_metrics_are_open_unless_a_token_is_set(client, settings):
    settings.DEPLOYMENT = False
    settings.AGENTLAB_METRICS_TOKEN, settings.AGENTLAB_METRICS_ALLOW = "", []
    assert client.get("/metrics").status_code == 200
    assert client.head("/metrics").status_code == 200
    settings.AGENTLAB_METRICS_TOKEN = "t"
    assert client.get("/metrics").status_code == 401


def test_an_allow_list_entry_that_is_no_address_is_named():
    assert allow_list([" 10.0.0.5 ", "", "fd00::/8"], name="X") == [
        ipaddress.ip_network("10.0.0.5/32"),
        ipaddress.ip_network("fd00::/8"),
    ]
    with pytest.raises(ValueError, match=r"X: 'prometheus.local' is not an IP address or network"):
        allow_list(["10.0.0.5", "prometheus.local"], name="X")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("stream_settings")
async def test_the_subscribers_gauge_follows_an_open_websocket(owner, db_threads):
    from channels.testing import WebsocketCommunicator

    from tests.turns.conftest import ws_app
    from turns.services import turn_create

    def open_sockets() -> float:
        return value(
            samples(exposition(None)[0].decode()), "agentlab_stream_subscribers", transport="websocket"
        )

    before = open_sockets()
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    communicator = WebsocketCommunicator(ws_app(owner), f"/ws/turns/{turn.pk}/")
    assert (await communicator.connect(timeout=5))[0]
    assert json.loads(await communicator.receive_from(timeout=5))["type"] == "turn.queued"
    assert open_sockets() == before + 1
    await communicator.disconnect()
    assert open_sockets() == before


def test_a_bad_allow_list_stops_manage_py_naming_the_entry():
    env = {**os.environ, "AGENTLAB_METRICS_ALLOW": "10.0.0.1,prometheus.local"}
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "configuration error: AGENTLAB_METRICS_ALLOW: 'prometheus.local' is not an IP address or network "
        "(e.g. 10.0.0.5 or 10.0.0.0/24)"
    )

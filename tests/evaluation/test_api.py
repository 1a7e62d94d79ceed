"""The runs and predictions API (docs/chat-and-api.md#the-http-api): data written by a real
``run_eval`` against a stub OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from agentlab.testing.stub_llm import StubLLMServer, error_reply, final_answer_reply, last_user_text
from apikeys.models import ApiKey
from apikeys.services import apikey_create
from evaluation.metrics.intervals import wilson_interval
from tests.api_support import ApiClient, assert_error

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = [
    {"question_id": "n1", "question": "What is 6*7?", "answer": "42", "task_type": "numeric"},
    {"question_id": "n2", "question": "What is 2+2?", "answer": "4", "task_type": "numeric"},
    {
        "question_id": "m1",
        "question": "Pick B",
        "answer": "B",
        "task_type": "multiple_choice",
        "choices": ["x", "y", "z"],
    },
    {
        "question_id": "m2",
        "question": "Breaks the model",
        "answer": "A",
        "task_type": "multiple_choice",
        "choices": ["x", "y"],
    },
]
REPLIES = {"What is 6*7?": "42", "What is 2+2?": "5", "Pick B": "B"}


@pytest.fixture
def run_id(tmp_path, settings):
    path = tmp_path / "tiny.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")

    def handler(body):
        question = last_user_text(body)
        for text, answer in REPLIES.items():
            if text in question:
                return final_answer_reply(answer, "stub evidence", "stub reasoning", usage=(10, 5))
        return error_reply(400, "this example breaks the model", type="invalid_request_error")

    with StubLLMServer(handler) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "test-key"
        settings.AGENTLAB_MODEL = "stub-model"
        call_command("run_eval", "--no-review", str(path), "--run-id", "tiny", "--concurrency", "2")
    return "tiny"


@pytest.fixture
def client(owner):
    return ApiClient(owner)


def test_runs_list_and_detail(client, run_id):
    listed = client.get("/api/runs").json()
    assert listed["count"] == 1 and listed["items"][0]["run_id"] == run_id
    detail = client.get(f"/api/runs/{run_id}").json()
    assert detail["status"] == "success" and detail["metrics"]["total"] == 4
    assert client.get("/api/runs?status=error").json()["count"] == 0
    assert_error(client.get("/api/runs?status=nonsense"), 422, "invalid")


def test_a_runs_accuracy_carries_its_n_and_wilson_interval(client, run_id):
    detail = client.get(f"/api/runs/{run_id}").json()
    low, high = wilson_interval(2, 4) or (None, None)
    assert detail["accuracy"] == {
        "value": 0.5,
        "correct": 2,
        "n": 4,
        "ci_low": pytest.approx(low),
        "ci_high": pytest.approx(high),
        "confidence": 0.95,
    }
    assert detail["rescored_from"] is None
    assert detail["metrics"]["accuracy_ci"] == pytest.approx([low, high])
    n1 = client.get(f"/api/runs/{run_id}/predictions?limit=1").json()["items"][0]
    assert (n1["epoch"], n1["judgement"]) == (1, {})
    assert n1["score_explanation"]


def test_predictions_are_paginated_in_example_order(client, run_id):
    first = client.get(f"/api/runs/{run_id}/predictions?limit=3").json()
    second = client.get(f"/api/runs/{run_id}/predictions?limit=3&offset=3").json()
    assert first["count"] == second["count"] == 4
    assert [p["example_id"] for p in first["items"] + second["items"]] == ["n1", "n2", "m1", "m2"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("task_type=numeric", ["n1", "n2"]),
        ("task_type=multiple_choice&correct=true", ["m1"]),
        ("correct=true", ["n1", "m1"]),
        ("correct=false", ["n2", "m2"]),
        ("stop_reason=final", ["n1", "n2", "m1"]),
        ("stop_reason=provider_error", ["m2"]),
        ("task_type=nothing", []),
    ],
)
def test_predictions_filter_by_task_type_correctness_and_stop_reason(client, run_id, query, expected):
    body = client.get(f"/api/runs/{run_id}/predictions?{query}").json()
    assert [p["example_id"] for p in body["items"]] == expected


def test_prediction_fields(client, run_id):
    n1 = client.get(f"/api/runs/{run_id}/predictions?limit=1").json()["items"][0]
    assert (n1["prediction"], n1["gold_answer"], n1["correct"], n1["stop_reason"]) == (
        "42",
        "42",
        True,
        "final",
    )
    assert n1["input_tokens"] == 10 and n1["output_tokens"] == 5 and n1["turn_id"]


def test_unknown_run_is_404(client, run_id):
    assert_error(client.get("/api/runs/nope"), 404, "not_found")
    assert_error(client.get("/api/runs/nope/predictions"), 404, "not_found")


def test_api_key_reads_runs_and_predictions(run_id):
    key, raw = apikey_create(name="ci")
    program = ApiClient(api_key=raw)
    assert program.get("/api/runs").json()["count"] == 1
    assert program.get(f"/api/runs/{run_id}/predictions?correct=true").json()["count"] == 2
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_api_key_is_stored_hashed_and_a_revoked_or_wrong_key_is_401(run_id):
    key, raw = apikey_create(name="ci")
    assert raw not in (key.digest, key.prefix) and len(key.digest) == 64
    assert not ApiKey.objects.filter(digest=raw).exists()
    assert_error(
        ApiClient(api_key=raw[:-1] + ("x" if raw[-1] != "x" else "y")).get("/api/runs"),
        401,
        "unauthenticated",
    )
    ApiKey.objects.filter(pk=key.pk).update(revoked=True)
    assert_error(ApiClient(api_key=raw).get("/api/runs"), 401, "unauthenticated")

"""``POST /api/runs`` and ``POST /api/runs/{id}/cancel`` (issue 46): who may
start a run, bad options refused with nothing written, a run driven to its
end by the inline executor against the stub endpoint, and a cancel."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from apikeys.models import ApiKey, ApiKeyScope
from apikeys.services import apikey_create
from evaluation.models import Prediction, Run, RunStatus
from evaluation.run import api_start
from tests.api_support import ApiClient, assert_error

pytestmark = pytest.mark.django_db(transaction=True)

ANSWERS = {"What is 2 + 2?": "4", "What is 3 * 3?": "9", "What is 10 - 7?": "2"}
GOLD = {"What is 2 + 2?": "4", "What is 3 * 3?": "9", "What is 10 - 7?": "3"}


@pytest.fixture
def registered(tmp_path: Path) -> str:
    path = tmp_path / "arith.jsonl"
    lines = [
        {"question_id": f"q{i}", "question": q, "answer": gold, "task_type": "math"}
        for i, (q, gold) in enumerate(GOLD.items())
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    call_command("import_dataset", str(path), "--name", "arith")
    return "arith"


def agent(body: dict[str, Any]) -> Any:
    return final_answer_reply(ANSWERS[last_user_text(body)], "e", "r", usage=(10, 5))


def wait_run(run_id: str) -> Run:
    api_start.inline_futures.pop(run_id).result(timeout=120)
    return Run.objects.get(run_id=run_id)


def test_staff_starts_a_run_that_runs_to_its_end_on_the_inline_executor(endpoint, registered, staff) -> None:
    with StubLLMServer(agent) as server:
        endpoint(server)
        response = ApiClient(staff).post(
            "/api/runs", {"dataset": "arith@1", "run_id": "api-1", "review": False}
        )
        assert response.status_code == 202, response.content
        assert response.json() == {"run_id": "api-1", "url": "http://testserver/api/runs/api-1"}
        run = wait_run("api-1")
        assert server.request_count == 3
    assert run.status == RunStatus.SUCCESS
    assert run.dataset.name == "arith" and run.config["review"] is False
    correct = list(
        Prediction.objects.filter(run=run).order_by("example__external_id").values_list("correct", flat=True)
    )
    assert correct == [True, True, False]  # 10 - 7 answered 2
    shown = ApiClient(staff).get("/api/runs/api-1").json()
    assert shown["accuracy"]["correct"] == 2 and shown["accuracy"]["n"] == 3


def test_a_run_scoped_key_starts_a_run_with_options_and_a_new_run_id(endpoint, registered) -> None:
    _, raw = apikey_create(name="ci", scope=ApiKeyScope.RUN)
    with StubLLMServer(agent) as server:
        endpoint(server)
        body = {"dataset": "arith", "limit": 2, "concurrency": 1, "max_steps": 3, "review": False}
        response = ApiClient(api_key=raw, csrf=False).post("/api/runs", body)
        assert response.status_code == 202, response.content
        run_id = response.json()["run_id"]
        assert run_id.startswith("arith-")
        run = wait_run(run_id)
        assert server.request_count == 2
    assert run.status == RunStatus.SUCCESS
    assert Prediction.objects.filter(run=run).count() == 2
    assert run.config["max_steps"] == 3


def test_a_read_only_key_a_plain_user_and_no_credentials_are_refused(registered, django_user_model) -> None:
    key, raw = apikey_create(name="reader")
    assert (
        key.scope == ApiKeyScope.READ == ApiKey._meta.get_field("scope").default
    )  # what the migration gives old keys
    error = assert_error(
        ApiClient(api_key=raw, csrf=False).post("/api/runs", {"dataset": "arith"}), 403, "forbidden"
    )
    assert "read-only" in error["message"]
    assert_error(ApiClient(api_key=raw, csrf=False).post("/api/runs/x/cancel"), 403, "forbidden")
    user = django_user_model.objects.create_user("plain", password="pw-plain-123")
    assert_error(ApiClient(user).post("/api/runs", {"dataset": "arith"}), 403, "forbidden")
    assert_error(ApiClient().post("/api/runs", {"dataset": "arith"}), 401, "unauthenticated")
    assert_error(
        ApiClient(api_key="al_nope_nope", csrf=False).post("/api/runs", {"dataset": "arith"}),
        401,
        "unauthenticated",
    )
    assert ApiClient(api_key=raw, csrf=False).get("/api/runs").status_code == 200  # it still reads
    assert not Run.objects.exists() and not api_start.inline_futures


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"dataset": "arith", "limits": 2}, 422, "limits"),
        ({"dataset": "arith", "mcp": ["x=rm -rf /"]}, 422, "mcp"),
        ({"dataset": "arith", "limit": 0}, 422, "--limit must be between 1"),
        ({"dataset": "arith", "sample": 2, "limit": 1}, 422, "not both"),
        ({"dataset": "arith", "temperature": 9}, 422, "temperature"),
        ({"dataset": "arith", "user_temperature": 3}, 422, "--user-temperature must be between 0 and 2"),
        ({"dataset": "arith", "split": "nope"}, 400, "nope"),
        ({"dataset": "arith@7"}, 400, "7"),
        ({"dataset": "nosuch"}, 404, "nosuch"),
        ({"dataset": "/etc/passwd.jsonl"}, 404, "no registered dataset"),
        ({"limit": 2}, 422, "dataset"),
    ],
)
def test_bad_options_are_refused_with_nothing_written(registered, staff, body, status, words) -> None:
    response = ApiClient(staff).post("/api/runs", body)
    assert response.status_code == status, response.content
    assert words in json.dumps(response.json()["error"])
    assert not Run.objects.exists() and not api_start.inline_futures


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"dataset": "arith", "model": "/nonexistent/agent.gguf"}, "model: GGUF model file not found"),
        ({"dataset": "arith", "judge_model": "/nonexistent/judge.gguf"}, "judge_model: GGUF model file"),
        ({"dataset": "arith", "user_model": "/nonexistent/user.gguf"}, "user_model: GGUF model file"),
    ],
)
def test_a_model_that_is_not_there_is_422_not_a_run_that_never_starts(
    registered, staff, settings, body, words
) -> None:
    settings.AGENTLAB_LLM_BASE_URL = None  # the embedded model: a model is a GGUF file
    response = ApiClient(staff).post("/api/runs", body)
    assert response.status_code == 422, response.content
    assert words in json.dumps(response.json()["error"])
    assert not Run.objects.exists() and not api_start.inline_futures


def test_a_run_id_taken_is_409(endpoint, registered, staff) -> None:
    with StubLLMServer(agent) as server:
        endpoint(server)
        call_command("run_eval", "arith", "--run-id", "taken", "--no-review")
    response = ApiClient(staff).post("/api/runs", {"dataset": "arith", "run_id": "taken"})
    assert_error(response, 409, "state_conflict")
    assert Run.objects.count() == 1 and not api_start.inline_futures


def test_cancel_stops_a_running_run_as_cancel_run_does(endpoint, registered, staff) -> None:
    release, asked = threading.Event(), threading.Event()

    def slow(body: dict[str, Any]) -> Any:
        asked.set()
        release.wait(30)
        return agent(body)

    client = ApiClient(staff)
    with StubLLMServer(slow) as server:
        endpoint(server)
        body = {"dataset": "arith", "run_id": "to-cancel", "concurrency": 1, "review": False}
        assert client.post("/api/runs", body).status_code == 202
        assert asked.wait(60)
        response = client.post("/api/runs/to-cancel/cancel")
        release.set()
        assert response.status_code == 200, response.content
        assert response.json()["run_id"] == "to-cancel" and response.json()["cancelled"] >= 1
        run = wait_run("to-cancel")
    assert run.status == RunStatus.CANCELLED
    assert_error(client.post("/api/runs/to-cancel/cancel"), 409, "state_conflict")
    assert_error(client.post("/api/runs/nosuch/cancel"), 404, "not_found")


def test_with_a_broker_the_run_goes_to_celery_with_its_options(
    registered, staff, settings, monkeypatch
) -> None:
    """The hand-off only (a worker's drive is ``drive_api_run``, the inline path above):
    the task is registered under its wire name and sent the checked options with the run id."""
    from celery import current_app

    current_app.loader.import_default_modules()
    assert api_start.RUN_TASK in current_app.tasks
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(api_start.run_eval_over_api, "delay", sent.append)
    settings.CELERY_BROKER_URL = "amqp://guest@127.0.0.1:5672//"
    response = ApiClient(staff).post("/api/runs", {"dataset": "arith", "run_id": "on-celery", "limit": 1})
    assert response.status_code == 202, response.content
    assert sent == [
        {
            "dataset": "arith",
            "run_id": "on-celery",
            "limit": 1,
            "tags": [],
            "concurrency": 4,
            "review": True,
            "retry_errors": False,
            "plugins": [],
        }
    ]
    assert not Run.objects.exists() and not api_start.inline_futures

"""The LLM judge in a run and ``rescore``: exact → judge on a stored run
without running the agent, the judge's usage kept apart from the agent's,
the cache hit on a second re-score, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from agentlab.agent.providers.scripted import ScriptedProvider, text
from agentlab.agent.types import Completion, ProviderError, Usage
from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text, text_reply
from evaluation.models import JudgeCacheEntry, Run, RunStatus
from evaluation.run.rescoring import rescore
from tests.api_support import ApiClient
from turns.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)

#: question → (gold, what the agent answers, what the scripted grader says of it)
CASES = {
    "Which city hosted the 1900 Olympics?": ("Paris", "Paris, France", "correct"),
    "Who wrote Hamlet?": ("William Shakespeare", "Shakespeare", "correct"),
    "What is the capital of Spain?": ("Madrid", "Rome", "incorrect"),
    "Name the two Marx brothers in Duck Soup.": ("Groucho and Harpo", "Groucho", "partial"),
    "Which river flows through Vienna?": ("Danube", "Danube", "unreadable"),
    "What is the largest planet?": ("Jupiter", "Saturn", "error"),
}


@pytest.fixture
def dataset_file(tmp_path: Path) -> Path:
    path = tmp_path / "mini_hotpot.jsonl"
    lines = [
        {"question_id": f"q{i}", "question": q, "answer": gold, "task_type": "document_qa"}
        for i, (q, (gold, _, _)) in enumerate(CASES.items())
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def is_judge_call(body: dict) -> bool:
    return str(body["messages"][0]["content"]).startswith("You grade an answer")


def question_of_judge_call(text_: str) -> str:
    return text_.split("Question:\n", 1)[1].split("\n\nGold answer(s):", 1)[0]


def agent_and_judge(body: dict):
    """Stub endpoint: the agent answers per CASES; the judge grades per CASES
    (unreadable: prose; error: HTTP 400)."""
    if is_judge_call(body):
        question = question_of_judge_call(last_user_text(body))
        grade = CASES[question][2]
        if grade == "error":
            from agentlab.testing.stub_llm import error_reply

            return error_reply(400, "the grader broke", type="invalid_request_error")
        reply = (
            "looks fine to me" if grade == "unreadable" else json.dumps({"grade": grade, "explanation": "x"})
        )
        return text_reply(reply, usage=(100, 20), model=body["model"])
    return final_answer_reply(CASES[last_user_text(body)][1], "e", "r", usage=(10, 5))


def scripted_grader(n: int) -> ScriptedProvider:
    """A scripted grader answering ``n`` calls in any order, per CASES."""

    def grade(messages: list[dict]) -> Completion:
        question = question_of_judge_call(messages[-1]["content"])
        verdict = CASES[question][2]
        if verdict == "error":
            raise ProviderError("HTTP 400: the grader broke", transient=False)
        reply = (
            "looks fine to me"
            if verdict == "unreadable"
            else json.dumps({"grade": verdict, "explanation": "x"})
        )
        return text(reply, usage=Usage(100, 20), model="grader")

    return ScriptedProvider([grade] * n, model="grader")


def exact_run(endpoint, dataset_file: Path, run_id: str = "exact") -> Run:
    with StubLLMServer(agent_and_judge) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(dataset_file), "--run-id", run_id, "--concurrency", "2")
        assert server.request_count == len(CASES)
    return Run.objects.get(run_id=run_id)


def test_rescore_from_exact_to_judge_without_running_the_agent(endpoint, dataset_file):
    source = exact_run(endpoint, dataset_file)
    # exact match: only "Danube" matches its gold
    assert (source.metrics["correct"], source.metrics["scored"]) == (1, 6)
    turns_before = Turn.objects.count()

    grader = scripted_grader(6)
    result = rescore(source_run_id="exact", scorer="judge", run_id="judged", provider=grader)

    run = result.run
    assert Turn.objects.count() == turns_before  # no agent turn was run
    assert run.rescored_from_id == source.pk and run.config["rescored_from"] == "exact"
    assert run.config["scorer"] == "judge" and run.status == "success"
    assert result.copied == 6
    assert len(grader.calls) == 6  # every answer once; the error is not retried (permanent)
    by_question = {p.example.question: p for p in run.predictions.select_related("example")}
    grades = {q: (p.score, p.correct) for q, p in by_question.items()}
    assert grades == {
        "Which city hosted the 1900 Olympics?": (1.0, True),
        "Who wrote Hamlet?": (1.0, True),
        "What is the capital of Spain?": (0.0, False),
        "Name the two Marx brothers in Duck Soup.": (0.5, False),
        "Which river flows through Vienna?": (None, None),
        "What is the largest planet?": (None, None),
    }
    assert "no readable grade" in by_question["Which river flows through Vienna?"].score_explanation
    assert "the judge failed" in by_question["What is the largest planet?"].score_explanation
    assert (
        by_question["Who wrote Hamlet?"].turn_id == source.predictions.get(example__external_id="q1").turn_id
    )

    m = run.metrics
    # partial is scored but not correct; unscored rows are outside the denominator
    assert (m["correct"], m["scored"], m["unscored"]) == (2, 4, 2)
    assert m["accuracy"] == 0.5 and m["score_mean"] == pytest.approx(2.5 / 4)
    assert m["judge"] == {
        "graded": 6,
        "grades": {"correct": 2, "incorrect": 1, "partial": 1, "unscored": 2},
        "cached": 0,
    }
    # the judge's usage is its own role; the agent's is the source run's, unchanged
    roles = m["usage"]["by_role"]
    assert roles["agent"] == source.metrics["usage"]["by_role"]["agent"]
    assert (
        roles["judge"]["calls"] == 5 and roles["judge"]["input_tokens"] == 500
    )  # the error made no completion
    assert m["tokens"] == source.metrics["tokens"]  # per-prediction tokens are the agent's
    assert "judge" not in by_question["Who wrote Hamlet?"].usage.get("by_role", {})
    # the original run is untouched and stays comparable
    source.refresh_from_db()
    assert source.metrics["correct"] == 1 and source.predictions.filter(scorer="exact").count() == 6


def test_the_api_and_the_admin_show_where_a_rescored_run_came_from(endpoint, dataset_file, client, staff):
    exact_run(endpoint, dataset_file)
    rescore(source_run_id="exact", scorer="judge", run_id="judged", provider=scripted_grader(6))
    api = ApiClient(staff)
    detail = api.get("/api/runs/judged").json()
    assert detail["rescored_from"] == "exact"
    assert (detail["accuracy"]["correct"], detail["accuracy"]["n"]) == (2, 4)
    items = api.get("/api/runs/judged/predictions?limit=10").json()["items"]
    partial = next(p for p in items if p["example_id"] == "q3")
    assert (partial["score"], partial["correct"], partial["judgement"]["grade"]) == (0.5, False, "partial")
    assert partial["judgement"]["usage"]["by_role"]["judge"]["calls"] == 1
    client.force_login(staff)
    run = Run.objects.get(run_id="judged")
    page = client.get(f"/admin/evaluation/run/{run.pk}/change/").content.decode()
    assert "exact" in page and "50.0% (2/4; 95% CI" in page


def test_a_second_rescore_takes_the_judges_grades_from_the_cache(endpoint, dataset_file):
    exact_run(endpoint, dataset_file)
    rescore(source_run_id="exact", scorer="judge", run_id="judged-1", provider=scripted_grader(6))
    assert JudgeCacheEntry.objects.count() == 4  # readable grades only

    again = scripted_grader(2)  # only the unscored two are asked again
    result = rescore(source_run_id="exact", scorer="judge", run_id="judged-2", provider=again)

    assert len(again.calls) == 2
    assert result.judge is not None
    assert (result.judge.cached, result.judge.calls) == (4, 2)
    first = Run.objects.get(run_id="judged-1").metrics
    second = result.run.metrics
    assert (second["correct"], second["scored"]) == (first["correct"], first["scored"])
    assert second["judge"]["cached"] == 4
    assert second["usage"]["by_role"]["judge"]["calls"] == 1  # the unreadable one, paid again
    cached = result.run.predictions.get(example__external_id="q0")
    assert cached.judgement["cached"] is True and cached.judgement["usage"] == {}


def test_a_judged_run_rescored_exactly_gets_exact_scores_back(endpoint, dataset_file):
    exact_run(endpoint, dataset_file)
    rescore(source_run_id="exact", scorer="judge", run_id="judged", provider=scripted_grader(6))
    back = rescore(source_run_id="judged", scorer="exact", run_id="exact-again")
    assert (back.run.metrics["correct"], back.run.metrics["scored"]) == (1, 6)
    assert back.judge is None
    assert "judge" not in back.run.metrics["usage"]["by_role"]


def test_a_dataset_scored_by_the_judge_is_judged_during_run_eval(endpoint, dataset_file):
    call_command("import_dataset", str(dataset_file), "--name", "judged_ds", "--scorer", "judge")
    with StubLLMServer(agent_and_judge) as server:
        endpoint(server)
        call_command(
            "run_eval",
            "--no-review",
            "judged_ds",
            "--run-id",
            "rj",
            "--judge-model",
            "grader-model",
            "--concurrency",
            "2",
        )
        judge_bodies = [b for b in server.requests if is_judge_call(b)]
        assert len(judge_bodies) == 6 and {b["model"] for b in judge_bodies} == {"grader-model"}
    run = Run.objects.get(run_id="rj")
    assert run.predictions.filter(scorer="judge", completed_at__isnull=False).count() == 6
    m = run.metrics
    assert (m["correct"], m["scored"]) == (2, 4)
    assert m["usage"]["by_model"]["grader-model"]["calls"] == 5
    assert m["usage"]["by_role"]["judge"]["calls"] == 5
    assert m["usage"]["by_role"]["agent"]["calls"] == 6


def test_rescore_refuses_bad_input_with_exit_2(endpoint, dataset_file):
    exact_run(endpoint, dataset_file)
    for argv, message in (
        (["nope", "--scorer", "exact"], "run 'nope' not found"),
        (["exact", "--scorer", "llm"], "unknown scorer 'llm'"),
        (["exact", "--scorer", "exact", "--run-id", "exact"], "is not a re-scoring of"),
    ):
        with pytest.raises(CommandError) as excinfo:
            call_command("rescore", *argv)
        assert excinfo.value.returncode == 2
        assert message in str(excinfo.value)
    Run.objects.filter(run_id="exact").update(status="started")
    with pytest.raises(CommandError, match="is not finished"):
        call_command("rescore", "exact", "--scorer", "contains")


@pytest.mark.local_model  # a GGUF judge file is checked after llama-cpp-python is found
def test_a_judge_model_that_is_not_there_is_exit_2_before_anything_is_written(
    endpoint, dataset_file, settings
):
    exact_run(endpoint, dataset_file)
    settings.AGENTLAB_LLM_BASE_URL = None  # the embedded model: --judge-model is a GGUF path
    with pytest.raises(CommandError) as excinfo:
        call_command("rescore", "exact", "--scorer", "judge", "--judge-model", "/nonexistent/grader.gguf")
    assert excinfo.value.returncode == 2
    assert "/nonexistent/grader.gguf" in str(excinfo.value)
    assert list(Run.objects.values_list("run_id", flat=True)) == ["exact"]


def test_rescore_command_prints_the_new_runs_metrics(endpoint, dataset_file, capsys):
    exact_run(endpoint, dataset_file)
    call_command("rescore", "exact", "--scorer", "contains", "--run-id", "contains")
    out = capsys.readouterr().out
    run = Run.objects.get(run_id="contains")
    # "Paris, France" contains Paris, "Danube" itself
    assert (run.metrics["correct"], run.metrics["scored"]) == (2, 6)
    assert "33.3% (2/6; 95% CI" in out and "run id: contains" in out


def test_rescore_says_so_when_the_judge_could_not_grade_any_answer(endpoint, dataset_file, capsys):
    """Before: "6 graded … 6 unscored" for a judge that graded nothing."""
    from agentlab.testing.stub_llm import error_reply

    exact_run(endpoint, dataset_file)
    capsys.readouterr()
    with StubLLMServer(
        lambda body: error_reply(400, "no such model", type="invalid_request_error")
    ) as server:
        endpoint(server)
        call_command("rescore", "exact", "--scorer", "judge", "--run-id", "nograde")
    err = capsys.readouterr().err
    assert "judge: 6 answers, 0 graded, could not grade any (left unscored: the judge failed" in err
    assert "; 0 from the cache, 6 calls" in err


def test_a_rescore_keeps_its_sources_dataset_version_and_an_unfinished_end(endpoint, dataset_file):
    """A fresh user's findings: a rescore of a version-1 run after the dataset
    moved to version 2 is on version 1 (the same predictions), and a cancelled
    run re-scored is still cancelled — the regression gate refuses it as a
    baseline, as it refuses its source."""
    source = exact_run(endpoint, dataset_file)
    assert source.dataset_version == 1
    call_command("rescore", "exact", "--scorer", "contains", "--run-id", "after")
    Run.objects.filter(pk=source.pk).update(status=RunStatus.CANCELLED)
    source.refresh_from_db()
    dataset = source.dataset
    # the dataset moves on: a changed file under its name is its version 2
    changed = dataset_file.read_text(encoding="utf-8").replace('"q0"', '"q0-new"')
    dataset_file.write_text(changed, encoding="utf-8")
    call_command("import_dataset", str(dataset_file), "--name", dataset.name)
    dataset.refresh_from_db()
    assert dataset.versions.count() == 2
    result = rescore(source_run_id="exact", scorer="exact", run_id="again")
    assert (result.run.dataset_version, result.run.status) == (1, RunStatus.CANCELLED)
    assert Run.objects.get(run_id="after").status == RunStatus.SUCCESS

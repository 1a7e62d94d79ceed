"""Trajectory verdicts in a run on the stub: ``run_eval`` scores each path
from the event log beside the answer, the metrics give each scorer with its
interval, the table shows them, and ``rescore --scorer trajectory`` scores an
old run from its log without running the agent."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, tool_call_reply
from evaluation.metrics.intervals import wilson_interval
from evaluation.models import Prediction, Run
from evaluation.run.agent_path import agent_trajectory
from evaluation.scoring.trajectory_spec import TrajectoryStep
from turns.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)

CALC = ("calculator", {"expression": "2+2"})
SEARCH = ("search_documents", {"query": "two plus two"})

#: question id → (question, expected trajectory or None)
EXAMPLES: dict[str, tuple[str, list[tuple[str, dict[str, Any]]] | None]] = {
    "right": ("What is 2+2? (right)", [CALC]),
    "wrong": ("What is 2+2? (wrong)", [CALC]),
    "extra": ("What is 2+2? (extra)", [CALC]),
    "missing": ("What is 2+2? (missing)", [CALC]),
    "plain": ("What is 2+2? (plain)", None),
}

#: what the agent does per question id, in run A
SCRIPT_A: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "right": [CALC],
    "wrong": [SEARCH],
    "extra": [SEARCH, CALC],
    "missing": [],
    "plain": [CALC],
}


def write_dataset(tmp_path: Path) -> Path:
    lines = []
    for qid, (question, trajectory) in EXAMPLES.items():
        line: dict[str, Any] = {"question_id": qid, "question": question, "answer": "4", "task_type": "math"}
        if trajectory is not None:
            line["trajectory"] = [{"tool": tool, "args": args} for tool, args in trajectory]
            line["trajectory_slack"] = 0
        lines.append(line)
    path = tmp_path / "paths.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def agent(script: Mapping[str, list[tuple[str, dict[str, Any]]]]):
    """A stub agent that makes the script's calls for its question, then answers 4."""
    by_question = {question: script[qid] for qid, (question, _) in EXAMPLES.items()}

    def handler(body: dict):
        calls = by_question[next(m["content"] for m in body["messages"] if m["role"] == "user")]
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done < len(calls):
            return tool_call_reply(*calls[done])
        return final_answer_reply("4", "e", "r")

    return handler


def run_a(endpoint, tmp_path: Path, run_id: str = "A", script=None) -> Run:
    with StubLLMServer(agent(script or SCRIPT_A)) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(write_dataset(tmp_path)), "--run-id", run_id)
    return Run.objects.get(run_id=run_id)


def verdicts(run: Run) -> dict[str, dict[str, Any]]:
    return {p.example.external_id: p.trajectory_scores for p in run.predictions.select_related("example")}


def test_each_prediction_gets_trajectory_verdicts_beside_its_answer_verdict(endpoint, tmp_path, capsys):
    run = run_a(endpoint, tmp_path)
    got = verdicts(run)
    assert {qid: v["trajectory"]["correct"] for qid, v in got.items() if v} == {
        "right": True,
        "wrong": False,
        "extra": False,
        "missing": False,
    }
    assert got["plain"] == {}  # no expected trajectory: nothing, not wrong
    assert got["wrong"]["trajectory"]["explanation"] == (
        "step 1 called search_documents, expected calculator (strict match, arguments exact)"
    )
    assert got["extra"]["tool_f1"]["value"] == pytest.approx(2 / 3)  # precision 1/2, recall 1
    assert got["missing"]["tool_f1"]["value"] == 0.0
    assert {qid: v["steps"]["correct"] for qid, v in got.items() if v} == {
        "right": True,
        "wrong": True,
        "extra": False,
        "missing": True,
    }
    # the answers' verdicts are untouched: every answer is 4
    assert set(run.predictions.values_list("correct", flat=True)) == {True}

    m = run.metrics["trajectory"]
    assert (m["trajectory"]["scored"], m["trajectory"]["correct"]) == (4, 1)
    interval = wilson_interval(1, 4)
    assert interval is not None and m["trajectory"]["accuracy_ci"] == pytest.approx(list(interval))
    assert m["tool_f1"]["mean"] == pytest.approx((1 + 0 + 2 / 3 + 0) / 4)
    assert m["steps"]["per_task_type"]["math"]["correct"] == 3
    out = capsys.readouterr().out
    assert "Trajectory (the agent's path)" in out and "25.0%" in out


def test_the_path_is_read_from_the_log_with_results(endpoint, tmp_path):
    run = run_a(endpoint, tmp_path)
    turn = run.predictions.get(example__external_id="extra").turn
    path = agent_trajectory(turn.pk)
    assert [(s.tool, s.args) for s in path[:2]] == [SEARCH, CALC]
    assert path[1].result is not None and "4" in path[1].result
    assert path[-1].tool == "final_answer"  # kept here; the scorers leave it out
    assert isinstance(path[0], TrajectoryStep) and path[0].step == 1


def test_rescore_trajectory_scores_an_old_run_from_its_log(endpoint, tmp_path, capsys):
    source = run_a(endpoint, tmp_path)
    # an old run: scored before trajectories existed
    Prediction.objects.filter(run=source).update(trajectory_scores={})
    Run.objects.filter(pk=source.pk).update(
        metrics={k: v for k, v in source.metrics.items() if k != "trajectory"}
    )
    turns = Turn.objects.count()
    call_command("rescore", "A", "--scorer", "trajectory", "--run-id", "A-paths")
    new = Run.objects.get(run_id="A-paths")
    assert Turn.objects.count() == turns  # the agent was not run again
    assert new.rescored_from_id == source.pk
    assert {q: v["trajectory"]["correct"] for q, v in verdicts(new).items() if v} == {
        "right": True,
        "wrong": False,
        "extra": False,
        "missing": False,
    }
    assert new.metrics["correct"] == 5 and new.metrics["trajectory"]["trajectory"]["correct"] == 1
    assert "Trajectory (the agent's path)" in capsys.readouterr().out


def test_rescore_refuses_an_unknown_scorer_naming_trajectory(endpoint, tmp_path):
    run_a(endpoint, tmp_path)
    with pytest.raises(CommandError) as excinfo:
        call_command("rescore", "A", "--scorer", "paths")
    assert excinfo.value.returncode == 2 and "or 'trajectory'" in str(excinfo.value)


#: run B: the right path everywhere, and no call on the example without an expected path
SCRIPT_B = {"right": [CALC], "wrong": [CALC], "extra": [CALC], "missing": [CALC], "plain": []}


def test_compare_runs_diffs_the_paths_with_mcnemar_and_wilcoxon_as_statsmodels_and_scipy(
    endpoint, tmp_path, capsys
):
    from scipy.stats import wilcoxon
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.multitest import multipletests

    from evaluation.compare.services import run_compare_ids

    a = run_a(endpoint, tmp_path)
    b = run_a(endpoint, tmp_path, run_id="B", script=SCRIPT_B)
    comparison = run_compare_ids(base_run_id="A", candidate_run_id="B")
    view = comparison["trajectory"]
    assert view["counts"] == {
        "identical": 1,
        "diverged": 4,
        "only_base": 0,
        "only_candidate": 0,
        "changed": 0,
    }
    by_example = {d["example_id"]: d["first_divergence"] for d in view["diverged"]}
    assert by_example == {
        "wrong": "step 1: A called search_documents, B called calculator",
        "extra": "step 1: A called search_documents, B called calculator",
        "missing": "step 1: A stopped, B called calculator",
        "plain": "step 1: B stopped, A called calculator",
    }
    passed = view["trajectory_pass"]
    assert (passed["pairs"], passed["fixed"], passed["broken"]) == (4, 3, 0)
    # A passes 1 of 4 (right), B all 4: the 2×2 table [[both, A only], [B only, neither]]
    expected_mcnemar = mcnemar([[1, 0], [3, 0]], exact=True).pvalue
    assert passed["p_value"] == pytest.approx(expected_mcnemar) and expected_mcnemar == pytest.approx(0.25)
    steps_a = [p.steps for p in a.predictions.order_by("example__position")]
    steps_b = [p.steps for p in b.predictions.order_by("example__position")]
    assert steps_a == [2, 2, 3, 1, 2] and steps_b == [2, 2, 2, 2, 1]
    expected_wilcoxon = wilcoxon(steps_a, steps_b).pvalue
    assert view["steps"]["p_value"] == pytest.approx(expected_wilcoxon)
    # Holm over the three tests of the comparison, as statsmodels adjusts them
    answer_p = comparison["overall"]["p_value"]
    assert answer_p == pytest.approx(mcnemar([[5, 0], [0, 0]], exact=True).pvalue)  # no answer changed
    holm = multipletests([answer_p, expected_mcnemar, expected_wilcoxon], method="holm")[1]
    assert [view["answer_p_holm"], passed["p_holm"], view["steps"]["p_holm"]] == pytest.approx(list(holm))

    call_command("compare_runs", "A", "B")
    out = capsys.readouterr().out
    assert "1 identical, 4 diverged, 0 only in A, 0 only in B" in out
    assert "B takes fewer steps than A (mean 1.80 vs 2.00 over 5 examples)" in out
    assert "Diverged paths (4)" in out and "│ wrong   │ step 1: A called search_documents, B" in out
    assert "exact McNemar p = 0.2500 (Holm 0.7500)" in out
    extra = next(d for d in view["diverged"] if d["example_id"] == "extra")
    assert extra["base"]["path"] == [{"tool": t, "args": a} for t, a in SCRIPT_A["extra"]]
    assert extra["candidate"]["path"] == [{"tool": "calculator", "args": {"expression": "2+2"}}]


def path_grader(grades: dict[str, str]):
    """A scripted trajectory judge: the grade per question id's question (``unreadable``: prose)."""
    from agentlab.agent.providers.scripted import ScriptedProvider, text
    from agentlab.agent.types import Completion, Usage

    by_question = {question: grades[qid] for qid, (question, _) in EXAMPLES.items()}

    def grade(messages: list[dict]) -> Completion:
        assert messages[0]["content"].startswith("You grade the path an agent took")
        user = messages[-1]["content"]
        question = user.split("Question:\n", 1)[1].split("\n\nPath:", 1)[0]
        verdict = by_question[question]
        body = "no idea" if verdict == "unreadable" else json.dumps({"grade": verdict, "explanation": "x"})
        return text(body, usage=Usage(100, 20), model="grader")

    return ScriptedProvider([grade] * len(grades), model="grader")


def test_the_trajectory_judge_grades_each_path_with_its_usage_and_cache(endpoint, tmp_path):
    from evaluation.run.rescoring import rescore

    run_a(endpoint, tmp_path)
    grades = {
        "right": "correct",
        "wrong": "incorrect",
        "extra": "partial",
        "missing": "incorrect",
        "plain": "unreadable",
    }
    grader = path_grader(grades)
    result = rescore(source_run_id="A", scorer="trajectory_judge", run_id="A-judged", provider=grader)
    assert len(grader.calls) == 5
    transcript = next(c[-1]["content"] for c in grader.calls if "(extra)" in c[-1]["content"])
    assert '1. search_documents({"query": "two plus two"})\n   result: ' in transcript
    assert '2. calculator({"expression": "2+2"})\n   result: 4' in transcript
    assert "Final answer:\n4" in transcript and "Expected path" in transcript
    got = {q: v["trajectory_judge"] for q, v in verdicts(result.run).items()}
    assert {q: (v["value"], v["correct"]) for q, v in got.items()} == {
        "right": (1.0, True),
        "wrong": (0.0, False),
        "extra": (0.5, False),
        "missing": (0.0, False),
        "plain": (None, None),  # an unreadable grade is unscored, never wrong
    }
    assert "no readable grade" in got["plain"]["explanation"]
    assert got["right"]["judgement"]["usage"]["by_role"]["judge"]["calls"] == 1
    m = result.run.metrics
    assert (
        m["trajectory"]["trajectory_judge"]["scored"],
        m["trajectory"]["trajectory_judge"]["correct"],
    ) == (4, 1)
    assert (
        m["usage"]["by_role"]["judge"]["calls"] == 5 and m["usage"]["by_role"]["judge"]["input_tokens"] == 500
    )
    assert m["trajectory"]["trajectory"]["correct"] == 1  # the pure verdicts are there too

    again = path_grader(grades)
    second = rescore(source_run_id="A", scorer="trajectory_judge", run_id="A-judged-2", provider=again)
    assert len(again.calls) == 1  # four readable grades from the cache; the unreadable one is asked again
    assert second.judge is not None and (second.judge.cached, second.judge.calls) == (4, 1)
    assert verdicts(second.run)["right"]["trajectory_judge"]["judgement"]["cached"] is True


def test_the_run_report_page_shows_the_trajectory_verdicts(endpoint, tmp_path, client, staff):
    from django.urls import reverse

    run = run_a(endpoint, tmp_path)
    client.force_login(staff)
    page = client.get(reverse("admin:evaluation_run_report", args=[run.pk])).content.decode()
    assert "Trajectory: the agent&#x27;s path" in page or "Trajectory: the agent's path" in page
    row = page.split("<td>trajectory</td>", 1)[1].split("</tr>", 1)[0]
    assert '<td class="num">4</td><td class="num">1</td>' in row and "25%" in row

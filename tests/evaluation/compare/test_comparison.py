"""``compare_rows`` and ``regressions``: pairing, per-task-type splits, Holm,
the fixed / broken / errored lists and the counts kept apart (pure, no database)."""

from __future__ import annotations

import json

import pytest

from evaluation.compare.pairing import compare_rows, regressions
from evaluation.compare.shapes import ComparedRow, RunSide
from evaluation.compare.statistics import holm_adjust, mcnemar_exact_p
from evaluation.metrics.compute import PredictionRow, compute_metrics


def side(run_id: str) -> RunSide:
    return {
        "run_id": run_id,
        "status": "success",
        "model": "m",
        "code_version": "v",
        "review": False,
        "dataset_version": 1,
        "created_at": "2026-01-01T00:00:00+00:00",
        "finished_at": None,
        "total": 0,
        "scored": 0,
        "correct": 0,
        "accuracy": None,
    }


def row(key: int, task_type: str, correct: bool | None, *, error: str = "", pk: int = 0) -> ComparedRow:
    return ComparedRow(
        example_key=key,
        example_id=f"ex{key}",
        task_type=task_type,
        prediction_id=pk or key,
        turn_id=(pk or key) + 1000,
        correct=correct,
        prediction="answer",
        gold="gold",
        error=error,
        stop_reason="error" if error else "final",
    )


def table_rows(start: int, task_type: str, *, both_right: int, broken: int, fixed: int, both_wrong: int):
    """Base and candidate rows of one task type with the given 2×2 table."""
    pairs = [(True, True)] * both_right + [(True, False)] * broken
    pairs += [(False, True)] * fixed + [(False, False)] * both_wrong
    base = [row(start + i, task_type, b) for i, (b, _) in enumerate(pairs)]
    candidate = [row(start + i, task_type, c, pk=5000 + start + i) for i, (_, c) in enumerate(pairs)]
    return base, candidate


def compare(base, candidate, base_metrics=None, candidate_metrics=None):
    return compare_rows(
        base,
        candidate,
        dataset="d",
        base=side("base"),
        candidate=side("candidate"),
        base_metrics=base_metrics or {},
        candidate_metrics=candidate_metrics or {},
    )


@pytest.fixture
def two_types():
    """arithmetic: 10 right in both, 9 broken, 1 fixed; lookup: 5 / 3 / 0 / 2."""
    b1, c1 = table_rows(0, "arithmetic", both_right=10, broken=9, fixed=1, both_wrong=0)
    b2, c2 = table_rows(100, "lookup", both_right=5, broken=3, fixed=0, both_wrong=2)
    return b1 + b2, c1 + c2


def test_overall_and_per_task_type_tables_and_p_values(two_types):
    result = compare(*two_types)
    overall = result["overall"]
    assert (overall["both_right"], overall["broken"], overall["fixed"], overall["both_wrong"]) == (
        15,
        12,
        1,
        2,
    )
    assert overall["examples"] == 30
    assert overall["base_accuracy"] == pytest.approx(27 / 30)
    assert overall["candidate_accuracy"] == pytest.approx(16 / 30)
    assert overall["difference"] == pytest.approx(-11 / 30)
    # 1 of 13 discordant pairs: 2 · (1 + 13) / 2^13
    assert (
        overall["p_value"] == pytest.approx(mcnemar_exact_p(fixed=1, broken=12)) == pytest.approx(28 / 8192)
    )
    assert overall["ci_low"] < overall["difference"] < overall["ci_high"] < 0
    assert list(result["per_task_type"]) == ["arithmetic", "lookup"]
    arithmetic, lookup = result["per_task_type"]["arithmetic"], result["per_task_type"]["lookup"]
    assert (arithmetic["broken"], arithmetic["fixed"], lookup["broken"], lookup["fixed"]) == (9, 1, 3, 0)
    # 1 of 10 discordant pairs: 2 · 11/1024; 0 of 3: 2/8
    assert arithmetic["p_value"] == pytest.approx(22 / 1024)
    assert lookup["p_value"] == pytest.approx(0.25)


def test_per_task_type_p_values_are_holm_adjusted(two_types):
    result = compare(*two_types)
    raw = [s["p_value"] for s in result["per_task_type"].values()]
    assert [s["p_holm"] for s in result["per_task_type"].values()] == holm_adjust(raw)
    # two tests: the smaller p-value doubles
    assert result["per_task_type"]["arithmetic"]["p_holm"] == pytest.approx(44 / 1024)
    assert result["per_task_type"]["lookup"]["p_holm"] == pytest.approx(0.25)
    assert result["overall"]["p_holm"] is None


def test_fixed_and_broken_lists_link_both_predictions(two_types):
    result = compare(*two_types)
    assert [p["example_id"] for p in result["broken"]] == [f"ex{i}" for i in range(10, 19)] + [
        "ex105",
        "ex106",
        "ex107",
    ]
    assert [p["example_id"] for p in result["fixed"]] == ["ex19"]
    pair = result["fixed"][0]
    assert pair["base"]["correct"] is False and pair["candidate"]["correct"] is True
    assert (pair["base"]["prediction_id"], pair["candidate"]["prediction_id"]) == (19, 5019)
    assert (pair["base"]["turn_id"], pair["candidate"]["turn_id"]) == (1019, 6019)


def test_errored_count_as_wrong_and_are_listed_unscored_and_unpaired_are_apart():
    base = [
        row(1, "t", True),
        row(2, "t", False, error="provider down"),
        row(3, "t", None),
        row(4, "t", True),
    ]
    candidate = [row(1, "t", False, error="timeout"), row(2, "t", True), row(3, "t", True), row(5, "t", True)]
    result = compare(base, candidate)
    assert result["counts"] == {
        "paired": 3,
        "changed": 0,
        "scored_both": 2,
        "unscored": 1,
        "only_base": 1,
        "only_candidate": 1,
        "errored": 2,
    }
    assert [p["example_id"] for p in result["broken"]] == ["ex1"]  # right → errored
    assert [p["example_id"] for p in result["fixed"]] == ["ex2"]  # errored → right
    assert [p["example_id"] for p in result["errored"]] == ["ex1", "ex2"]
    assert result["errored"][0]["candidate"]["error"] == "timeout"
    assert (result["unscored"], result["only_base"], result["only_candidate"]) == (["ex3"], ["ex4"], ["ex5"])


def test_paired_accuracy_agrees_with_each_runs_own_accuracy_on_the_same_examples():
    verdicts = [True, False, None, True, False]
    errors = ["", "boom", "", "", ""]
    base = [row(i, "t", v, error=e) for i, (v, e) in enumerate(zip(verdicts, errors, strict=True))]
    candidate = [row(i, "t", True) for i in range(5)]
    own = compute_metrics(
        PredictionRow(
            task_type="t",
            correct=v,
            steps=1,
            input_tokens=1,
            output_tokens=1,
            cost=None,
            stop_reason="final",
            latency_ms=1,
            error=e or None,
        )
        for v, e in zip(verdicts, errors, strict=True)
    )
    result = compare(base, candidate)
    assert result["overall"]["base_accuracy"] == own["accuracy"] == 0.5
    assert result["overall"]["examples"] == own["scored"]


def test_deltas_of_cost_tokens_latency_stop_reasons_review_and_checks():
    base_metrics = {
        "cost": 1.5,
        "tokens": {"input": 100, "output": 20},
        "steps_mean": 2.0,
        "latency_ms": {"p50": 100.0, "p95": 400.0},
        "errors": 1,
        "stop_reasons": {"final": 3, "max_steps": 1},
        "review": {"first_attempt_accuracy": 0.5, "final_accuracy": 0.75, "review_retries": 2},
        "checks": {"c": {"scope": "turn", "ran": 4, "passed": 2, "failed": 2, "pass_rate": 0.5, "turns": 4}},
    }
    candidate_metrics = {
        "cost": None,
        "tokens": {"input": 150, "output": 10},
        "steps_mean": 3.0,
        "latency_ms": {"p50": 80.0, "p95": 500.0},
        "errors": 0,
        "stop_reasons": {"final": 3, "length": 1},
        "review": {"first_attempt_accuracy": 0.5, "final_accuracy": 0.5, "review_retries": 0},
        "checks": {"c": {"scope": "turn", "ran": 4, "passed": 3, "failed": 1, "pass_rate": 0.75, "turns": 4}},
    }
    result = compare([], [], base_metrics, candidate_metrics)
    metrics = result["metrics"]
    assert metrics["cost"] == {"base": 1.5, "candidate": None, "difference": None}
    assert metrics["input_tokens"]["difference"] == 50 and metrics["output_tokens"]["difference"] == -10
    assert metrics["latency_p50_ms"]["difference"] == -20 and metrics["latency_p95_ms"]["difference"] == 100
    assert metrics["steps_mean"]["difference"] == 1.0 and metrics["errors"]["difference"] == -1
    assert result["stop_reasons"] == {
        "final": {"base": 3.0, "candidate": 3.0, "difference": 0.0},
        "length": {"base": 0.0, "candidate": 1.0, "difference": 1.0},
        "max_steps": {"base": 1.0, "candidate": 0.0, "difference": -1.0},
    }
    assert result["review"]["final_accuracy"]["difference"] == pytest.approx(-0.25)
    assert result["review"]["review_retries"]["difference"] == -2
    assert result["checks"]["c"]["difference"] == pytest.approx(0.25)
    assert result["overall"]["examples"] == 0 and result["overall"]["p_value"] is None


def test_the_comparison_is_plain_json(two_types):
    result = compare(*two_types)
    assert json.loads(json.dumps(result)) == result


def test_two_rows_of_one_example_are_refused():
    with pytest.raises(ValueError, match="two predictions of example 'ex1'"):
        compare([row(1, "t", True), row(1, "t", False)], [])


def test_regressions_name_the_overall_and_the_task_type_that_got_worse(two_types):
    result = compare(*two_types)
    found = regressions(result, alpha=0.05)
    assert len(found) == 2
    assert found[0].startswith("overall: accuracy 0.900 → 0.533 (-0.367")
    assert "exact McNemar p = " in found[0] and "< alpha 0.05" in found[0]
    assert found[1].startswith("task type 'arithmetic'") and "Holm-adjusted" in found[1]
    # arithmetic's Holm-adjusted p is 44/1024 ≈ 0.043: not below 0.04
    assert [f.split(":")[0] for f in regressions(result, alpha=0.04)] == ["overall"]


def test_noise_and_improvements_are_no_regression():
    noise_base, noise_candidate = table_rows(0, "t", both_right=10, broken=2, fixed=1, both_wrong=3)
    assert regressions(compare(noise_base, noise_candidate), alpha=0.05) == []
    better_base, better_candidate = table_rows(0, "t", both_right=0, broken=0, fixed=12, both_wrong=0)
    result = compare(better_base, better_candidate)
    assert result["overall"]["p_value"] < 0.001
    assert regressions(result, alpha=0.05) == []

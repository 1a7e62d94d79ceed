"""Run metrics in evaluation/metrics.py on hand-built prediction rows (no Django needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentlab.agent.types import Completion, Usage
from agentlab.agent.usage import UsageTotals
from evaluation.metrics.compute import PredictionRow, compute_metrics, percentile
from evaluation.metrics.intervals import wilson_interval
from evaluation.metrics.metrics_table import format_table


def _row(
    task_type: str,
    correct: bool | None,
    *,
    steps: int = 1,
    input_tokens: int | None = 0,
    output_tokens: int | None = 0,
    cost: float | None = None,
    stop_reason: str = "final",
    latency_ms: int | None = None,
    error: str | None = None,
) -> PredictionRow:
    return PredictionRow(
        task_type=task_type,
        correct=correct,
        steps=steps,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=cost,
        stop_reason=stop_reason,
        latency_ms=latency_ms,
        error=error,
    )


ROWS = [
    _row("math", True, steps=3, input_tokens=100, output_tokens=20, cost=0.01, latency_ms=100),
    _row(
        "math",
        False,
        steps=5,
        input_tokens=200,
        output_tokens=30,
        cost=0.02,
        stop_reason="max_steps",
        latency_ms=200,
    ),
    # could not score (gold missing): counted, but outside the accuracy denominator
    _row("math", None, steps=1, input_tokens=None, output_tokens=None, latency_ms=300),
    _row("multiple_choice", True, steps=2, input_tokens=50, output_tokens=None, cost=0.005, latency_ms=400),
    # the turn errored: stored as wrong, so it stays in the denominator
    _row("multiple_choice", False, steps=0, stop_reason="error", latency_ms=None, error="provider timeout"),
    _row("sql", True, steps=4, input_tokens=10, output_tokens=5, latency_ms=1000),
]


def test_compute_metrics_on_a_known_set_of_rows() -> None:
    metrics = compute_metrics(ROWS)
    cost = metrics.pop("cost")
    assert cost == pytest.approx(0.035)
    # these rows carry no per-call usage
    assert metrics.pop("usage") == UsageTotals().to_dict()
    # added with the reviewer metrics (issue 7); no row here was retried by a review
    review = metrics.pop("review")
    assert {k: v for k, v in review.items() if k != "per_task_type"} == {
        "first_attempt_accuracy": 0.6,
        "final_accuracy": 0.6,
        "review_retries": 0,
        "review_retry_rate": 0.0,
        "retry_fixed": 0,
        "retry_broke": 0,
        "verdicts": {},
        "review_failed": 0,
    }
    # added with the intervals (issue 16): 95 % Wilson, overall and per task type
    assert metrics.pop("accuracy_ci") == pytest.approx(list(wilson_interval(3, 5) or ()))
    assert metrics.pop("score_mean") == pytest.approx(0.6)
    for task_type, (k, n) in {"math": (1, 2), "multiple_choice": (1, 2), "sql": (1, 1)}.items():
        assert metrics["per_task_type"][task_type].pop("accuracy_ci") == pytest.approx(
            list(wilson_interval(k, n) or ())
        )
    assert metrics == {
        "total": 6,
        "scored": 5,
        "unscored": 1,
        "correct": 3,
        "accuracy": 0.6,
        "errors": 1,
        "per_task_type": {
            "math": {"total": 3, "scored": 2, "correct": 1, "accuracy": 0.5},
            "multiple_choice": {"total": 2, "scored": 2, "correct": 1, "accuracy": 0.5},
            "sql": {"total": 1, "scored": 1, "correct": 1, "accuracy": 1.0},
        },
        "steps_mean": 2.5,
        "tokens": {"input": 360, "output": 55, "unknown_rows": 2},
        "stop_reasons": {"error": 1, "final": 4, "max_steps": 1},
        # known latencies 100, 200, 300, 400, 1000; p95 at rank 3.8 → 400 + 0.8 * 600
        "latency_ms": {"p50": 300.0, "p95": 880.0, "mean": 400.0},
    }


def test_metrics_keys_are_sorted_and_json_round_trips() -> None:
    metrics = compute_metrics(reversed(ROWS))  # any iterable, any order
    assert list(metrics["stop_reasons"]) == ["error", "final", "max_steps"]
    assert list(metrics["per_task_type"]) == ["math", "multiple_choice", "sql"]
    assert json.loads(json.dumps(metrics)) == metrics


def test_unscored_rows_are_kept_apart_from_wrong_rows() -> None:
    unscored_only = compute_metrics([_row("math", None), _row("math", None)])
    wrong_only = compute_metrics([_row("math", False), _row("math", False)])
    assert (unscored_only["scored"], unscored_only["unscored"], unscored_only["accuracy"]) == (0, 2, None)
    assert unscored_only["per_task_type"]["math"]["accuracy"] is None
    assert (wrong_only["scored"], wrong_only["unscored"], wrong_only["accuracy"]) == (2, 0, 0.0)
    mixed = compute_metrics([_row("math", True), _row("math", None), _row("math", False)])
    assert mixed["accuracy"] == 0.5


def test_empty_input_gives_zeros_and_nones_without_dividing_by_zero() -> None:
    assert compute_metrics([]) == {
        "total": 0,
        "scored": 0,
        "unscored": 0,
        "correct": 0,
        "accuracy": None,
        "accuracy_ci": None,
        "score_mean": None,
        "errors": 0,
        "per_task_type": {},
        "steps_mean": None,
        "tokens": {"input": 0, "output": 0, "unknown_rows": 0},
        "cost": None,
        "usage": UsageTotals().to_dict(),
        "stop_reasons": {},
        "latency_ms": {"p50": None, "p95": None, "mean": None},
        # added with the reviewer metrics (issue 7)
        "review": {
            "first_attempt_accuracy": None,
            "final_accuracy": None,
            "review_retries": 0,
            "review_retry_rate": None,
            "retry_fixed": 0,
            "retry_broke": 0,
            "verdicts": {},
            "review_failed": 0,
            "per_task_type": {},
        },
    }


def _usage(*calls: tuple[str, str, int, int, float | None]) -> dict[str, Any]:
    totals = UsageTotals()
    for model, role, tokens_in, tokens_out, cost in calls:
        completion = Completion(text="", usage=Usage(tokens_in, tokens_out), model=model, cost=cost)
        totals.add(completion, role=role)  # type: ignore[arg-type]
    return totals.to_dict()


def test_cost_per_model_is_summed_and_an_unpriced_model_stays_unknown() -> None:
    rows = [
        PredictionRow(
            task_type="math",
            correct=True,
            steps=2,
            input_tokens=1100,
            output_tokens=60,
            cost=0.0011,
            stop_reason="final",
            latency_ms=10,
            usage=_usage(("gpt-4o-mini", "agent", 1000, 50, 0.001), ("local-judge", "review", 100, 10, None)),
        ),
        PredictionRow(
            task_type="math",
            correct=False,
            steps=1,
            input_tokens=500,
            output_tokens=20,
            cost=0.0004,
            stop_reason="final",
            latency_ms=10,
            usage=_usage(("gpt-4o-mini", "agent", 500, 20, 0.0004)),
        ),
    ]
    usage = compute_metrics(rows)["usage"]
    mini, judge = usage["by_model"]["gpt-4o-mini"], usage["by_model"]["local-judge"]
    assert (mini["calls"], mini["input_tokens"], mini["output_tokens"]) == (2, 1500, 70)
    assert mini["cost"] == pytest.approx(0.0014) and mini["unpriced_calls"] == 0
    assert (judge["calls"], judge["cost"], judge["unpriced_calls"]) == (1, None, 1)
    assert (usage["by_role"]["agent"]["calls"], usage["by_role"]["review"]["calls"]) == (2, 1)
    table = format_table(compute_metrics(rows))
    assert "Per model" in table
    mini_line = next(line for line in table.splitlines() if "gpt-4o-mini" in line)
    judge_line = next(line for line in table.splitlines() if "local-judge" in line)
    assert "$0.0014" in mini_line and "—" in judge_line and "$" not in judge_line


def test_cost_is_none_when_no_row_knows_it_and_latency_none_when_none_known() -> None:
    metrics = compute_metrics([_row("math", True, cost=None, latency_ms=None)])
    assert metrics["cost"] is None
    assert metrics["latency_ms"] == {"p50": None, "p95": None, "mean": None}
    assert compute_metrics([_row("math", True, cost=0.0)])["cost"] == 0.0


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([7], 50, 7.0),
        ([7], 95, 7.0),
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 0, 1.0),
        ([1, 2, 3, 4], 100, 4.0),
        (list(range(1, 101)), 95, 95.05),
    ],
)
def test_percentile_interpolates_linearly_between_ranks(values: list[int], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)


def test_format_table_shows_every_metric_as_plain_text() -> None:
    text = format_table(compute_metrics(ROWS))
    assert "\x1b" not in text
    for expected in (
        "Evaluation metrics",
        "60.0% (3/5; 95% CI 23.1–88.2%)",  # the Wilson interval and n beside every accuracy
        "unscored",
        "errors",
        "2.50",  # mean steps
        "360",
        "55",
        "rows with unknown tokens",
        "$0.0350",
        "300.0",
        "880.0",
        "400.0",
        "Per task type",
        "multiple_choice",
        "100.0%",
        "Stop reasons",
        "max_steps",
    ):
        assert expected in text, expected
    sql_line = next(line for line in text.splitlines() if "sql" in line)
    assert [cell.strip() for cell in sql_line.split("│")[1:5]] == ["sql", "1", "1", "1"]
    assert "100.0% (1/1; 95% CI" in sql_line


def test_format_table_of_empty_metrics_shows_dashes() -> None:
    text = format_table(compute_metrics([]))
    accuracy_line = next(line for line in text.splitlines() if "accuracy" in line)
    assert "— (0 scored)" in accuracy_line
    assert "\x1b" not in text


def _reviewed(
    task_type: str, first: bool | None, final: bool | None, retried: bool, verdict: str = ""
) -> PredictionRow:
    return PredictionRow(
        task_type=task_type,
        correct=final,
        steps=1,
        input_tokens=1,
        output_tokens=1,
        cost=None,
        stop_reason="final",
        latency_ms=1,
        first_correct=first,
        review_retried=retried,
        review_verdict=verdict,
    )


def test_reviewer_metrics_count_fixes_and_breaks_overall_and_per_task_type() -> None:
    rows = [
        _reviewed("math", False, True, True, "accept"),  # fixed
        _reviewed("math", True, False, True, "cannot_judge"),  # broke
        _reviewed("math", True, True, False, "accept"),  # not retried (first_correct ignored)
        _reviewed("qa", False, False, True, "failed"),  # retried, still wrong
        _reviewed("qa", None, True, False, "failed"),  # not retried: first = final = right
        _reviewed("qa", None, None, False),  # unscored, not reviewed
    ]
    metrics = compute_metrics(rows)
    review = metrics["review"]
    assert review["per_task_type"] == {
        "math": {
            "first_attempt_accuracy": 2 / 3,
            "final_accuracy": 2 / 3,
            "review_retries": 2,
            "review_retry_rate": 2 / 3,
            "retry_fixed": 1,
            "retry_broke": 1,
            "verdicts": {"accept": 2, "cannot_judge": 1},
            "review_failed": 0,
        },
        "qa": {
            "first_attempt_accuracy": 0.5,
            "final_accuracy": 0.5,
            "review_retries": 1,
            "review_retry_rate": 1 / 3,
            "retry_fixed": 0,
            "retry_broke": 0,
            "verdicts": {"failed": 2},
            "review_failed": 2,
        },
    }
    del review["per_task_type"]
    assert review == {
        "first_attempt_accuracy": 3 / 5,
        "final_accuracy": 3 / 5,
        "review_retries": 3,
        "review_retry_rate": 0.5,
        "retry_fixed": 1,
        "retry_broke": 1,
        "verdicts": {"accept": 2, "cannot_judge": 1, "failed": 2},
        "review_failed": 2,
    }
    assert "review verdicts" in format_table(metrics)
    assert "accept 2, cannot_judge 1, failed 2" in format_table(metrics, width=120)

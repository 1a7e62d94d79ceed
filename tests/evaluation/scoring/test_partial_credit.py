"""Partial credit: the ``f1`` scorer's mean in the metrics and in a
comparison, and a judge's ``partial`` counted the same way in a run's epoch
metrics and in a comparison; the exact methods where every example's epochs
agree."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from django.urls import reverse

from evaluation.compare.over_epochs import (
    BOOTSTRAP_METHOD,
    apply_bootstrap,
    majority_rows,
    paired_mean_figures,
)
from evaluation.compare.pairing import compare_rows
from evaluation.compare.services import run_compare_ids
from evaluation.compare.shapes import Comparison, EpochComparedRow, RunSide
from evaluation.compare.statistics import PairedTable, adjusted_difference_interval, newcombe_paired_interval
from evaluation.metrics.compute import PredictionRow, compute_metrics
from evaluation.metrics.intervals import mean_interval
from evaluation.metrics.metrics_table import format_table
from evaluation.models import Run
from evaluation.run.rescoring import rescore
from tests.evaluation.compare.test_epoch_comparison import row
from tests.evaluation.run.test_rescore import dataset_file, exact_run  # noqa: F401 - fixtures

#: the token F1 of each of test_rescore's answers against its gold
F1 = {
    "Which city hosted the 1900 Olympics?": 2 / 3,  # "Paris, France" / "Paris"
    "Who wrote Hamlet?": 2 / 3,  # "Shakespeare" / "William Shakespeare"
    "What is the capital of Spain?": 0.0,
    "Name the two Marx brothers in Duck Soup.": 0.5,  # "Groucho" / "Groucho and Harpo"
    "Which river flows through Vienna?": 1.0,
    "What is the largest planet?": 0.0,
}


def _row(
    task_type: str, score: float | None, correct: bool | None, scorer: str = "f1", **more: Any
) -> PredictionRow:
    """A prediction row with one step and one token each way: only what a test compares varies."""
    return PredictionRow(
        task_type=task_type,
        correct=correct,
        steps=1,
        input_tokens=1,
        output_tokens=1,
        cost=None,
        stop_reason="final",
        latency_ms=1,
        score=score,
        scorer=scorer,
        **more,
    )


def test_metrics_give_the_mean_f1_with_its_interval_beside_exact_match() -> None:
    values = [1.0, 0.5, 0.25, 0.0]
    rows = [_row("document_qa", v, v == 1.0) for v in values] + [_row("math", 1.0, True, scorer="numeric")]
    metrics = compute_metrics(rows)
    low, high = mean_interval(values)  # type: ignore[misc]
    assert metrics["f1"] == {"scored": 4, "mean": 0.4375, "ci": [low, high]}
    assert metrics["per_task_type"]["document_qa"]["f1"] == metrics["f1"]
    assert "f1" not in metrics["per_task_type"]["math"]
    assert (metrics["correct"], metrics["scored"]) == (2, 5)  # exact match counts as correct
    table = format_table(metrics, width=160)
    assert f"0.438 (n=4; 95% CI {low:.2f}–{high:.2f})" in table
    assert "mean token F1" in table and "token F1 (95% CI)" in table
    assert "mean score" not in table
    assert "f1" not in compute_metrics(rows[-1:])


def _epoch(key: int, epoch: int, correct: bool, score: float) -> EpochComparedRow:
    return dataclasses.replace(row(key, epoch, correct, task_type="document_qa"), score=score)


def test_a_partial_grade_counts_as_not_correct_in_a_comparison_as_in_the_run() -> None:
    """Failing before: one partial and one correct epoch were 0.75 in a
    comparison and 0.5 in the run's own mean accuracy."""
    base = [
        _epoch(1, 1, False, 0.5),
        _epoch(1, 2, True, 1.0),
        _epoch(2, 1, False, 0.0),
        _epoch(2, 2, False, 0.0),
    ]
    candidate = [
        _epoch(1, 1, True, 1.0),
        _epoch(1, 2, True, 1.0),
        _epoch(2, 1, True, 1.0),
        _epoch(2, 2, False, 0.0),
    ]
    run_metrics = compute_metrics(
        _row("document_qa", r.score, r.row.correct, scorer="judge", example=r.row.example_key, epoch=r.epoch)
        for r in base
    )
    assert run_metrics["epochs"]["mean_accuracy"] == 0.25  # example 1: 0.5, example 2: 0
    comparison = apply_bootstrap(_comparison(base, candidate), base, candidate)
    assert comparison["overall"]["base_accuracy"] == 0.25
    assert comparison["overall"]["candidate_accuracy"] == 0.75


def _comparison(base: list[EpochComparedRow], candidate: list[EpochComparedRow]) -> Comparison:
    side: RunSide = {
        "run_id": "x",
        "status": "success",
        "model": None,
        "code_version": None,
        "review": None,
        "dataset_version": 1,
        "created_at": "",
        "finished_at": None,
        "total": 0,
        "scored": 0,
        "correct": 0,
        "accuracy": None,
    }
    return compare_rows(
        majority_rows(base),
        majority_rows(candidate),
        dataset="d",
        base=side,
        candidate=side,
        base_metrics={},
        candidate_metrics={},
    )


def test_when_every_example_s_epochs_agree_the_figures_are_the_exact_ones() -> None:
    base = {i: float(i < 6) for i in range(20)}  # right on 0..5
    candidate = {i: float(i < 9 and i != 2) for i in range(20)}  # fixes 6, 7, 8; breaks 2
    figures = paired_mean_figures(base, candidate, confidence=0.95)
    table = PairedTable(both_right=5, broken=1, fixed=3, both_wrong=11)
    assert (figures["ci_low"], figures["ci_high"]) == newcombe_paired_interval(table)
    assert figures["p_value"] == pytest.approx(0.625)  # exact McNemar: 1 against 3
    assert figures["difference"] == pytest.approx(0.1)
    # one example with a mean of two thirds: the adjusted interval
    candidate[15] = 2 / 3
    figures = paired_mean_figures(base, candidate, confidence=0.95)
    differences = [candidate[i] - base[i] for i in range(20)]
    assert (figures["ci_low"], figures["ci_high"]) == adjusted_difference_interval(differences)


@pytest.mark.django_db(transaction=True)
def test_rescore_with_f1_gives_partial_credit_and_compares_over_it(endpoint, dataset_file, client, staff):
    exact_run(endpoint, dataset_file)
    result = rescore(source_run_id="exact", scorer="f1", run_id="f1")
    by_question = {p.example.question: p for p in result.run.predictions.select_related("example")}
    assert {q: p.score for q, p in by_question.items()} == pytest.approx(F1)
    assert {q for q, p in by_question.items() if p.correct} == {"Which river flows through Vienna?"}
    metrics = result.run.metrics
    assert metrics["f1"]["mean"] == pytest.approx(sum(F1.values()) / 6)
    assert metrics["accuracy"] == pytest.approx(1 / 6)  # exact match

    comparison = run_compare_ids(base_run_id="exact", candidate_run_id="f1")
    assert comparison["method"] == BOOTSTRAP_METHOD
    overall = comparison["overall"]
    assert overall["base_accuracy"] == pytest.approx(1 / 6)
    assert overall["candidate_accuracy"] == pytest.approx(sum(F1.values()) / 6)
    exact_values = {q: float(q == "Which river flows through Vienna?") for q in F1}
    low, high = adjusted_difference_interval([F1[q] - exact_values[q] for q in F1])  # type: ignore[misc]
    assert (overall["ci_low"], overall["ci_high"]) == (pytest.approx(low), pytest.approx(high))

    client.force_login(staff)
    page = client.get(reverse("admin:evaluation_run_change", args=[result.run.pk]))
    assert page.status_code == 200
    assert "mean token F1" in page.content.decode()
    base_pk = Run.objects.get(run_id="exact").pk
    compare = client.get(reverse("admin:evaluation_run_compare", args=[base_pk, result.run.pk]))
    assert compare.status_code == 200
    assert "Agresti–Min" in compare.content.decode()
    assert 'id="few-examples">warning: only 6 examples compared' in compare.content.decode()


def test_the_epochs_table_is_never_cut_short_when_not_a_terminal() -> None:
    """Before: at 80 columns the mean accuracy cell read "(100.0…"."""
    rows = [
        _row("multiple_choice", None, epoch != 2, scorer="choice", example=example, epoch=epoch)
        for example in range(6)
        for epoch in range(1, 6)
    ]
    text = format_table(compute_metrics(rows), width=80)
    assert "…" not in text
    assert "80.0% (80.0–80.0%)" in text and "pass@5" in text

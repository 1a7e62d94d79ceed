"""Comparing runs with epochs (``run_eval --epochs K``): pure functions that
turn the comparison of issue 15 (``evaluation.compare.pairing``) into one over
per-example mean scores with a paired bootstrap.

McNemar's test and Newcombe's interval need one right/wrong value per
example and run; a run with epochs has K of them. So, when either run has
epochs:

- each example's rows are reduced to one ``ComparedRow`` (the first epoch's,
  with ``correct`` = the majority vote of its scored epochs, a tie is not a
  majority) — these give the fixed/broken lists and the 2×2 counts, which
  stay readable as "right by majority";
- the accuracies, the difference, its interval and the p-value of the
  overall and per-task-type figures are replaced by those of the paired
  bootstrap over examples (``evaluation.compare.bootstrap.paired_bootstrap``: 10,000
  seeded resamples of the per-example mean scores), the per-task-type
  p-values Holm-adjusted as before; ``Comparison["method"]`` says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from evaluation.compare.bootstrap import RESAMPLES, SEED, paired_bootstrap
from evaluation.compare.shapes import ComparedRow, Comparison, EpochComparedRow, PairedAccuracy
from evaluation.compare.statistics import holm_adjust

__all__ = ["BOOTSTRAP_METHOD", "EpochComparedRow", "apply_bootstrap", "majority_rows"]

#: ``Comparison["method"]`` of a comparison of runs with epochs.
BOOTSTRAP_METHOD = "paired bootstrap over per-example mean scores"


def majority_rows(rows: Iterable[EpochComparedRow]) -> list[ComparedRow]:
    """One ``ComparedRow`` per example, in the order examples first appear:
    its lowest epoch's row with ``correct`` the majority vote over its scored
    epochs (``None`` when none was scored)."""
    by_example: dict[int, list[EpochComparedRow]] = {}
    for r in rows:
        by_example.setdefault(r.row.example_key, []).append(r)
    reduced = []
    for epochs in by_example.values():
        first = min(epochs, key=lambda r: r.epoch).row
        scored = [r.row.correct for r in epochs if r.row.correct is not None]
        correct = None if not scored else sum(1 for c in scored if c) * 2 > len(scored)
        reduced.append(dataclasses.replace(first, correct=correct))
    return reduced


def _means(rows: Iterable[EpochComparedRow]) -> tuple[dict[int, float], dict[int, str]]:
    scores: dict[int, list[float]] = {}
    task_types: dict[int, str] = {}
    for r in rows:
        task_types[r.row.example_key] = r.row.task_type
        if r.score is not None and r.row.correct is not None:
            scores.setdefault(r.row.example_key, []).append(r.score)
    return {k: sum(v) / len(v) for k, v in scores.items()}, task_types


def _bootstrapped(
    stats: PairedAccuracy, base: dict[int, float], candidate: dict[int, float], *, confidence: float
) -> PairedAccuracy:
    shared = [k for k in base if k in candidate]
    if not shared:
        return {
            **stats,
            "base_accuracy": None,
            "candidate_accuracy": None,
            "difference": None,
            "ci_low": None,
            "ci_high": None,
            "p_value": None,
        }
    result = paired_bootstrap(
        {k: base[k] for k in shared},
        {k: candidate[k] for k in shared},
        resamples=RESAMPLES,
        seed=SEED,
        confidence=confidence,
    )
    return {
        **stats,
        "base_accuracy": result.base_mean,
        "candidate_accuracy": result.candidate_mean,
        "difference": result.difference,
        "ci_low": result.ci_low,
        "ci_high": result.ci_high,
        "p_value": result.p_value,
    }


def apply_bootstrap(
    comparison: Comparison,
    base_rows: Sequence[EpochComparedRow],
    candidate_rows: Sequence[EpochComparedRow],
) -> Comparison:
    """``comparison`` (built by ``compare_rows`` from ``majority_rows``) with
    its overall and per-task-type accuracies, difference, interval and
    p-values taken from the paired bootstrap of the two runs' per-example
    mean scores (examples both runs scored; per task type, that task type's),
    ``p_holm`` recomputed, and ``method`` set to :data:`BOOTSTRAP_METHOD`.
    The 2×2 counts stay the majority votes'."""
    base_means, task_types = _means(base_rows)
    candidate_means, candidate_types = _means(candidate_rows)
    task_types.update(candidate_types)
    confidence = comparison["confidence"]
    overall = _bootstrapped(comparison["overall"], base_means, candidate_means, confidence=confidence)
    per_task_type: dict[str, PairedAccuracy] = {}
    for task_type, stats in comparison["per_task_type"].items():
        keys = {k for k, t in task_types.items() if t == task_type}
        per_task_type[task_type] = _bootstrapped(
            stats,
            {k: v for k, v in base_means.items() if k in keys},
            {k: v for k, v in candidate_means.items() if k in keys},
            confidence=confidence,
        )
    adjusted = holm_adjust([s["p_value"] for s in per_task_type.values()])
    for stats, p_holm in zip(per_task_type.values(), adjusted, strict=True):
        stats["p_holm"] = p_holm
    return {**comparison, "overall": overall, "per_task_type": per_task_type, "method": BOOTSTRAP_METHOD}

"""Comparing runs with epochs (``run_eval --epochs K``) or with partial
credit (the ``f1`` scorer): pure functions that turn the comparison of
``evaluation.compare.pairing`` into one over per-example means.

McNemar's test and Newcombe's interval need one right/wrong value per
example and run; a run with epochs has K of them, and an ``f1`` score is a
fraction. So, in those cases:

- each example's rows are reduced to one ``ComparedRow`` (the first epoch's,
  with ``correct`` = the majority vote of its scored epochs, a tie is not a
  majority) — these give the fixed/broken lists and the 2×2 counts, which
  stay readable as "right by majority";
- each example gets one value per run: the share of its scored epochs that
  are correct — the run's own ``mean_accuracy`` counts the same way, so a
  judge's ``partial`` grade is not correct in either — or, for ``f1``, its
  mean token F1;
- the accuracies, difference, interval and p-value of the overall and
  per-task-type figures are then those of the per-example means: the
  interval is Agresti and Min's adjusted interval
  (``evaluation.compare.statistics.adjusted_difference_interval``) and the
  p-value the paired bootstrap's (``evaluation.compare.bootstrap``: 10,000
  seeded resamples). Where every example's value is 0 or 1 in both runs
  (every example's epochs agree) there is nothing to average, and the
  figures are the exact ones of a single-epoch comparison: Newcombe's
  interval and the exact McNemar p-value. The per-task-type p-values are
  Holm-adjusted as before; ``Comparison["method"]`` says so.

Why not the percentile bootstrap interval, as before: with few discordant
examples it under-covers — 0.82 for a nominal 0.95 at 30 examples with
agreeing epochs, 0.88 with some noisy ones (``bench/bootstrap_coverage.py``,
figures in ``docs/benchmarks.md``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from evaluation.compare.bootstrap import RESAMPLES, SEED, paired_bootstrap
from evaluation.compare.shapes import ComparedRow, Comparison, EpochComparedRow, PairedAccuracy
from evaluation.compare.statistics import (
    PairedTable,
    adjusted_difference_interval,
    holm_adjust,
    mcnemar_exact_p,
    newcombe_paired_interval,
)

__all__ = ["BOOTSTRAP_METHOD", "EpochComparedRow", "apply_bootstrap", "majority_rows", "paired_mean_figures"]

#: ``Comparison["method"]`` of a comparison of runs with epochs or partial credit.
BOOTSTRAP_METHOD = (
    "per-example means: Agresti–Min interval, paired bootstrap p-value (10,000 seeded resamples); "
    "the exact methods where every example's epochs agree"
)


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


def _means(rows: Iterable[EpochComparedRow], *, continuous: bool) -> tuple[dict[int, float], dict[int, str]]:
    """Each example's mean over its scored epochs — of the score value when
    ``continuous`` (``f1``), else of correctness — and each example's task type."""
    values: dict[int, list[float]] = {}
    task_types: dict[int, str] = {}
    for r in rows:
        task_types[r.row.example_key] = r.row.task_type
        if r.row.correct is None:
            continue
        value = (r.score or 0.0) if continuous else float(r.row.correct)
        values.setdefault(r.row.example_key, []).append(value)
    return {k: sum(v) / len(v) for k, v in values.items()}, task_types


_FIGURES = ("base_accuracy", "candidate_accuracy", "difference", "ci_low", "ci_high", "p_value")


def _right_or_wrong(base: Mapping[int, float], candidate: Mapping[int, float]) -> bool:
    """Whether every example both have is 0 or 1 in both: nothing to average."""
    return all(base[k] in (0.0, 1.0) and candidate[k] in (0.0, 1.0) for k in base if k in candidate)


def paired_mean_figures(
    base: Mapping[int, float], candidate: Mapping[int, float], *, confidence: float
) -> dict[str, float | None]:
    """The comparison's figures for per-example means in [0, 1] —
    ``{"base_accuracy", "candidate_accuracy", "difference", "ci_low",
    "ci_high", "p_value"}`` over the examples both mappings have, all
    ``None`` when they share none. Where every shared value is 0 or 1 these
    are the exact methods' (Newcombe, exact McNemar); otherwise the means,
    Agresti and Min's adjusted interval of the difference and the paired
    bootstrap's p-value (see the module docstring)."""
    shared = [k for k in base if k in candidate]
    if not shared:
        return dict.fromkeys(_FIGURES)
    pairs = [(base[k], candidate[k]) for k in shared]
    if _right_or_wrong(base, candidate):
        table = PairedTable(
            both_right=sum(1 for b, c in pairs if b and c),
            broken=sum(1 for b, c in pairs if b and not c),
            fixed=sum(1 for b, c in pairs if c and not b),
            both_wrong=sum(1 for b, c in pairs if not b and not c),
        )
        low, high = newcombe_paired_interval(table, confidence=confidence) or (None, None)
        return {
            "base_accuracy": table.base_correct / table.n,
            "candidate_accuracy": table.candidate_correct / table.n,
            "difference": (table.fixed - table.broken) / table.n,
            "ci_low": low,
            "ci_high": high,
            "p_value": mcnemar_exact_p(fixed=table.fixed, broken=table.broken),
        }
    result = paired_bootstrap(
        {k: base[k] for k in shared},
        {k: candidate[k] for k in shared},
        resamples=RESAMPLES,
        seed=SEED,
        confidence=confidence,
    )
    interval = adjusted_difference_interval([c - b for b, c in pairs], confidence=confidence)
    assert interval is not None  # shared is not empty
    return {
        "base_accuracy": result.base_mean,
        "candidate_accuracy": result.candidate_mean,
        "difference": result.difference,
        "ci_low": interval[0],
        "ci_high": interval[1],
        "p_value": result.p_value,
    }


def apply_bootstrap(
    comparison: Comparison,
    base_rows: Sequence[EpochComparedRow],
    candidate_rows: Sequence[EpochComparedRow],
    *,
    continuous: bool = False,
) -> Comparison:
    """``comparison`` (built by ``compare_rows`` from ``majority_rows``) with
    its overall and per-task-type accuracies, difference, interval and
    p-values taken from the two runs' per-example means (examples both runs
    scored; per task type, that task type's; of the token F1 when
    ``continuous``, else of correctness), ``p_holm`` recomputed, and
    ``method`` set to :data:`BOOTSTRAP_METHOD`. The 2×2 counts stay the
    majority votes'. When every example is right or wrong in both runs the
    figures are the exact methods' and ``method`` is left unset, so the
    comparison reads as a single-epoch one."""
    base_means, task_types = _means(base_rows, continuous=continuous)
    candidate_means, candidate_types = _means(candidate_rows, continuous=continuous)
    task_types.update(candidate_types)
    confidence = comparison["confidence"]
    figures = paired_mean_figures(base_means, candidate_means, confidence=confidence)
    overall: PairedAccuracy = {**comparison["overall"], **figures}  # type: ignore[typeddict-item]
    per_task_type: dict[str, PairedAccuracy] = {}
    for task_type, stats in comparison["per_task_type"].items():
        keys = {k for k, t in task_types.items() if t == task_type}
        figures = paired_mean_figures(
            {k: v for k, v in base_means.items() if k in keys},
            {k: v for k, v in candidate_means.items() if k in keys},
            confidence=confidence,
        )
        per_task_type[task_type] = {**stats, **figures}  # type: ignore[typeddict-item]
    adjusted = holm_adjust([s["p_value"] for s in per_task_type.values()])
    for stats, p_holm in zip(per_task_type.values(), adjusted, strict=True):
        stats["p_holm"] = p_holm
    compared: Comparison = {**comparison, "overall": overall, "per_task_type": per_task_type}
    if not _right_or_wrong(base_means, candidate_means):
        compared["method"] = BOOTSTRAP_METHOD
    return compared

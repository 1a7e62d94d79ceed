"""Comparing two runs on one dataset: the typed result and the pure functions
that build it (no Django; CONTRIBUTING.md#pure-scoring-and-metrics; CONTRIBUTING.md#shapes-in-one-place).

``evaluation.compare.services.run_compare`` loads both runs' predictions as
:class:`ComparedRow` s and their metrics, and calls :func:`compare_rows`. The
result, a :class:`Comparison`, is plain JSON values (TypedDicts of numbers,
strings, lists and dicts): ``manage.py compare_runs`` prints it
(``evaluation.compare.comparison_table``) and writes it with ``--json``, ``run_eval
--baseline`` gates on it (:func:`regressions`) and writes it into its
``--json``, ``GET /api/runs/{base}/compare/{candidate}`` returns it and the
admin's comparison page draws it — one shape, built once.

Pairing is by example (its ``question_id``) and content: an example counts
in the paired accuracy when both runs scored the same content of it. Runs on
two versions of a dataset (``evaluation.datasets.versions``) pair on the
examples unchanged between them; an example whose content changed (a
corrected gold answer) is counted apart as ``changed``, and one added or
removed is in one run only. ``correct`` is read exactly as the run's own accuracy reads it
(an errored example is wrong, an unscored one is out of the denominator), so
a comparison and a run page never disagree about one example. Examples that
either run could not score, and examples only one run has, are counted
apart and listed by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evaluation.compare.shapes import (
    ComparedRow,
    Comparison,
    Delta,
    ExamplePair,
    PairedAccuracy,
    PairSide,
    RunSide,
)
from evaluation.compare.statistics import PairedTable, holm_adjust, mcnemar_exact_p, newcombe_paired_interval
from evaluation.metrics.checks import checks_side_by_side
from evaluation.metrics.intervals import CONFIDENCE  # every interval shown has one confidence level

__all__ = [
    "CONFIDENCE",
    "ComparedRow",
    "Comparison",
    "Delta",
    "ExamplePair",
    "PairSide",
    "PairedAccuracy",
    "RunSide",
    "compare_rows",
    "paired_accuracy",
    "regressions",
]


def paired_accuracy(table: PairedTable, *, confidence: float = CONFIDENCE) -> PairedAccuracy:
    """The :class:`PairedAccuracy` of a 2×2 table (``p_holm`` left ``None``)."""
    n = table.n
    interval = newcombe_paired_interval(table, confidence=confidence)
    return {
        "examples": n,
        "base_correct": table.base_correct,
        "candidate_correct": table.candidate_correct,
        "base_accuracy": table.base_correct / n if n else None,
        "candidate_accuracy": table.candidate_correct / n if n else None,
        "difference": (table.fixed - table.broken) / n if n else None,
        "ci_low": interval[0] if interval else None,
        "ci_high": interval[1] if interval else None,
        "both_right": table.both_right,
        "both_wrong": table.both_wrong,
        "fixed": table.fixed,
        "broken": table.broken,
        "p_value": mcnemar_exact_p(fixed=table.fixed, broken=table.broken) if n else None,
        "p_holm": None,
    }


def _side(row: ComparedRow) -> PairSide:
    return {
        "prediction_id": row.prediction_id,
        "turn_id": row.turn_id,
        "correct": row.correct,
        "prediction": row.prediction,
        "error": row.error,
        "stop_reason": row.stop_reason,
    }


def _pair(base: ComparedRow | None, candidate: ComparedRow | None) -> ExamplePair:
    known = base or candidate
    assert known is not None
    return {
        "example_id": known.example_id,
        "task_type": known.task_type,
        "gold": known.gold,
        "base": _side(base) if base else None,
        "candidate": _side(candidate) if candidate else None,
    }


def _delta(base: Any, candidate: Any) -> Delta:
    b = float(base) if isinstance(base, int | float) and not isinstance(base, bool) else None
    c = float(candidate) if isinstance(candidate, int | float) and not isinstance(candidate, bool) else None
    return {"base": b, "candidate": c, "difference": c - b if b is not None and c is not None else None}


def _metric_deltas(base: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, Delta]:
    def pick(metrics: Mapping[str, Any]) -> dict[str, Any]:
        tokens, latency = metrics.get("tokens") or {}, metrics.get("latency_ms") or {}
        return {
            "cost": metrics.get("cost"),
            "input_tokens": tokens.get("input"),
            "output_tokens": tokens.get("output"),
            "steps_mean": metrics.get("steps_mean"),
            "latency_p50_ms": latency.get("p50"),
            "latency_p95_ms": latency.get("p95"),
            "errors": metrics.get("errors"),
        }

    b, c = pick(base), pick(candidate)
    return {name: _delta(b[name], c[name]) for name in b}


def _count_deltas(base: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, Delta]:
    return {k: _delta(base.get(k, 0), candidate.get(k, 0)) for k in sorted(set(base) | set(candidate))}


_REVIEW_KEYS = (
    "first_attempt_accuracy",
    "final_accuracy",
    "review_retries",
    "retry_fixed",
    "retry_broke",
    "review_failed",
)


def compare_rows(
    base_rows: Iterable[ComparedRow],
    candidate_rows: Iterable[ComparedRow],
    *,
    dataset: str,
    base: RunSide,
    candidate: RunSide,
    base_metrics: Mapping[str, Any],
    candidate_metrics: Mapping[str, Any],
    confidence: float = CONFIDENCE,
) -> Comparison:
    """Compare ``candidate_rows`` with ``base_rows`` (one run's predictions
    each, at most one row per example) and build the :class:`Comparison`.

    ``base_metrics`` / ``candidate_metrics``: each run's metrics
    (``evaluation.metrics.compute.compute_metrics`` plus ``checks``), for the
    deltas of cost, tokens, steps, latency, stop reasons, review and checks.
    Lists are in the order of the base run's rows, then the candidate's.
    Raises ``ValueError`` when a run has two rows for one example.
    """
    by_base = _by_example(base_rows, "base")
    by_candidate = _by_example(candidate_rows, "candidate")
    tally = _PairTally()
    for key in list(by_base) + [k for k in by_candidate if k not in by_base]:
        tally.add(by_base.get(key), by_candidate.get(key))
    per_task_type = {
        task_type: paired_accuracy(PairedTable(*tally.tables[task_type]), confidence=confidence)
        for task_type in sorted(tally.tables)
    }
    adjusted = holm_adjust([s["p_value"] for s in per_task_type.values()])
    for stats, p_holm in zip(per_task_type.values(), adjusted, strict=True):
        stats["p_holm"] = p_holm
    return {
        "dataset": dataset,
        "confidence": confidence,
        "base": base,
        "candidate": candidate,
        "overall": paired_accuracy(PairedTable(*tally.overall), confidence=confidence),
        "per_task_type": per_task_type,
        "counts": {
            "paired": sum(1 for k in by_base if k in by_candidate) - len(tally.changed),
            "changed": len(tally.changed),
            "scored_both": sum(tally.overall),
            "unscored": len(tally.unscored),
            "only_base": len(tally.only_base),
            "only_candidate": len(tally.only_candidate),
            "errored": len(tally.errored),
        },
        "fixed": tally.fixed,
        "broken": tally.broken,
        "errored": tally.errored,
        "unscored": tally.unscored,
        "changed": tally.changed,
        "only_base": tally.only_base,
        "only_candidate": tally.only_candidate,
        "metrics": _metric_deltas(base_metrics, candidate_metrics),
        "stop_reasons": _count_deltas(
            base_metrics.get("stop_reasons") or {}, candidate_metrics.get("stop_reasons") or {}
        ),
        "review": _review_deltas(base_metrics, candidate_metrics),
        "checks": checks_side_by_side(
            base_metrics.get("checks") or {}, candidate_metrics.get("checks") or {}
        ),
    }


def _review_deltas(base_metrics: Mapping[str, Any], candidate_metrics: Mapping[str, Any]) -> dict[str, Delta]:
    """The review figures of both runs side by side."""
    base_review, candidate_review = base_metrics.get("review") or {}, candidate_metrics.get("review") or {}
    return {k: _delta(base_review.get(k), candidate_review.get(k)) for k in _REVIEW_KEYS}


#: The cell of the 2×2 table a (base, candidate) pair of verdicts falls in:
#: both right, broken, fixed, both wrong (``PairedTable``'s order).
_CELL = {(True, True): 0, (True, False): 1, (False, True): 2, (False, False): 3}


@dataclass
class _PairTally:
    """The pairs of one comparison sorted as they are added: the 2×2 counts
    overall and per task type, and the examples fixed, broken, errored,
    unscored or in one run only."""

    tables: dict[str, list[int]] = field(default_factory=dict)
    overall: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    fixed: list[ExamplePair] = field(default_factory=list)
    broken: list[ExamplePair] = field(default_factory=list)
    errored: list[ExamplePair] = field(default_factory=list)
    unscored: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)
    only_candidate: list[str] = field(default_factory=list)

    def add(self, b: ComparedRow | None, c: ComparedRow | None) -> None:
        """One example's rows (``None``: the run has none)."""
        if (b is not None and b.error) or (c is not None and c.error):
            self.errored.append(_pair(b, c))
        if b is None or c is None:
            (self.only_candidate if b is None else self.only_base).append((b or c).example_id)  # type: ignore[union-attr]
            return
        if b.example_key != c.example_key:  # another content of the example: not comparable
            self.changed.append(b.example_id)
            return
        if b.correct is None or c.correct is None:
            self.unscored.append(b.example_id)
            return
        cell = _CELL[(b.correct, c.correct)]
        self.overall[cell] += 1
        self.tables.setdefault(b.task_type, [0, 0, 0, 0])[cell] += 1
        if cell == 1:
            self.broken.append(_pair(b, c))
        elif cell == 2:
            self.fixed.append(_pair(b, c))


def _by_example(rows: Iterable[ComparedRow], which: str) -> dict[str, ComparedRow]:
    found: dict[str, ComparedRow] = {}
    for row in rows:
        if row.example_id in found:
            raise ValueError(f"the {which} run has two predictions of example {row.example_id!r}")
        found[row.example_id] = row
    return found


def versions_note(comparison: Comparison) -> str | None:
    """What a comparison of runs on two versions of a dataset paired, in
    words — ``paired on 180 examples unchanged between version 3 and version
    4; 5 changed, 12 added, 3 removed`` — or ``None`` when both runs are on
    one version. The paired count is the runs'; changed, added and removed
    are how the two versions differ (``version_diff``; without it, the
    examples in one run only). The CLI table, ``run_eval --baseline`` and the
    admin page show it."""
    base, candidate = comparison["base"]["dataset_version"], comparison["candidate"]["dataset_version"]
    if base == candidate:
        return None
    counts = comparison["counts"]
    diff = comparison.get("version_diff") or {
        "changed": counts["changed"],
        "added": counts["only_candidate"],
        "removed": counts["only_base"],
    }
    return (
        f"paired on {counts['paired']} example{'s' if counts['paired'] != 1 else ''} unchanged between "
        f"version {base} and version {candidate}; {diff['changed']} changed, {diff['added']} added, "
        f"{diff['removed']} removed"
    )


def unfinished_warning(comparison: Comparison) -> str | None:
    """The warning a comparison with a run that did not finish (status other
    than ``success``) carries, or ``None``: such a run's examples that never
    ran are errored, so wrong, and its fixed/broken counts are no verdict on
    the agent. The CLI table and the admin page both show it."""
    unfinished = [
        f"{label} run {side['run_id']} ended {side['status']}"
        for label, side in (("the base", comparison["base"]), ("the candidate", comparison["candidate"]))
        if side["status"] != "success"
    ]
    if not unfinished:
        return None
    return (
        "warning: "
        + " and ".join(unfinished)
        + ": its examples that did not run count as errored (wrong) in the pairs below"
    )


#: Below this many paired examples a resampling p-value is not meaningful.
FEW_EXAMPLES = 10


def few_examples_warning(comparison: Comparison) -> str | None:
    """The warning a comparison over per-example means (runs with epochs or
    partial credit: ``comparison["method"]``) of fewer than
    :data:`FEW_EXAMPLES` examples carries, or ``None``: resampling so few
    examples gives a bootstrap p-value that is not meaningful. The exact
    methods of a single-epoch comparison are exact at any size."""
    n = comparison["overall"]["examples"]
    if "method" not in comparison or n >= FEW_EXAMPLES:
        return None
    return (
        f"warning: only {n} example{'s' if n != 1 else ''} compared: at this size the bootstrap p-value "
        f"is not meaningful (it needs {FEW_EXAMPLES} or more); read the counts, not the test"
    )


def regressions(comparison: Comparison, *, alpha: float) -> list[str]:
    """Why the candidate is significantly worse than the base, one line per
    finding (``[]``: no significant regression).

    Worse means fewer examples fixed than broken (a negative difference).
    Significant means the exact McNemar p-value below ``alpha`` overall, or
    its Holm-adjusted p-value (``p_holm``) below ``alpha`` in a task type.
    """
    found = []
    scopes: Sequence[tuple[str, PairedAccuracy, str]] = [
        ("overall", comparison["overall"], "p_value"),
        *((f"task type {t!r}", s, "p_holm") for t, s in comparison["per_task_type"].items()),
    ]
    for label, stats, key in scopes:
        p = stats[key]  # type: ignore[literal-required]
        difference = stats["difference"]
        if difference is None or p is None or difference >= 0 or p >= alpha:
            continue
        found.append(
            f"{label}: accuracy {stats['base_accuracy']:.3f} → {stats['candidate_accuracy']:.3f} "
            f"({difference:+.3f}, {comparison['confidence']:.0%} CI {stats['ci_low']:+.3f} to "
            f"{stats['ci_high']:+.3f}; {stats['broken']} broken, {stats['fixed']} fixed of "
            f"{stats['examples']}), exact McNemar p = {p:.4g}"
            + (" Holm-adjusted" if key == "p_holm" else "")
            + f" < alpha {alpha}"
        )
    return found

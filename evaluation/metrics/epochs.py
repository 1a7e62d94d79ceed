"""Metrics of a run with epochs (``run_eval --epochs K``): every example was
run K times, as independent turns. Pure functions over plain values.

- **Mean accuracy** over examples (each example's accuracy over its scored
  epochs, then the mean over examples) with a 95 % Student-t interval over
  examples: the examples, not the K·N turns, are the independent units.
- **pass@k** for k = 1..K with the unbiased estimator of Chen et al. (2021),
  "Evaluating Large Language Models Trained on Code", §2.1: for an example
  with n scored epochs of which c are correct,
  ``pass@k = 1 - C(n - c, k) / C(n, k)``, averaged over the examples with
  ``n >= k``; computed as their numerically stable product
  ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``.
- **Majority-vote accuracy**: an example counts correct when more than half
  of its scored epochs are correct (a tie is not a majority) — inspect_ai's
  ``mode`` epoch reducer on right/wrong values.
- **Disagreement**: the share of examples (with at least two scored epochs)
  whose epochs got different scores.

Unscored epochs stay out of every count (the inspect_ai convention); an
example none of whose epochs was scored is left out and counted apart.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from evaluation.metrics.intervals import mean_interval

__all__ = ["EpochRow", "epoch_metrics", "pass_at_k"]


@dataclass(frozen=True)
class EpochRow:
    """One epoch of one example: ``example`` (any key), ``task_type``,
    ``correct`` (``None``: unscored) and ``score`` (``None``: unscored; 0.5
    for a judge's partial grade)."""

    example: Hashable
    task_type: str
    correct: bool | None
    score: float | None


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate for one example with ``n`` samples of
    which ``c`` are correct (Chen et al., 2021): ``1 - C(n-c, k) / C(n, k)``,
    computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` (no huge binomials).
    Raises ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``."""
    if not 0 <= c <= n:
        raise ValueError(f"c must be between 0 and n ({n}), got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and n ({n}), got {k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def _bucket(by_example: dict[Hashable, list[EpochRow]], epochs: int) -> dict[str, Any]:
    counts = []  # (n scored, c correct, distinct scores) per example with a scored epoch
    for rows in by_example.values():
        scored = [r for r in rows if r.correct is not None]
        if scored:
            scores = {r.score for r in scored}
            counts.append((len(scored), sum(1 for r in scored if r.correct), len(scores)))
    means = [c / n for n, c, _ in counts]
    interval = mean_interval(means)
    pass_k: dict[str, float | None] = {}
    pass_k_examples: dict[str, int] = {}
    for k in range(1, epochs + 1):
        eligible = [(n, c) for n, c, _ in counts if n >= k]
        pass_k[str(k)] = (
            math.fsum(pass_at_k(n, c, k) for n, c in eligible) / len(eligible) if eligible else None
        )
        pass_k_examples[str(k)] = len(eligible)
    several = [d for n, _, d in counts if n >= 2]
    return {
        "examples": len(by_example),
        "scored_examples": len(counts),
        "mean_accuracy": math.fsum(means) / len(means) if means else None,
        "mean_accuracy_ci": list(interval) if interval is not None else None,
        "pass_at_k": pass_k,
        "pass_at_k_examples": pass_k_examples,
        "majority_accuracy": (sum(1 for n, c, _ in counts if c * 2 > n) / len(counts)) if counts else None,
        "disagreement": (sum(1 for d in several if d > 1) / len(several)) if several else None,
        "disagreeing_examples": sum(1 for d in several if d > 1),
    }


def epoch_metrics(rows: Iterable[EpochRow], *, epochs: int) -> dict[str, Any]:
    """The epoch metrics of a run whose examples were run ``epochs`` times
    (JSON-serialisable): ``epochs``; ``examples`` and ``scored_examples``
    (with at least one scored epoch); ``mean_accuracy`` and
    ``mean_accuracy_ci`` (``[low, high]``, 95 %, ``None`` under two
    examples); ``pass_at_k`` (``{"1": …, …, "K": …}``, keys are k as text,
    each over the ``pass_at_k_examples[k]`` examples with at least k scored
    epochs, ``None`` when none); ``majority_accuracy``; ``disagreement`` (a
    share, over examples with two or more scored epochs) and
    ``disagreeing_examples``; the same keys per task type under
    ``per_task_type``. Raises ``ValueError`` for ``epochs < 1``."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    rows = list(rows)
    by_example: dict[Hashable, list[EpochRow]] = {}
    by_type: dict[str, dict[Hashable, list[EpochRow]]] = {}
    for r in rows:
        by_example.setdefault(r.example, []).append(r)
        by_type.setdefault(r.task_type, {}).setdefault(r.example, []).append(r)
    return {
        "epochs": epochs,
        **_bucket(by_example, epochs),
        "per_task_type": {t: _bucket(by_type[t], epochs) for t in sorted(by_type)},
    }


def per_example_means(rows: Sequence[EpochRow]) -> dict[Hashable, float]:
    """Each example's mean score over its scored epochs (``{example: mean}``;
    examples with no scored epoch left out) — what the paired bootstrap
    compares between two runs with epochs."""
    sums: dict[Hashable, list[float]] = {}
    for r in rows:
        if r.score is not None:
            sums.setdefault(r.example, []).append(r.score)
    return {e: math.fsum(v) / len(v) for e, v in sums.items()}

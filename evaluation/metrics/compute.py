"""Run metrics: pure aggregation over plain prediction rows.

The evaluation selector ``run_metrics`` turns each stored prediction into a
:class:`PredictionRow` and calls :func:`compute_metrics`; ``run_finish`` stores
the returned dict on the run (it is JSON-serialisable), and ``manage.py
run_eval`` prints it with :func:`evaluation.metrics.metrics_table.format_table`.
No Django here (CONTRIBUTING.md#pure-scoring-and-metrics). Unscored rows (``correct is None``) are counted
apart and never enter the accuracy denominator — the inspect_ai convention.

A run with epochs (``run_eval --epochs K``) ran every example K times, as
independent turns; :func:`epoch_metrics` adds:

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
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from agentlab.agent.usage import UsageTotals
from evaluation.metrics.intervals import mean_interval, wilson_interval

__all__ = [
    "CONTINUOUS_SCORERS",
    "EpochRow",
    "PredictionRow",
    "compute_metrics",
    "epoch_metrics",
    "mean_score_block",
    "pass_at_k",
    "per_example_means",
    "percentile",
    "review_metrics",
]


@dataclass(frozen=True)
class PredictionRow:
    """One prediction, reduced to what metrics need.

    - ``correct``: ``True``/``False``, or ``None`` when it could not be scored.
      The caller stores ``False`` for a turn that errored, so that it stays in
      the accuracy denominator; ``compute_metrics`` trusts this value as given.
    - ``steps``: agent steps used (model calls), ``>= 0``.
    - ``input_tokens`` / ``output_tokens``: ``None`` when the provider did not
      report usage — never guessed as 0.
    - ``cost``: in the run's currency unit (USD), ``None`` when unknown.
    - ``stop_reason``: the turn's stop reason (``"final"``, ``"max_steps"``, ...).
    - ``latency_ms``: wall time of the turn in milliseconds, ``None`` if unknown.
    - ``error``: error text when the turn failed, else ``None``.
    """

    task_type: str
    correct: bool | None
    steps: int
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    stop_reason: str
    latency_ms: int | None
    error: str | None = None
    #: the first attempt's correctness when a review retried the turn (else
    #: the same as ``correct``); ``review_retried``: a review asked for a retry
    first_correct: bool | None = None
    review_retried: bool = False
    #: the verdict of the turn's last review (``accept``, ``retry``,
    #: ``cannot_judge``, ``failed``), ``""`` when it was not reviewed
    review_verdict: str = ""
    #: the turn's usage over all its attempts, agent and review calls
    #: (``UsageTotals.to_dict()``), ``None`` when not recorded
    usage: Mapping[str, Any] | None = None
    #: which example and which epoch of it (``run_eval --epochs``)
    example: Hashable = None
    epoch: int = 1
    #: the score value (1.0, 0.0, a judge's partial 0.5; ``None``: unscored)
    score: float | None = None
    #: the LLM judge's grade (``correct``/``partial``/``incorrect``/
    #: ``unscored``), ``""`` when not judged; ``judge_cached``: from the cache;
    #: ``judge_usage``: its call's usage (role ``judge``), apart from ``usage``
    judge_grade: str = ""
    judge_cached: bool = False
    judge_usage: Mapping[str, Any] | None = None
    #: the scorer that gave ``score`` (``"f1"``: a token F1, partial credit)
    scorer: str = ""

    @property
    def first(self) -> bool | None:
        return self.first_correct if self.review_retried else self.correct


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (``0 <= q <= 100``) of ascending ``sorted_values``.

    Linear interpolation between the closest ranks — numpy's default
    (``method="linear"``, Hyndman & Fan type 7) and
    ``statistics.quantiles(method="inclusive")``: position ``(n - 1) * q / 100``.
    Raises ``ValueError`` on an empty sequence or ``q`` outside [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    # Exact rational arithmetic, then one rounding: p95 of 100..1000 is 880.0,
    # not the 879.9999999999999 that float steps give.
    position = Fraction(len(sorted_values) - 1) * Fraction(q) / 100
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    low, high = Fraction(sorted_values[lower]), Fraction(sorted_values[upper])
    return float(low + (high - low) * (position - lower))


def _accuracy(correct: int, scored: int) -> float | None:
    return correct / scored if scored else None


def _interval(correct: int, scored: int) -> list[float] | None:
    interval = wilson_interval(correct, scored)
    return list(interval) if interval is not None else None


def _judge_metrics(rows: Sequence[PredictionRow]) -> dict[str, Any] | None:
    judged = [r for r in rows if r.judge_grade]
    if not judged:
        return None
    return {
        "graded": len(judged),
        "grades": dict(sorted(Counter(r.judge_grade for r in judged).items())),
        "cached": sum(1 for r in judged if r.judge_cached),
    }


#: Scorers whose value is partial credit in [0, 1] rather than right or
#: wrong; the metrics give their mean with an interval beside the accuracy.
CONTINUOUS_SCORERS = frozenset({"f1"})


def mean_score_block(rows: Iterable[PredictionRow], scorer: str) -> dict[str, Any] | None:
    """The mean value of the rows scored by ``scorer`` — ``{"scored", "mean",
    "ci"}``, ``ci`` the 95 % Student-t interval over the rows (``None`` under
    two rows) — or ``None`` when no row was scored by it."""
    values = [r.score for r in rows if r.scorer == scorer and r.score is not None and r.correct is not None]
    if not values:
        return None
    interval = mean_interval(values)
    return {
        "scored": len(values),
        "mean": math.fsum(values) / len(values),
        "ci": list(interval) if interval is not None else None,
    }


def _per_task_type(rows: Sequence[PredictionRow]) -> dict[str, dict[str, Any]]:
    """Per task type: ``{"total", "scored", "correct", "accuracy",
    "accuracy_ci"}``, and ``"f1"`` (:func:`mean_score_block`) where some row
    was scored by ``f1``."""
    per_task: dict[str, dict[str, Any]] = {}
    for r in rows:
        bucket = per_task.setdefault(r.task_type, {"total": 0, "scored": 0, "correct": 0, "accuracy": None})
        bucket["total"] += 1
        bucket["scored"] += r.correct is not None
        bucket["correct"] += r.correct is True
    for task_type, bucket in per_task.items():
        bucket["accuracy"] = _accuracy(bucket["correct"], bucket["scored"])
        bucket["accuracy_ci"] = _interval(bucket["correct"], bucket["scored"])
        for scorer in sorted(CONTINUOUS_SCORERS):
            block = mean_score_block((r for r in rows if r.task_type == task_type), scorer)
            if block is not None:
                bucket[scorer] = block
    return per_task


def _usage(rows: Sequence[PredictionRow]) -> UsageTotals:
    """The usage of every row, the judge's included (kept apart by role)."""
    usage = UsageTotals()
    for r in rows:
        if r.usage:
            usage.merge(UsageTotals.from_dict(dict(r.usage)))
        if r.judge_usage:
            usage.merge(UsageTotals.from_dict(dict(r.judge_usage)))
    return usage


def compute_metrics(rows: Iterable[PredictionRow]) -> dict[str, Any]:
    """Aggregate prediction rows into the run's metrics dict (JSON-serialisable).

    Keys:

    - ``total``: rows; ``scored``: rows with ``correct`` not ``None``;
      ``unscored``: the rest; ``correct``: rows with ``correct is True``.
    - ``accuracy``: ``correct / scored`` (float in [0, 1]); ``None`` when nothing
      was scored. Unscored rows are outside the denominator, wrong and errored
      rows inside. ``accuracy_ci``: its 95 % Wilson interval ``[low, high]``
      (``evaluation.metrics.intervals``), ``None`` when nothing was scored.
    - ``score_mean``: the mean score of the scored rows (a judge's partial
      grade counts 0.5 here, and not as correct in ``accuracy``).
    - ``errors``: rows with a non-empty ``error``.
    - ``per_task_type``: ``{task_type: {"total", "scored", "correct",
      "accuracy", "accuracy_ci"}}``, keys sorted.
    - ``steps_mean``: mean steps over all rows (float), ``None`` when empty.
    - ``tokens``: ``{"input": int, "output": int, "unknown_rows": int}`` — sums
      of the known values; ``unknown_rows`` counts rows where input or output
      tokens are ``None``.
    - ``cost``: sum of the known costs, ``None`` when no row has a cost.
    - ``usage``: the rows' ``usage`` summed (``UsageTotals.to_dict()``):
      calls, tokens and cost ``by_model`` and ``by_role`` (agent, review, and
      judge — the LLM judge's calls, from ``judge_usage``);
      a model's ``cost`` is ``None`` when none of its calls had a price, and
      ``unpriced_calls`` says how many calls a known sum leaves out.
    - ``stop_reasons``: ``{stop_reason: count}``, keys sorted.
    - ``latency_ms``: ``{"p50", "p95", "mean"}`` in ms (floats) over rows with a
      known latency, by :func:`percentile` (linear interpolation); each ``None``
      when no row has one.

    - ``review``: reviewer metrics (:func:`review_metrics`), overall and
      ``per_task_type``.
    - ``judge`` (only when some row was judged): ``{"graded", "grades":
      {grade: count}, "cached"}``.
    - ``f1`` (only when some row was scored by ``f1``): the mean token F1 of
      those rows with its 95 % Student-t interval, ``{"scored", "mean",
      "ci"}`` (:func:`mean_score_block`), overall and in ``per_task_type`` —
      SQuAD's F1 beside the exact match that ``accuracy`` counts.
    - ``epochs`` (only when some row has an epoch above 1):
      :func:`epoch_metrics` — mean accuracy over examples
      with its interval, pass@k, majority vote, disagreement.

    Empty input gives zeros and ``None`` s, never ``ZeroDivisionError``.
    """
    rows = list(rows)
    total = len(rows)
    scored = sum(1 for r in rows if r.correct is not None)
    correct = sum(1 for r in rows if r.correct is True)

    per_task = _per_task_type(rows)
    costs = [r.cost for r in rows if r.cost is not None]
    latencies = sorted(r.latency_ms for r in rows if r.latency_ms is not None)
    usage = _usage(rows)
    # a row without a score value (rows built by hand) scores as its correctness
    scores = [r.score if r.score is not None else float(r.correct) for r in rows if r.correct is not None]
    epochs = max((r.epoch for r in rows), default=1)

    metrics: dict[str, Any] = {
        "total": total,
        "scored": scored,
        "unscored": total - scored,
        "correct": correct,
        "accuracy": _accuracy(correct, scored),
        "accuracy_ci": _interval(correct, scored),
        "score_mean": math.fsum(scores) / len(scores) if scores else None,
        "errors": sum(1 for r in rows if r.error),
        "per_task_type": {tt: per_task[tt] for tt in sorted(per_task)},
        "steps_mean": (sum(r.steps for r in rows) / total) if total else None,
        "tokens": {
            "input": sum(r.input_tokens for r in rows if r.input_tokens is not None),
            "output": sum(r.output_tokens for r in rows if r.output_tokens is not None),
            "unknown_rows": sum(1 for r in rows if r.input_tokens is None or r.output_tokens is None),
        },
        "cost": math.fsum(costs) if costs else None,
        "usage": usage.to_dict(),
        "stop_reasons": dict(sorted(Counter(r.stop_reason for r in rows).items())),
        "latency_ms": {
            "p50": percentile(latencies, 50) if latencies else None,
            "p95": percentile(latencies, 95) if latencies else None,
            "mean": (sum(latencies) / len(latencies)) if latencies else None,
        },
        "review": review_metrics(rows),
    }
    judge = _judge_metrics(rows)
    if judge is not None:
        metrics["judge"] = judge
    for scorer in sorted(CONTINUOUS_SCORERS):
        block = mean_score_block(rows, scorer)
        if block is not None:
            metrics[scorer] = block
    if epochs > 1:
        metrics["epochs"] = epoch_metrics(
            (EpochRow(r.example, r.task_type, r.correct, r.score) for r in rows), epochs=epochs
        )
    return metrics


def _review_bucket(rows: Sequence[PredictionRow]) -> dict[str, Any]:
    first_scored = [r for r in rows if r.first is not None]
    final_scored = [r for r in rows if r.correct is not None]
    retried = [r for r in rows if r.review_retried]
    return {
        "first_attempt_accuracy": _accuracy(sum(1 for r in first_scored if r.first), len(first_scored)),
        "final_accuracy": _accuracy(sum(1 for r in final_scored if r.correct), len(final_scored)),
        "review_retries": len(retried),
        "review_retry_rate": (len(retried) / len(rows)) if rows else None,
        "retry_fixed": sum(1 for r in retried if r.first is False and r.correct is True),
        "retry_broke": sum(1 for r in retried if r.first is True and r.correct is False),
        "verdicts": dict(sorted(Counter(r.review_verdict for r in rows if r.review_verdict).items())),
        "review_failed": sum(1 for r in rows if r.review_verdict == "failed"),
    }


def review_metrics(rows: Iterable[PredictionRow]) -> dict[str, Any]:
    """What the reviewer did to a run's answers.

    ``first_attempt_accuracy`` scores each row's first attempt (``first_correct``
    when a review retried it, else ``correct``); ``final_accuracy`` is the
    accuracy of what was kept (same as ``accuracy``); ``review_retries`` counts
    rows a review retried, ``review_retry_rate`` is that over all rows;
    ``retry_fixed`` counts retried rows that went wrong → right and
    ``retry_broke`` right → wrong. Unscored attempts stay out of the
    denominators. ``verdicts`` counts the rows by the verdict of their last
    review (``{verdict: count}``, keys sorted, unreviewed rows left out) and
    ``review_failed`` the rows whose reviewer gave no verdict — a review
    that cost its call and changed nothing. The same keys per task type under ``per_task_type``.
    """
    rows = list(rows)
    by_type: dict[str, list[PredictionRow]] = {}
    for r in rows:
        by_type.setdefault(r.task_type, []).append(r)
    return {
        **_review_bucket(rows),
        "per_task_type": {tt: _review_bucket(by_type[tt]) for tt in sorted(by_type)},
    }


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

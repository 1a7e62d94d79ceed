"""The data of a run's report page (pure, no Django).

The admin's report page (``evaluation.admin.report``) loads a run's metrics,
its latencies and its dataset's accuracy trend, calls :func:`run_report_data`
and hands the result to the page as JSON (``json_script``), where
``evaluation/static/evaluation/charts.js`` draws it with Chart.js.
Every number a chart shows is computed here, so the page only draws; the
comparison page's charts are ``evaluation.compare.charts``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from typing_extensions import TypedDict

from evaluation.metrics.intervals import wilson_interval

__all__ = ["latency_histogram", "run_report_data"]


class Bar(TypedDict):
    """One bar of a chart with its interval: ``value`` and ``low``/``high``
    (``None`` when unknown), and the counts behind it (``n`` observations)."""

    label: str
    value: float | None
    low: float | None
    high: float | None
    n: int


def latency_histogram(latencies_ms: Sequence[float], *, bins: int = 12) -> dict[str, list[Any]]:
    """Latencies (ms) counted in ``bins`` equal-width bins from the smallest
    to the largest: ``{"labels": ["0.8–1.2 s", …], "counts": [3, …],
    "edges_ms": [lo, …, hi]}``. One bin when all are equal; empty lists
    for no latencies."""
    values = sorted(float(v) for v in latencies_ms)
    if not values:
        return {"labels": [], "counts": [], "edges_ms": []}
    low, high = values[0], values[-1]
    if high == low:
        return {"labels": [_seconds(low)], "counts": [len(values)], "edges_ms": [low, high]}
    width = (high - low) / bins
    edges = [low + i * width for i in range(bins)] + [high]
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, math.floor((value - low) / width))] += 1
    labels = [f"{_seconds(edges[i])}–{_seconds(edges[i + 1])}" for i in range(bins)]
    return {"labels": labels, "counts": counts, "edges_ms": edges}


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"


def _wilson_bar(label: str, correct: int, scored: int) -> Bar:
    interval = wilson_interval(correct, scored)
    return {
        "label": label,
        "value": correct / scored if scored else None,
        "low": interval[0] if interval else None,
        "high": interval[1] if interval else None,
        "n": scored,
    }


def run_report_data(
    metrics: Mapping[str, Any], *, latencies_ms: Sequence[float], trend: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """What the run report's charts draw, from the run's ``metrics``
    (``compute_metrics`` output), its predictions' latencies (ms) and its
    dataset's ``trend`` (``selectors.dataset_accuracy_trend``):

    Task types, models and stop reasons are sorted by name.

    - ``accuracy``: overall then per task type, each a :class:`Bar` with its
      95 % Wilson interval (``correct`` of ``scored``);
    - ``latency``: :func:`latency_histogram`;
    - ``models``: per model ``{"label", "input_tokens", "output_tokens",
      "calls", "cost"}`` (cost in USD, ``None`` when unknown);
    - ``stop_reasons``: ``{"labels", "counts"}``;
    - ``review``: overall then per task type ``{"label", "first", "final"}``
      (first-attempt and final accuracy);
    - ``trend``: the runs of the dataset, oldest first, ``{"pk", "run_id",
      "created_at", "accuracy", "model"}``.
    """
    accuracy = [_wilson_bar("overall", int(metrics.get("correct") or 0), int(metrics.get("scored") or 0))]
    # sorted here: a metrics dict read back from PostgreSQL's jsonb has its keys
    # in jsonb's order (shorter first), not in the order they were written
    for task_type, bucket in sorted((metrics.get("per_task_type") or {}).items()):
        accuracy.append(
            _wilson_bar(task_type, int(bucket.get("correct") or 0), int(bucket.get("scored") or 0))
        )
    models = [
        {
            "label": model or "(unnamed)",
            "input_tokens": int(bucket.get("input_tokens") or 0),
            "output_tokens": int(bucket.get("output_tokens") or 0),
            "calls": int(bucket.get("calls") or 0),
            "cost": bucket.get("cost"),
        }
        for model, bucket in sorted(((metrics.get("usage") or {}).get("by_model") or {}).items())
    ]
    stops = dict(sorted((metrics.get("stop_reasons") or {}).items()))
    review = metrics.get("review") or {}
    review_rows = [
        {
            "label": "overall",
            "first": review.get("first_attempt_accuracy"),
            "final": review.get("final_accuracy"),
        }
    ] + [
        {"label": t, "first": b.get("first_attempt_accuracy"), "final": b.get("final_accuracy")}
        for t, b in sorted((review.get("per_task_type") or {}).items())
    ]
    if not (review.get("verdicts") or review.get("review_failed")):
        review_rows = []  # no answer was reviewed: no review chart (its bars would be the accuracy twice)
    return {
        "accuracy": accuracy,
        "latency": latency_histogram(latencies_ms),
        "models": models,
        "stop_reasons": {"labels": list(stops), "counts": list(stops.values())},
        "review": review_rows,
        "trend": [dict(point) for point in trend],
    }

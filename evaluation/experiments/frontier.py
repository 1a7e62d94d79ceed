"""The accuracy-vs-cost frontier with its uncertainty (issue 43;
docs/evaluating.md#leaderboard): each variant's cost per example with a
bootstrap interval, and which variants' place on the Pareto frontier is not
decided by the intervals.

- **Cost per example**: the mean over the run's examples of each example's
  cost (its epochs' mean), with the 95 % percentile bootstrap interval of
  that mean (Efron & Tibshirani 1993, ch. 13; 2,000 seeded resamples of the
  examples, numpy). Unknown when any prediction's cost is unknown.
- **Undecided**: a variant on the frontier whose place another variant could
  take within the intervals (its accuracy interval reaches this one's and
  its cost interval reaches below this one's), or a variant off the frontier
  that no other variant dominates for certain (a lower bound of accuracy at
  least its upper bound, and an upper bound of cost at most its lower
  bound). Each interval is a 95 % interval of its own, not a simultaneous
  band: "undecided" reads "more examples could move it", not a test.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evaluation.models import Prediction, Run

__all__ = ["CostInterval", "frontier_undecided", "mark_uncertainty", "pareto_frontier", "run_cost_interval"]

#: Resamples of the cost bootstrap, and its seed (a page shows the same interval every time).
RESAMPLES, SEED = 2_000, 43


@dataclass(frozen=True)
class CostInterval:
    """A run's mean cost per example (USD) with its 95 % bootstrap interval,
    over ``examples`` examples."""

    mean: float
    low: float
    high: float
    examples: int


def cost_interval(costs: Sequence[float]) -> CostInterval | None:
    """The mean of ``costs`` (one per example, USD) with its 95 % percentile
    bootstrap interval; ``None`` for no example."""
    if not costs:
        return None
    import numpy as np  # deferred, as in evaluation.compare.bootstrap: the admin imports this module

    values = np.asarray(costs, dtype=np.float64)
    rng = np.random.default_rng(SEED)
    means = values[rng.integers(0, len(values), size=(RESAMPLES, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return CostInterval(float(values.mean()), float(low), float(high), len(values))


def run_cost_interval(run: Run) -> CostInterval | None:
    """:func:`cost_interval` over ``run``'s examples (each its epochs' mean
    cost); ``None`` when a prediction's cost is unknown or there is none."""
    per_example: dict[int, list[float]] = defaultdict(list)
    for example_id, cost in Prediction.objects.filter(run=run).values_list("example_id", "cost"):
        if cost is None:
            return None
        per_example[example_id].append(float(cost))
    return cost_interval([sum(v) / len(v) for v in per_example.values()])


def frontier_undecided(points: Sequence[dict[str, Any]], frontier: set[str]) -> list[str]:
    """The names of ``points`` whose place on (or off) the frontier the
    intervals do not decide (see the module docstring). Each point:
    ``name``, ``acc_low``, ``acc_high``, ``cost_low``, ``cost_high`` (total
    or per example, the same for all); points with an unknown bound are
    left out."""
    known = [p for p in points if None not in (p["acc_low"], p["acc_high"], p["cost_low"], p["cost_high"])]
    undecided = []
    for v in known:
        others = [u for u in known if u["name"] != v["name"]]
        if v["name"] in frontier:
            moved = any(u["acc_high"] >= v["acc_low"] and u["cost_low"] <= v["cost_high"] for u in others)
        else:
            moved = not any(u["acc_low"] >= v["acc_high"] and u["cost_high"] <= v["cost_low"] for u in others)
        if moved:
            undecided.append(v["name"])
    return undecided


def mark_uncertainty(ranked: Sequence[Any], runs: dict[int, Run], frontier: Sequence[str]) -> list[str]:
    """Set each ranked ``VariantRow``'s ``cost_per_example``, ``cost_ci``
    and ``frontier_undecided`` (``runs`` by primary key) and return the
    undecided names, best first."""
    points = []
    for v in ranked:
        interval = run_cost_interval(runs[v.run_pk])
        if interval is not None:
            v.cost_per_example, v.cost_ci = interval.mean, (interval.low, interval.high)
        low, high = (interval.low, interval.high) if interval else (None, None)
        points.append(
            {"name": v.name, "acc_low": v.ci_low, "acc_high": v.ci_high, "cost_low": low, "cost_high": high}
        )
    undecided = frontier_undecided(points, set(frontier))
    for v in ranked:
        v.frontier_undecided = v.name in undecided
    return undecided


def pareto_frontier(ranked: Sequence[Any]) -> tuple[list[str], list[str]]:
    """The Pareto frontier of the ranked ``VariantRow`` s on accuracy vs total
    cost (names by ascending cost, then higher accuracy) and the ranked
    variants of unknown cost (``evaluation.experiments.ranking``'s docstring)."""
    known = [(v, v.accuracy, v.cost) for v in ranked if v.cost is not None and v.accuracy is not None]

    def dominated(accuracy: float, cost: float) -> bool:
        return any(acc >= accuracy and c <= cost and (acc > accuracy or c < cost) for _, acc, c in known)

    frontier = sorted(
        ((acc, c, v) for v, acc, c in known if not dominated(acc, c)), key=lambda t: (t[1], -t[0], t[2].name)
    )
    frontier_names = [v.name for _, _, v in frontier]
    return frontier_names, [v.name for v in ranked if v.cost is None]

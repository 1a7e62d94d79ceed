"""The leaderboard ranked by trajectory pass (issue 48: "the leaderboard
(rank by either)"; docs/evaluating.md#experiments).

Each variant's **trajectory pass rate** is the ``trajectory`` scorer's share
of passed verdicts over the predictions it scored (an example without an
expected trajectory is not scored), with its 95 % Wilson interval — the
figures ``evaluation.metrics.trajectory_metrics`` stores in the run's
metrics. Ranked by trajectory (``rank_by = "trajectory"``), the leaderboard
orders the finished variants by that rate (a variant with no trajectory
verdict last, then lower cost, then name) and compares every pair with the
same paired machinery as for answers: the exact McNemar test (McNemar 1947)
on trajectory pass over the examples both variants have a verdict for (their
epoch-1 predictions, as ``compare_runs``' trajectory view pairs them), every
p-value Holm-adjusted across the pairs (Holm 1979), then the top group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from common.errors import BadInput
from evaluation.compare.statistics import holm_adjust, mcnemar_exact_p

if TYPE_CHECKING:
    from evaluation.models import Run

__all__ = [
    "ANSWER",
    "RANK_BY",
    "TRAJECTORY",
    "TRAJECTORY_TEST",
    "RankedVariant",
    "rank_by_check",
    "trajectory_figures",
    "trajectory_pairs",
    "trajectory_rank_key",
]

ANSWER = "answer"
TRAJECTORY = "trajectory"
#: What the leaderboard can rank by: the answer's verdict or the trajectory's.
RANK_BY = (ANSWER, TRAJECTORY)
#: How a pair ranked by trajectory was tested, as ``PairRow.test`` says it.
TRAJECTORY_TEST = "exact McNemar on trajectory pass"


class RankedVariant(Protocol):
    """What this module reads of a leaderboard row (``ranking.VariantRow``)."""

    name: str
    run_pk: int
    cost: float | None
    trajectory: dict[str, Any] | None


def rank_by_check(value: Any, *, where: str = "rank_by") -> str:
    """``value`` if it is one of ``RANK_BY`` (``None``: ``"answer"``).
    Raises ``BadInput`` naming ``where`` and the known values otherwise."""
    if value is None:
        return ANSWER
    if value not in RANK_BY:
        known = ", ".join(repr(v) for v in RANK_BY)
        raise BadInput(f"{where}: unknown value {value!r}: rank by one of {known}")
    return str(value)


def trajectory_figures(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``trajectory`` scorer's figures of a run from its stored
    ``metrics``: ``{"accuracy", "ci_low", "ci_high", "n", "correct"}``
    (pass rate in [0, 1], 95 % Wilson interval, scored predictions, passed),
    ``None`` when the run has no trajectory verdict."""
    block = (metrics.get("trajectory") or {}).get(TRAJECTORY)
    if not block:
        return None
    ci = block.get("accuracy_ci") or [None, None]
    return {
        "accuracy": block.get("accuracy"),
        "ci_low": ci[0],
        "ci_high": ci[1],
        "n": int(block.get("scored") or 0),
        "correct": int(block.get("correct") or 0),
    }


def trajectory_rank_key(v: RankedVariant) -> tuple[Any, ...]:
    """Best first by trajectory pass rate (none last), lower cost (unknown
    last), then name."""
    rate = (v.trajectory or {}).get("accuracy")
    return (rate is None, -(rate or 0.0), v.cost is None, v.cost or 0.0, v.name)


def _verdicts(run: Run) -> dict[int, bool]:
    """``{example pk: trajectory passed}`` of ``run``'s epoch-1 predictions
    that have a trajectory verdict."""
    from evaluation.compare.trajectory_view import path_rows

    return {r.example_key: r.passed for r in path_rows(run) if r.passed is not None}


def trajectory_pairs(
    ranked: Sequence[RankedVariant], runs: Mapping[int, Run], alpha: float
) -> list[dict[str, Any]]:
    """The fields of a ``ranking.PairRow`` for every two ``ranked`` variants
    (``a`` above ``b``, rank order) compared on
    trajectory pass over the examples both have a verdict for: ``difference``
    = pass rate of ``a`` − of ``b`` there, exact McNemar ``p_value``, then
    Holm-adjusted across all the pairs, with the smallest difference
    detectable at ``alpha``. ``n == 0`` (no shared verdict): no figures.
    One read of predictions per variant."""
    from evaluation.compare.power import detectable_difference  # scipy: see compare.services

    verdicts = {v.run_pk: _verdicts(runs[v.run_pk]) for v in ranked}
    found = []
    for i, a in enumerate(ranked):
        for b in ranked[i + 1 :]:
            va, vb = verdicts[a.run_pk], verdicts[b.run_pk]
            shared = [k for k in va if k in vb]
            fixed = sum(1 for k in shared if va[k] and not vb[k])  # a passes where b fails
            broken = sum(1 for k in shared if vb[k] and not va[k])
            difference = (fixed - broken) / len(shared) if shared else None
            p = mcnemar_exact_p(fixed=fixed, broken=broken) if shared else None
            found.append((a, b, len(shared), fixed + broken, difference, p))
    adjusted = holm_adjust([p for *_, p in found])
    return [
        {
            "a": a.name,
            "b": b.name,
            "difference": difference,
            "p_value": p,
            "p_holm": p_holm,
            "n": n,
            "test": TRAJECTORY_TEST,
            "a_pk": a.run_pk,
            "b_pk": b.run_pk,
            "detectable": detectable_difference(n, discordant=discordant, alpha=alpha, pairs=len(found))
            if n
            else None,
        }
        for (a, b, n, discordant, difference, p), p_holm in zip(found, adjusted, strict=True)
    ]

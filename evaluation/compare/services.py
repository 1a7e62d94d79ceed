"""Compare a baseline run with a candidate (issue 15): load both runs'
predictions and metrics, and build the ``evaluation.compare.pairing.Comparison``.

The statistics are pure (``evaluation.compare.statistics``, ``evaluation.compare.pairing``);
this module only loads rows and checks that the two runs can be compared.
``manage.py compare_runs``, ``run_eval --baseline``, the API and the admin
call :func:`run_compare` (or :func:`run_compare_ids`).
"""

from __future__ import annotations

from typing import Any

from common.errors import BadInput
from evaluation.compare.over_epochs import apply_bootstrap, majority_rows
from evaluation.compare.pairing import compare_rows
from evaluation.compare.selectors import run_compared_epoch_rows, run_compared_rows
from evaluation.compare.shapes import Comparison, Detectable, RunSide
from evaluation.compare.trajectory_view import trajectory_comparison
from evaluation.datasets.versions import versions_compared
from evaluation.metrics.compute import CONTINUOUS_SCORERS
from evaluation.metrics.intervals import CONFIDENCE
from evaluation.models import Prediction, Run
from evaluation.selectors import run_get, run_stored_metrics


def run_side(run: Run) -> RunSide:
    """The ``RunSide`` of ``run``: its id, status, config highlights and own accuracy."""
    metrics, config = run_stored_metrics(run=run), run.config or {}
    review = config.get("review")
    return {
        "run_id": run.run_id,
        "status": run.status,
        "model": config.get("model"),
        "code_version": config.get("code_version"),
        "review": review if isinstance(review, bool) else None,
        "dataset_version": run.dataset_version,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "total": int(metrics.get("total") or 0),
        "scored": int(metrics.get("scored") or 0),
        "correct": int(metrics.get("correct") or 0),
        "accuracy": metrics.get("accuracy"),
    }


def run_compare(*, base: Run, candidate: Run, confidence: float = CONFIDENCE) -> Comparison:
    """Compare ``candidate`` with ``base``, paired by example (see
    ``evaluation.compare.pairing``).

    When either run has epochs (``run_eval --epochs``) or was scored with
    partial credit (``f1``), each example's epochs are reduced to a majority
    vote for the counts and lists, and the accuracies, interval and p-values
    come from a paired bootstrap over per-example means
    (``evaluation.compare.over_epochs``): of correctness (a judge's
    ``partial`` is not correct, as in the run's own epoch accuracy), or of
    the token F1 for ``f1``. ``trajectory``: the two runs' paths diffed per
    example with their paired tests (``evaluation.compare.trajectory_view``).

    Raises ``BadInput`` when the two runs are on different datasets (their
    examples do not pair up) or are the same run.
    """
    if base.pk == candidate.pk:
        raise BadInput(f"cannot compare run {base.run_id!r} with itself: give two different runs")
    if base.dataset_id != candidate.dataset_id:
        raise BadInput(
            f"runs {base.run_id!r} and {candidate.run_id!r} are on different datasets "
            f"({base.dataset.name!r} and {candidate.dataset.name!r}): a comparison pairs the same "
            "examples, so both runs must be on one dataset"
        )
    runs = Prediction.objects.filter(run__in=(base, candidate))
    continuous = runs.filter(scorer__in=CONTINUOUS_SCORERS).exists()
    sides: dict[str, Any] = {
        "dataset": base.dataset.name,
        "base": run_side(base),
        "candidate": run_side(candidate),
        "base_metrics": run_stored_metrics(run=base),
        "candidate_metrics": run_stored_metrics(run=candidate),
        "confidence": confidence,
    }
    if continuous or runs.filter(epoch__gt=1).exists():
        base_epochs = run_compared_epoch_rows(run=base)
        candidate_epochs = run_compared_epoch_rows(run=candidate)
        comparison = compare_rows(majority_rows(base_epochs), majority_rows(candidate_epochs), **sides)
        comparison = apply_bootstrap(comparison, base_epochs, candidate_epochs, continuous=continuous)
    else:
        comparison = compare_rows(run_compared_rows(run=base), run_compared_rows(run=candidate), **sides)
    comparison["detectable"] = comparison_detectable(comparison)
    if base.dataset_version != candidate.dataset_version:
        comparison["version_diff"] = versions_compared(
            base.dataset_id, base.dataset_version, candidate.dataset_version
        )
    comparison["trajectory"] = trajectory_comparison(
        base=base, candidate=candidate, answer_p=comparison["overall"]["p_value"]
    )
    return comparison


def comparison_detectable(comparison: Comparison, *, alpha: float = 0.05, pairs: int = 1) -> Detectable:
    """The smallest difference ``comparison``'s overall paired accuracy could
    have detected at 80 % power (``evaluation.compare.power``): from its
    paired examples and discordant ones (with epochs, the majority votes'),
    at ``alpha`` over ``pairs`` Holm-adjusted pairs."""
    # scipy is imported when a comparison is made, not when a command or the admin loads
    from evaluation.compare.power import detectable_summary

    overall = comparison["overall"]
    return detectable_summary(
        examples=overall["examples"],
        fixed=overall["fixed"],
        broken=overall["broken"],
        p_value=overall["p_value"],
        alpha=alpha,
        pairs=pairs,
    )


def run_compare_ids(*, base_run_id: str, candidate_run_id: str) -> Comparison:
    """``run_compare`` by public run ids. Raises ``NotFound`` naming a run id
    that does not exist, and ``BadInput`` as ``run_compare``."""
    return run_compare(base=run_get(run_id=base_run_id), candidate=run_get(run_id=candidate_run_id))

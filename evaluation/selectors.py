"""Reads on runs and predictions shared by the API and tests (HackSoft "selectors").

Runs are team-wide: any logged-in user and any API key may read them.
"""

from __future__ import annotations

from django.db.models import QuerySet

from agentlab.errors import NotFound

from .models import Prediction, Run


def run_list(*, status: str | None = None, dataset: str | None = None) -> QuerySet[Run]:
    """Runs, newest first, optionally of one status and/or one dataset name."""
    qs = Run.objects.select_related("dataset", "started_by").order_by("-created_at", "-pk")
    if status:
        qs = qs.filter(status=status)
    if dataset:
        qs = qs.filter(dataset__name=dataset)
    return qs


def run_get(*, run_id: str) -> Run:
    """The run with this public ``run_id``; ``NotFound`` otherwise."""
    run = Run.objects.select_related("dataset", "started_by").filter(run_id=run_id).first()
    if run is None:
        raise NotFound(f"run {run_id!r} not found")
    return run


def prediction_list(
    *,
    run: Run,
    task_type: str | None = None,
    correct: bool | None = None,
    scored: bool | None = None,
    stop_reason: str | None = None,
) -> QuerySet[Prediction]:
    """Predictions of ``run`` in example order, filtered by task type, correctness
    (``correct=True/False`` matches scored rows only), whether they were scored
    at all (``scored=False``: could not be scored — not the same as wrong), and
    stop reason."""
    qs = Prediction.objects.filter(run=run).select_related("example").order_by("example__position", "pk")
    if task_type:
        qs = qs.filter(task_type=task_type)
    if correct is not None:
        qs = qs.filter(correct=correct)
    if scored is not None:
        qs = qs.filter(correct__isnull=not scored)
    if stop_reason:
        qs = qs.filter(stop_reason=stop_reason)
    return qs

"""Reads on runs and predictions shared by the API and tests (HackSoft "selectors").

Runs are team-wide: any logged-in user and any API key may read them.
"""

from __future__ import annotations

from django.db.models import QuerySet

from common.errors import NotFound

from .models import Dataset, Prediction, Run
from .scoring import DEFAULT_SCORER_BY_TASK_TYPE, FALLBACK_SCORER


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


def dataset_fallback_task_types(*, dataset: Dataset) -> list[str]:
    """Task types (sorted) of ``dataset``'s examples that name no scorer and
    whose task type has no default in ``DEFAULT_SCORER_BY_TASK_TYPE``: they
    are scored with ``FALLBACK_SCORER`` (exact match), which a typo such as
    ``"maths"`` would make silently wrong for numbers. One query."""
    found = dataset.examples.filter(scorer="").values_list("task_type", flat=True).distinct()
    return sorted(set(found) - set(DEFAULT_SCORER_BY_TASK_TYPE))


def fallback_note(task_types: list[str]) -> str:
    """The warning ``import_dataset`` and ``run_eval`` print for
    ``dataset_fallback_task_types``; ``""`` when there are none."""
    if not task_types:
        return ""
    known = ", ".join(f"{t} → {s}" for t, s in DEFAULT_SCORER_BY_TASK_TYPE.items())
    return (
        f"note: task type(s) {', '.join(repr(t) for t in task_types)} have no scorer of their own, so their "
        f'examples are scored with {FALLBACK_SCORER!r}; known task types: {known}; or set "scorer" per '
        "example"
    )

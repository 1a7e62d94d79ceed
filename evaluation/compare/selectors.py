"""Reads for comparisons: a run's predictions as compared rows, and the run
a comparison takes as its baseline (``--baseline previous``, a schedule's
previous run, the admin's "compare with previous run").

Runs are team-wide, as in ``evaluation.selectors``.
"""

from __future__ import annotations

from typing import Any

from evaluation.compare.shapes import ComparedRow, EpochComparedRow
from evaluation.datasets.spec import gold_display
from evaluation.models import Prediction, Run, RunStatus

#: The prediction columns a ``ComparedRow`` is built from, in ``_compared_row``'s order.
_COMPARED_COLUMNS = (
    "example_id",
    "example__external_id",
    "task_type",
    "pk",
    "turn_id",
    "correct",
    "prediction",
    "gold_answer",
    "error",
    "stop_reason",
)


def _compared_row(row: tuple[Any, ...]) -> ComparedRow:
    """A ``ComparedRow`` from the first ``len(_COMPARED_COLUMNS)`` values of ``row``."""
    return ComparedRow(
        example_key=row[0],
        example_id=row[1],
        task_type=row[2],
        prediction_id=row[3],
        turn_id=row[4],
        correct=row[5],
        prediction=row[6],
        gold=gold_display(row[7]),
        error=row[8],
        stop_reason=row[9],
    )


def run_compared_rows(*, run: Run) -> list[ComparedRow]:
    """The run's predictions as ``ComparedRow`` s for a comparison, in
    example order. One query."""
    rows = (
        Prediction.objects.filter(run=run).order_by("example__position", "pk").values_list(*_COMPARED_COLUMNS)
    )
    return [_compared_row(row) for row in rows]


def run_compared_epoch_rows(*, run: Run) -> list[EpochComparedRow]:
    """The run's predictions, every epoch, as ``EpochComparedRow`` s for the
    comparison of runs with epochs (``evaluation.compare.over_epochs``), in
    example and epoch order. One query."""
    rows = (
        Prediction.objects.filter(run=run)
        .order_by("example__position", "epoch", "pk")
        .values_list(*_COMPARED_COLUMNS, "epoch", "score")
    )
    n = len(_COMPARED_COLUMNS)
    return [EpochComparedRow(row=_compared_row(row), epoch=row[n], score=row[n + 1]) for row in rows]


#: Config keys that may differ between a run and its ``--baseline previous``:
#: what is being compared (the model and the code) and how the run was
#: executed, which does not change what is measured.
BASELINE_FREE_KEYS = frozenset(
    {"model", "provider", "code_version", "resumes", "concurrency", "workers", "celery_queue", "price"}
)


def baseline_config(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's config that ``--baseline previous`` requires to be
    equal: all but ``BASELINE_FREE_KEYS``, and the plugins without their
    versions (a plugin's version is code)."""
    kept = {k: v for k, v in config.items() if k not in BASELINE_FREE_KEYS}
    if isinstance(kept.get("plugins"), list):
        kept["plugins"] = [
            {k: v for k, v in p.items() if k != "version"} if isinstance(p, dict) else p
            for p in kept["plugins"]
        ]
    return kept


def run_previous(*, run: Run) -> Run | None:
    """The latest finished (``success``) run on ``run``'s dataset, created
    before it, whose config equals ``run``'s apart from the model and code
    version (``baseline_config``) — ``run_eval --baseline previous`` — or
    ``None``. Reads the dataset's earlier runs newest first."""
    wanted = baseline_config(run.config or {})
    earlier = (
        Run.objects.filter(
            dataset_id=run.dataset_id, status=RunStatus.SUCCESS, created_at__lte=run.created_at
        )
        .exclude(pk=run.pk)
        .select_related("dataset", "started_by")
        .order_by("-created_at", "-pk")
    )
    for candidate in earlier.iterator(chunk_size=50):
        if baseline_config(candidate.config or {}) == wanted:
            return candidate
    return None


def schedule_previous_run(*, run: Run) -> Run | None:
    """The latest successful run of ``run``'s schedule on ``run``'s dataset
    (and, for an experiment's variant, of the same variant name), created
    before it — the baseline of a scheduled run — or ``None`` (no schedule,
    or its first successful run). A failed or cancelled run is no
    baseline: against one every answer would look like progress."""
    if run.schedule_id is None:
        return None
    return (
        Run.objects.filter(
            schedule_id=run.schedule_id,
            dataset_id=run.dataset_id,
            variant=run.variant,
            status=RunStatus.SUCCESS,
            created_at__lte=run.created_at,
        )
        .exclude(pk=run.pk)
        .select_related("dataset")
        .order_by("-created_at", "-pk")
        .first()
    )


def run_previous_on_dataset(*, run: Run) -> Run | None:
    """The run on ``run``'s dataset created just before it, whatever its
    config or status (the admin's "compare with previous run" link), or ``None``."""
    return (
        Run.objects.filter(dataset_id=run.dataset_id, created_at__lte=run.created_at)
        .exclude(pk=run.pk)
        .order_by("-created_at", "-pk")
        .first()
    )


def run_plan_inputs(*, run: Run) -> tuple[float | None, float | None, str]:
    """What ``plan_eval --run`` reads from ``run``: its accuracy (``correct /
    scored`` over its first epoch, ``None`` when nothing was scored), the
    discordance between its first two epochs (the share of examples scored in
    both whose verdicts differ: how often two runs of the same agent
    disagree — ``None`` for a run without a second epoch), and a sentence
    saying where both came from."""
    verdicts: dict[int, dict[int, bool]] = {}
    rows = Prediction.objects.filter(run=run, epoch__lte=2, correct__isnull=False)
    for example_id, epoch, correct in rows.values_list("example_id", "epoch", "correct"):
        verdicts.setdefault(example_id, {})[epoch] = bool(correct)
    first = [v[1] for v in verdicts.values() if 1 in v]
    accuracy = sum(first) / len(first) if first else None
    both = [v for v in verdicts.values() if len(v) == 2]
    discordance = sum(1 for v in both if v[1] != v[2]) / len(both) if both else None
    source = f"run {run.run_id}: accuracy {sum(first)}/{len(first)} scored (epoch 1)"
    if discordance is not None:
        source += f"; discordance between its epochs 1 and 2 over {len(both)} examples"
    return accuracy, discordance, source

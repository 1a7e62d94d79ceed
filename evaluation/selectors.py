"""Reads on runs, predictions and datasets (HackSoft "selectors").

Runs are team-wide: any logged-in user and any API key may read them. Who is
driving a run right now (its lease, or its turns' heartbeats) is read here;
``evaluation.run.lifecycle`` writes the lease.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Exists, IntegerField, OuterRef, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.utils import timezone

from agentlab.agent.usage import UsageTotals
from common.errors import NotFound
from evaluation.metrics.checks import CheckRow, check_metrics, check_row
from evaluation.metrics.compute import PredictionRow, compute_metrics
from evaluation.metrics.conversation_metrics import conversation_metrics
from evaluation.metrics.trajectory_metrics import trajectory_metrics
from evaluation.models import Prediction, Run, RunStatus
from turns.jobs.ids import local_job_is_gone
from turns.models import EventType, Turn, TurnEvent, TurnStatus


def run_list(
    *, status: str | None = None, dataset: str | None = None, experiment: str | None = None
) -> QuerySet[Run]:
    """Runs, newest first, optionally of one status, one dataset name and/or
    one experiment (by name)."""
    qs = Run.objects.select_related("dataset", "started_by", "rescored_from", "experiment")
    qs = qs.order_by("-created_at", "-pk")
    if status:
        qs = qs.filter(status=status)
    if dataset:
        qs = qs.filter(dataset__name=dataset)
    if experiment:
        qs = qs.filter(experiment__name=experiment)
    return qs


def run_get(*, run_id: str) -> Run:
    """The run with this public ``run_id``; ``NotFound`` otherwise."""
    run = (
        Run.objects.select_related("dataset", "started_by", "rescored_from", "experiment")
        .filter(run_id=run_id)
        .first()
    )
    if run is None:
        raise NotFound(f"run {run_id!r} not found")
    return run


def run_stored_metrics(*, run: Run) -> dict[str, Any]:
    """The run's stored metrics, or — for a run that has not finished (none
    stored yet) — ``run_metrics`` computed now."""
    return run.metrics or run_metrics(run=run)


def run_latencies(*, run: Run) -> list[int]:
    """The known latencies (ms) of the run's predictions. One query."""
    found = Prediction.objects.filter(run=run, latency_ms__isnull=False).values_list("latency_ms", flat=True)
    return [ms for ms in found if ms is not None]


def dataset_accuracy_trend(*, dataset_id: int, limit: int = 50) -> list[dict[str, Any]]:
    """The accuracy of the latest ``limit`` finished runs of a dataset, oldest
    first: ``[{"pk", "run_id", "created_at" (ISO-8601), "accuracy",
    "model", "version", "new_version"}]`` (runs without a stored accuracy
    left out). ``version`` is the dataset version the run is on;
    ``new_version`` is true where it differs from the point before's — where
    the chart marks that the examples changed."""
    rows = (
        Run.objects.filter(dataset_id=dataset_id)
        .exclude(status=RunStatus.STARTED)
        .order_by("-created_at", "-pk")
        .values_list("pk", "run_id", "created_at", "metrics", "config", "dataset_version")[:limit]
    )
    points = [
        {
            "pk": pk,
            "run_id": run_id,
            "created_at": created_at.isoformat(),
            "accuracy": (metrics or {}).get("accuracy"),
            "model": (config or {}).get("model"),
            "version": version,
        }
        for pk, run_id, created_at, metrics, config, version in reversed(rows)
        if (metrics or {}).get("accuracy") is not None
    ]
    for before, point in zip([None, *points], points, strict=False):
        point["new_version"] = before is not None and before["version"] != point["version"]
    return points


def prediction_list(
    *,
    run: Run,
    task_type: str | None = None,
    correct: bool | None = None,
    scored: bool | None = None,
    stop_reason: str | None = None,
    failed_check: str | None = None,
) -> QuerySet[Prediction]:
    """Predictions of ``run`` in example order, filtered by task type, correctness
    (``correct=True/False`` matches scored rows only), whether they were scored
    at all (``scored=False``: could not be scored — not the same as wrong),
    stop reason, and a check their turn failed (``predictions_failing``)."""
    qs = (
        Prediction.objects.filter(run=run)
        .select_related("example")
        .order_by("example__position", "epoch", "pk")
    )
    if task_type:
        qs = qs.filter(task_type=task_type)
    if correct is not None:
        qs = qs.filter(correct=correct)
    if scored is not None:
        qs = qs.filter(correct__isnull=not scored)
    if stop_reason:
        qs = qs.filter(stop_reason=stop_reason)
    if failed_check:
        qs = predictions_failing(qs, check=failed_check)
    return qs


def predictions_failing(qs: QuerySet[Prediction], *, check: str) -> QuerySet[Prediction]:
    """The predictions of ``qs`` whose turn's last attempt failed check
    ``check`` at least once (a step or the turn)."""
    failed = TurnEvent.objects.annotate(attempt=Cast(KT("data__attempt"), IntegerField())).filter(
        turn_id=OuterRef("turn_id"),
        type=EventType.CHECK,
        data__name=check,
        data__passed=False,
        attempt=OuterRef("turn__attempts"),
    )
    return qs.filter(Exists(failed))


def run_check_names(*, run: Run) -> list[str]:
    """The names of the checks recorded in the run's metrics, sorted."""
    return sorted((run.metrics or {}).get("checks") or {})


def _judge_usage(p: Prediction) -> dict[str, Any] | None:
    """The judges' usage of a prediction: the answer's judge and the path's (role ``judge``)."""
    answer = (p.judgement or {}).get("usage") or None
    path_judge = ((p.trajectory_scores or {}).get("trajectory_judge") or {}).get("judgement") or {}
    path = path_judge.get("usage") or None
    if not path or not answer:
        return answer or path
    total = UsageTotals.from_dict(dict(answer))
    total.merge(UsageTotals.from_dict(dict(path)))
    return total.to_dict()


def run_metrics(*, run: Run) -> dict[str, Any]:
    """Metrics over every prediction row of the run (completed or not), read
    from the database so a resumed run never counts an example twice;
    ``trajectory``: the paths' verdicts (``evaluation.metrics.trajectory_metrics``)
    when some prediction has one."""
    predictions = list(run.predictions.all())
    rows = [
        PredictionRow(
            task_type=p.task_type,
            correct=p.correct,
            steps=p.steps,
            input_tokens=p.input_tokens,
            output_tokens=p.output_tokens,
            cost=p.cost,
            stop_reason=p.stop_reason,
            latency_ms=p.latency_ms,
            error=p.error or None,
            first_correct=p.first_correct if p.review_retried else p.correct,
            review_retried=bool(p.review_retried),
            review_verdict=p.review_verdict,
            usage=p.usage or None,
            example=p.example_id,
            epoch=p.epoch,
            score=p.score,
            scorer=p.scorer,
            judge_grade=(p.judgement or {}).get("grade", ""),
            judge_cached=bool((p.judgement or {}).get("cached")),
            judge_usage=_judge_usage(p),
        )
        for p in predictions
    ]
    metrics = {**compute_metrics(rows), "checks": check_metrics(run_check_rows(run=run))}
    # the paths' verdicts beside the answers' (issue 48), each with its interval
    trajectory = trajectory_metrics([(p.task_type, p.trajectory_scores) for p in predictions])
    if trajectory is not None:
        metrics["trajectory"] = trajectory
    # conversation examples' per-turn and goal figures beside the verdicts (issue 41)
    conversations = conversation_metrics((p.correct, p.conversation_result) for p in predictions)
    if conversations is not None:
        metrics["conversations"] = conversations
    return metrics


def run_check_rows(*, run: Run) -> list[CheckRow]:
    """The ``check`` events of the last attempt of every turn of the run — the
    attempt whose answer was scored — as ``CheckRow``s. One query."""
    found = TurnEvent.objects.filter(turn__predictions__run=run, type=EventType.CHECK).values_list(
        "turn_id", "turn__attempts", "turn__predictions__task_type", "data"
    )
    rows = []
    for turn_id, attempts, task_type, data in found:
        if data.get("attempt", 1) != attempts:
            continue  # an earlier attempt (reviewed and retried, or continued)
        row = check_row(turn_id=turn_id, task_type=task_type, data=data)
        if row is not None:
            rows.append(row)
    return rows


def run_holder(*, run: Run) -> str | None:
    """Who is driving ``run`` right now, as words for a message
    (``run_lease_holder``, else ``run_turn_holder``), or ``None``."""
    return run_lease_holder(run=run) or run_turn_holder(run=run)


def run_lease_holder(*, run: Run) -> str | None:
    """Who holds ``run``'s lease, as words for a message, or ``None`` when no
    live process does (no lease, a heartbeat older than ``TURN_STALE_S``, or
    a process of this machine that has exited)."""
    if not run.driver or run.heartbeat_at is None:
        return None
    age = (timezone.now() - run.heartbeat_at).total_seconds()
    if age > float(settings.TURN_STALE_S) or local_job_is_gone(run.driver):
        return None
    return f"run_eval {run.driver.split(':')[0]}, heartbeat {age:.0f} s ago"


def run_driven_elsewhere(*, run: Run) -> Turn | None:
    """A turn of ``run`` that a live process is driving, or ``None``.

    A running or waiting turn counts when its heartbeat is younger than
    ``TURN_STALE_S`` and its job is not known to be gone
    (``turns.jobs.ids.local_job_is_gone``: ``run_eval`` names host and pid in
    its job ids, so the turns of a killed run on this machine do not count).
    Two ``run_eval`` processes on one run id would otherwise take each
    other's turns, and each print metrics over rows the other is writing.
    """
    cutoff = timezone.now() - timedelta(seconds=float(settings.TURN_STALE_S))
    active = Turn.objects.filter(
        predictions__run=run, status__in=(TurnStatus.RUNNING, TurnStatus.WAITING), heartbeat_at__gte=cutoff
    ).only("pk", "status", "job_id", "heartbeat_at")
    for turn in active.order_by("pk"):
        if not local_job_is_gone(turn.job_id):
            return turn
    return None


def run_turn_holder(*, run: Run) -> str | None:
    """``run_driven_elsewhere`` in words for a message, or ``None``."""
    busy = run_driven_elsewhere(run=run)
    if busy is None:
        return None
    age = (timezone.now() - busy.heartbeat_at).total_seconds() if busy.heartbeat_at else 0.0
    return f"its turn {busy.pk} is {busy.status} under job {busy.job_id}, heartbeat {age:.0f} s ago"

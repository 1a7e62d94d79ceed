"""Reads a finished run's predictions into JUnit suites (``evaluation.ci.junit``):
one suite per task type, or one per variant of an experiment.

A prediction's verdict: an error (``Prediction.error`` set: the turn failed,
its stop reason and cause recorded) is a JUnit ``<error>``; otherwise
``correct is None`` (could not be scored) is ``<skipped>``, ``False`` a
``<failure>`` and ``True`` a pass (docs/evaluating.md#ci-reports).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from evaluation.ci.junit import CaseVerdict, JunitCase, JunitSuite
from evaluation.datasets.spec import gold_display
from evaluation.metrics.intervals import wilson_interval
from evaluation.models import Prediction, Run

__all__ = ["case_for", "run_suites", "variant_suite"]


def _verdict(prediction: Prediction) -> CaseVerdict:
    if prediction.error:
        return CaseVerdict.ERROR
    if prediction.correct is None:
        return CaseVerdict.SKIPPED
    return CaseVerdict.PASSED if prediction.correct else CaseVerdict.FAILURE


def _details(prediction: Prediction) -> str:
    """The failure's text: what a reader needs to judge it without the admin."""
    return (
        f"question: {prediction.example.question}\n"
        f"gold: {gold_display(prediction.gold_answer)}\n"
        f"answer: {prediction.prediction}"
    )


def case_for(prediction: Prediction, *, dataset: str, epochs: int = 1, note: str = "") -> JunitCase:
    """One prediction as a ``JunitCase``; ``epochs`` above 1 adds the epoch
    to the name (``q7 (epoch 2)``) so each case is unique, and ``note`` is
    appended to a failure's message (a comparison's "broken")."""
    verdict = _verdict(prediction)
    name = prediction.example.external_id
    if epochs > 1:
        name = f"{name} (epoch {prediction.epoch})"
    latency = prediction.latency_ms
    case: dict[str, Any] = {
        "name": name,
        "classname": f"{dataset}.{prediction.task_type}",
        "time_s": latency / 1000 if latency is not None else None,
        "verdict": verdict,
    }
    if verdict == CaseVerdict.FAILURE:
        message = prediction.score_explanation or "wrong answer"
        case |= {
            "message": f"{message} ({note})" if note else message,
            "kind": "wrong",
            "text": _details(prediction),
        }
    elif verdict == CaseVerdict.ERROR:
        case |= {
            "message": f"stop reason: {prediction.stop_reason}",
            "kind": prediction.stop_reason,
            "text": f"{prediction.error}\n\n{_details(prediction)}",
        }
    elif verdict == CaseVerdict.SKIPPED:
        case |= {"message": prediction.score_explanation or "could not be scored", "kind": "unscored"}
    return JunitCase(**case)


def _predictions(run: Run) -> list[Prediction]:
    return list(
        Prediction.objects.filter(run=run)
        .select_related("example")
        .order_by("task_type", "example__position", "example__external_id", "epoch")
    )


def _accuracy_properties(predictions: Sequence[Prediction]) -> list[tuple[str, str]]:
    """``accuracy`` and its 95 % Wilson interval over ``predictions``
    (``""`` when nothing was scored), as the run's metrics count them."""
    scored = [p for p in predictions if p.correct is not None]
    correct = sum(1 for p in scored if p.correct)
    interval = wilson_interval(correct, len(scored))
    if interval is None:
        return [("accuracy", ""), ("accuracy_ci_low", ""), ("accuracy_ci_high", "")]
    return [
        ("accuracy", f"{correct / len(scored):.6g}"),
        ("accuracy_ci_low", f"{interval[0]:.6g}"),
        ("accuracy_ci_high", f"{interval[1]:.6g}"),
        ("correct", str(correct)),
        ("scored", str(len(scored))),
    ]


def _run_properties(run: Run) -> list[tuple[str, str]]:
    config = run.config or {}
    subset = [("split", config["split"])] if config.get("split") else []
    subset += [("tags", ",".join(config["tags"]))] if config.get("tags") else []
    return [
        ("run_id", run.run_id),
        ("model", str(config.get("model") or "")),
        ("dataset", run.dataset.name),
        ("dataset_version", str(run.dataset_version)),
        *subset,
    ]


def _epochs(run: Run) -> int:
    return int((run.config or {}).get("epochs") or 1)


def run_suites(
    run: Run, *, extra: Iterable[tuple[str, str]] = (), notes: dict[str, str] | None = None
) -> list[JunitSuite]:
    """The run's predictions as one suite per task type (sorted), named
    ``RUN_ID/TASK_TYPE``, each with the run's properties (``run_id``,
    ``model``, ``dataset``, ``dataset_version``, ``task_type``, ``extra``) and
    the task type's accuracy with its interval. ``notes``: a failure-message
    note per question id (a comparison marks the broken examples)."""
    predictions = _predictions(run)
    by_task: dict[str, list[Prediction]] = {}
    for prediction in predictions:
        by_task.setdefault(prediction.task_type, []).append(prediction)
    epochs, notes = _epochs(run), notes or {}
    extra = list(extra)
    return [
        JunitSuite(
            name=f"{run.run_id}/{task_type}",
            cases=[
                case_for(
                    p, dataset=run.dataset.name, epochs=epochs, note=notes.get(p.example.external_id, "")
                )
                for p in rows
            ],
            properties=[*_run_properties(run), ("task_type", task_type), *_accuracy_properties(rows), *extra],
            timestamp=run.created_at.isoformat(timespec="seconds"),
        )
        for task_type, rows in sorted(by_task.items())
    ]


def variant_suite(run: Run) -> JunitSuite:
    """An experiment's variant (its run) as one suite named after the
    variant, all its task types in it (``classname`` tells them apart)."""
    predictions = _predictions(run)
    epochs = _epochs(run)
    return JunitSuite(
        name=run.variant or run.run_id,
        cases=[case_for(p, dataset=run.dataset.name, epochs=epochs) for p in predictions],
        properties=[*_run_properties(run), ("variant", run.variant), *_accuracy_properties(predictions)],
        timestamp=run.created_at.isoformat(timespec="seconds"),
    )

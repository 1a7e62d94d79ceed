"""Writes for evaluation: datasets, runs, predictions (HackSoft "services").

Scoring and metrics are pure functions (``evaluation.scoring``,
``evaluation.metrics``); these services load rows, call them and save.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from common.db import update_by_pk
from common.errors import BadInput, StateConflict
from turns.models import Turn, TurnKind, TurnOutcome, TurnStatus
from turns.services import (
    RETRYABLE_STATUSES,
    NewTurn,
    turn_create_many,
    turn_interrupt,
    turn_resume,
    turn_retry,
)

from .datasets import ExampleSpec, parse_jsonl
from .demo import DEMO_DATASET_NAME, demo_examples
from .metrics import PredictionRow, compute_metrics
from .models import Dataset, Example, Prediction, Run, RunStatus
from .scoring import score, scorer_for

#: ``Dataset.source`` of the demo dataset, the only import allowed under its name.
DEMO_SOURCE = "agentlab demo"

#: Characters a run id or dataset name may not hold (both appear in URLs).
_RUN_ID_FORBIDDEN = _NAME_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f/\\?#%]")


def dataset_import(*, name: str, examples: Sequence[ExampleSpec], source: str = "") -> Dataset:
    """Register ``examples`` under dataset ``name``, in one transaction.

    Importing the same examples again under the same name is a no-op, so
    runs that refer to them stay valid. A name that already holds *different*
    examples is refused (``BadInput``): silently merging two files that share
    a name (two ``test.jsonl`` files, or a file called like a registered
    dataset) would change what earlier runs measured. Raises ``BadInput`` for
    an empty name or no examples too; nothing is written then.
    """
    name = (name or "").strip()
    if not name:
        raise BadInput("a dataset needs a non-empty name")
    if name == DEMO_DATASET_NAME and source != DEMO_SOURCE:
        raise BadInput(
            f"dataset name {name!r} is reserved for the project's demo dataset; choose another name"
        )
    bad = _NAME_FORBIDDEN.search(name)
    if bad:
        # run ids are made from dataset names, and both appear in URLs
        raise BadInput(
            f"dataset name {name!r} contains {bad.group()!r}; control characters and / \\ ? # % "
            "are not allowed"
        )
    if not examples:
        raise BadInput(f"dataset {name!r} has no examples")
    for spec in examples:  # fail before writing anything
        scorer_for(example_scorer=spec.scorer, task_type=spec.task_type)
    with transaction.atomic():
        dataset, created = Dataset.objects.get_or_create(name=name, defaults={"source": source})
        existing = {e.external_id: e for e in dataset.examples.all()}
        new, changed = [], []
        for position, spec in enumerate(examples):
            values = {
                "position": position,
                "question": spec.question,
                "answer": spec.answer,
                "task_type": spec.task_type,
                "scorer": spec.scorer or "",
                "choices": spec.choices,
                "context": spec.context or {},
                "metadata": spec.metadata or {},
            }
            row = existing.get(spec.external_id)
            if row is None:
                new.append(Example(dataset=dataset, external_id=spec.external_id, **values))
            elif any(getattr(row, k) != v for k, v in values.items()):
                for k, v in values.items():
                    setattr(row, k, v)
                changed.append(row)
        if not created and (new or changed or len(existing) != len(examples)):
            raise BadInput(
                f"a dataset named {name!r} already exists with different examples"
                + (f" (from {dataset.source})" if dataset.source else "")
                + "; import this file under another name: manage.py import_dataset FILE --name NEW_NAME"
            )
        Example.objects.bulk_create(new, batch_size=500)
    return dataset


def dataset_resolve(*, name_or_path: str) -> Dataset:
    """The dataset ``run_eval`` was asked for.

    A registered dataset name wins; ``demo`` registers the project's demo
    dataset on first use; a path to a ``.jsonl`` file is parsed (the whole file
    is validated first — ``DatasetFormatError`` names the line) and registered
    under the file's stem. Raises ``BadInput`` for anything else.
    """
    found = Dataset.objects.filter(name=name_or_path).first()
    if found is not None:
        return found
    if name_or_path == DEMO_DATASET_NAME:
        return dataset_import(name=DEMO_DATASET_NAME, examples=demo_examples(), source=DEMO_SOURCE)
    path = Path(name_or_path)
    if path.suffix == ".jsonl" or path.is_file():
        if not path.is_file():
            raise BadInput(f"dataset file {name_or_path} does not exist")
        examples = parse_jsonl(path)
        return dataset_import(name=path.stem, examples=examples, source=str(path.resolve()))
    known = sorted(Dataset.objects.exclude(name=DEMO_DATASET_NAME).values_list("name", flat=True))
    raise BadInput(
        f"no dataset named {name_or_path!r} and no such .jsonl file; registered datasets: "
        + (", ".join(known) if known else "none")
        + f" (and {DEMO_DATASET_NAME!r})"
    )


def _system_user(run_id: str) -> AbstractBaseUser:
    """The per-run system user that owns a run's turns (DESIGN.md §8)."""
    User = get_user_model()
    username = f"eval-{secrets.token_hex(4)}-{run_id}"[:150]
    user = User(username=username, is_active=False)
    user.set_unusable_password()
    user.save()
    return user


RUN_ID_MAX = 200


def run_id_check(run_id: str | None) -> str:
    """A valid run id, stripped: non-empty, at most ``RUN_ID_MAX`` characters,
    no control characters and none of ``/ \\ ? # %`` (a run id appears in URLs:
    ``/api/runs/{run_id}``). Raises ``BadInput`` saying what is wrong."""
    run_id = (run_id or "").strip()
    if not run_id:
        raise BadInput("run id must not be empty or blank")
    if len(run_id) > RUN_ID_MAX:
        raise BadInput(f"run id is {len(run_id)} characters long; at most {RUN_ID_MAX} are allowed")
    bad = _RUN_ID_FORBIDDEN.search(run_id)
    if bad:
        raise BadInput(
            f"run id {run_id!r} contains {bad.group()!r}; control characters and / \\ ? # % are not allowed"
        )
    return run_id


def run_start(
    *,
    run_id: str,
    dataset: Dataset,
    config: dict[str, Any],
    started_by: AbstractBaseUser | None = None,
    driver: str = "",
) -> tuple[Run, bool]:
    """Start run ``run_id`` on ``dataset``, or resume it if it exists.

    Returns ``(run, resumed)``. Resuming keeps the run's predictions (finished
    examples are skipped by the caller) and records the new config under
    ``config["resumes"]``. Raises ``BadInput`` for an empty run id and
    ``StateConflict`` when the run id exists on another dataset, was started
    with another provider, model or review setting, or is being driven by
    another process right now; nothing is written then. "Another process"
    means a live lease (``driver`` set, ``heartbeat_at`` younger than
    ``TURN_STALE_S``, its process not known to be gone) or a turn of the run
    under a live driver (``run_driven_elsewhere``).

    ``driver`` (``run_eval``: a job tag from ``run_lease_tag``) takes the
    run's lease in the same transaction; the caller then renews it
    (``run_heartbeat``) and ``run_finish`` releases it. Two processes that
    create the same new run id at once: the second gets ``StateConflict``.
    """
    run_id = run_id_check(run_id)
    leased = {"driver": driver, "heartbeat_at": timezone.now() if driver else None}
    try:
        with transaction.atomic():
            return _run_start(
                run_id=run_id, dataset=dataset, config=config, started_by=started_by, leased=leased
            )
    except IntegrityError as exc:
        if not Run.objects.filter(run_id=run_id).exists():
            raise
        raise StateConflict(
            f"run {run_id!r} was just started by another process; wait for it to finish, "
            "then run again to resume"
        ) from exc


def _run_start(
    *,
    run_id: str,
    dataset: Dataset,
    config: dict[str, Any],
    started_by: AbstractBaseUser | None,
    leased: dict[str, Any],
) -> tuple[Run, bool]:
    run = Run.objects.select_for_update().filter(run_id=run_id).first()
    if run is None:
        run = Run.objects.create(
            run_id=run_id,
            dataset=dataset,
            config=config,
            started_by=started_by,
            system_user=_system_user(run_id),
            status=RunStatus.STARTED,
            **leased,
        )
        return run, False
    if run.dataset_id != dataset.pk:
        raise StateConflict(f"run {run_id!r} exists on dataset {run.dataset.name!r}, not {dataset.name!r}")
    for key in ("provider", "model", "review"):
        if key in run.config and key in config and run.config[key] != config[key]:
            raise StateConflict(
                f"run {run_id!r} was started with {key} {run.config[key]!r}, not {config[key]!r}: "
                "one run measures one setup; start a new run id"
            )
    holder = run_lease_holder(run=run) or _turn_holder(run=run)
    if holder is not None:
        raise StateConflict(
            f"run {run_id!r} is being driven by another process right now ({holder}). Wait for that "
            "run_eval to finish or stop it; the run can then be resumed — at once if that process ran on "
            f"this machine, else once its heartbeat is TURN_STALE_S ({float(settings.TURN_STALE_S):g} s) old"
        )
    resumes = list(run.config.get("resumes", []))
    resumes.append({"at": timezone.now().isoformat(), "config": config})
    run.config = {**run.config, "resumes": resumes}
    run.status = RunStatus.STARTED
    run.finished_at = None
    run.driver, run.heartbeat_at = leased["driver"], leased["heartbeat_at"]
    if run.system_user_id is None:
        run.system_user = _system_user(run_id)
    run.save(update_fields=["config", "status", "finished_at", "system_user", "driver", "heartbeat_at"])
    return run, True


def run_lease_tag() -> str:
    """The lease tag of this process for ``run_start(driver=…)``: host and
    pid, in the form ``turns.jobs.local_job_is_gone`` can judge."""
    from turns.jobs import local_job_id

    return f"{local_job_id('eval', 0)}:run"


def run_lease_holder(*, run: Run) -> str | None:
    """Who holds ``run``'s lease, as words for a message, or ``None`` when no
    live process does (no lease, a heartbeat older than ``TURN_STALE_S``, or
    a process of this machine that has exited)."""
    from turns.jobs import local_job_is_gone

    if not run.driver or run.heartbeat_at is None:
        return None
    age = (timezone.now() - run.heartbeat_at).total_seconds()
    if age > float(settings.TURN_STALE_S) or local_job_is_gone(run.driver):
        return None
    return f"run_eval {run.driver.split(':')[0]}, heartbeat {age:.0f} s ago"


def run_heartbeat(*, run_pk: int, driver: str) -> bool:
    """Renew the lease ``driver`` holds on the run with primary key
    ``run_pk``; ``False`` when the lease is no longer ``driver``'s."""
    return Run.objects.filter(pk=run_pk, driver=driver).update(heartbeat_at=timezone.now()) == 1


def run_driven_elsewhere(*, run: Run) -> Turn | None:
    """A turn of ``run`` that a live process is driving, or ``None``.

    A running or waiting turn counts when its heartbeat is younger than
    ``TURN_STALE_S`` and its job is not known to be gone
    (``turns.jobs.local_job_is_gone``: ``run_eval`` names host and pid in
    its job ids, so the turns of a killed run on this machine do not count).
    Two ``run_eval`` processes on one run id would otherwise take each
    other's turns, and each print metrics over rows the other is writing.
    """
    from datetime import timedelta

    from turns.jobs import local_job_is_gone

    cutoff = timezone.now() - timedelta(seconds=float(settings.TURN_STALE_S))
    active = Turn.objects.filter(
        predictions__run=run, status__in=(TurnStatus.RUNNING, TurnStatus.WAITING), heartbeat_at__gte=cutoff
    ).only("pk", "status", "job_id", "heartbeat_at")
    for turn in active.order_by("pk"):
        if not local_job_is_gone(turn.job_id):
            return turn
    return None


def _turn_holder(*, run: Run) -> str | None:
    """``run_driven_elsewhere`` in words for a message, or ``None``."""
    busy = run_driven_elsewhere(run=run)
    if busy is None:
        return None
    age = (timezone.now() - busy.heartbeat_at).total_seconds() if busy.heartbeat_at else 0.0
    return f"its turn {busy.pk} is {busy.status} under job {busy.job_id}, heartbeat {age:.0f} s ago"


@dataclass(frozen=True)
class PlannedExample:
    """An example of a run still to be driven: its prediction row, its turn,
    and the example itself (scored in memory when the turn finishes)."""

    prediction_id: int
    turn_id: int
    example: Example
    resumed: bool

    @property
    def example_id(self) -> int:
        return self.example.pk


def _turn_context(example: Example) -> dict[str, Any]:
    context = dict(example.context or {})
    if example.choices:
        context.setdefault("choices", example.choices)
    context.setdefault("task_type", example.task_type)
    return context


def run_plan(
    *, run: Run, limit: int | None, max_steps: int, model: str, retry_errors: bool = False
) -> tuple[list[PlannedExample], int]:
    """Decide what a (possibly resumed) run still has to do.

    For the first ``limit`` examples of the run's dataset (all when ``None``):
    an example with a completed prediction is skipped; one whose earlier turn
    was cut off (killed process) gets that turn interrupted and resumed, so the
    driver continues from its event log; one with nothing yet gets a queued
    turn and a pessimistic prediction row (stop reason ``error``, wrong), in
    one transaction (for up to ``PLAN_BATCH`` examples at a time), so a
    prediction exists even if the turn never finishes.
    With ``retry_errors``, a completed prediction that recorded an error (a
    provider outage, say) is planned again: its turn gets a new attempt
    (``turn_retry``, the failed one archived) and the row is completed anew.
    Returns the planned examples and the number skipped.
    """
    examples = list(run.dataset.examples.order_by("position")[: limit if limit else None])
    predictions = {p.example_id: p for p in run.predictions.select_related("turn")}
    planned: list[PlannedExample | None] = []  # None: a fresh example, queued below in batches
    fresh: list[tuple[int, Example, Prediction | None]] = []
    skipped = 0
    for example in examples:
        prediction = predictions.get(example.pk)
        if (
            retry_errors
            and prediction is not None
            and prediction.completed_at is not None
            and prediction.error
            and prediction.turn is not None
            and prediction.turn.status in RETRYABLE_STATUSES
        ):
            with transaction.atomic():
                turn_retry(turn_id=prediction.turn_id)
                Prediction.objects.filter(pk=prediction.pk).update(completed_at=None)
            planned.append(PlannedExample(prediction.pk, prediction.turn_id, example, resumed=True))
            continue
        if prediction is not None and prediction.completed_at is not None:
            skipped += 1
            continue
        if prediction is not None and prediction.turn is not None:
            turn = prediction.turn
            if turn.status in (TurnStatus.RUNNING, TurnStatus.WAITING):
                # its process is gone (the run was killed): the log is kept
                turn_interrupt(turn_id=turn.pk, reason="run_eval resumed the run")
                turn.refresh_from_db()
            if turn.can_resume():
                turn_resume(turn_id=turn.pk)
            planned.append(PlannedExample(prediction.pk, turn.pk, example, resumed=True))
            continue
        fresh.append((len(planned), example, prediction))
        planned.append(None)
    for start in range(0, len(fresh), PLAN_BATCH):
        for index, item in _queue_fresh(
            run=run, fresh=fresh[start : start + PLAN_BATCH], max_steps=max_steps, model=model
        ):
            planned[index] = item
    return [item for item in planned if item is not None], skipped


#: Examples queued per transaction when a run is planned.
PLAN_BATCH = 500


def _queue_fresh(
    *, run: Run, fresh: Sequence[tuple[int, Example, Prediction | None]], max_steps: int, model: str
) -> list[tuple[int, PlannedExample]]:
    """Queue a turn for each ``(slot, example, prediction or None)`` and give
    each its pessimistic prediction row (stop reason ``error``, wrong), all in
    one transaction and a handful of statements (``turn_create_many``,
    ``bulk_create``). Returns ``(slot, planned example)`` pairs."""
    with transaction.atomic():
        turns = turn_create_many(
            owner=run.system_user,
            kind=TurnKind.EVALUATION,
            turns=[
                NewTurn(
                    question=example.question,
                    context=_turn_context(example),
                    max_steps=max_steps,
                    model=model,
                )
                for _, example, _ in fresh
            ],
        )
        new_rows, relinked = [], []
        for (_, example, prediction), turn in zip(fresh, turns, strict=True):
            if prediction is None:
                new_rows.append(
                    Prediction(
                        run=run,
                        example=example,
                        turn=turn,
                        task_type=example.task_type,
                        gold_answer=example.answer,
                        stop_reason="error",
                        correct=False,
                        score=0.0,
                        error="the turn did not finish",
                    )
                )
            else:
                prediction.turn = turn
                relinked.append(prediction)
        Prediction.objects.bulk_create(new_rows)
        Prediction.objects.bulk_update(relinked, ["turn"])
    by_example = {p.example_id: p for p in [*new_rows, *relinked]}
    return [
        (index, PlannedExample(by_example[example.pk].pk, turn.pk, example, resumed=False))
        for (index, example, _), turn in zip(fresh, turns, strict=True)
    ]


@dataclass(frozen=True)
class TurnFinal:
    """What a prediction is scored from: a turn's final state.

    Built from the turn row (``from_turn``) or, inside the terminal event's
    transaction, from the fields the driver has just written
    (``from_fields``) — the same values either way, so the fast path and the
    read-back path score alike.
    """

    outcome: str
    answer: str
    evidence: str
    reasoning: str
    steps: int
    stop_reason: str
    usage: dict[str, Any]
    meta: dict[str, Any]
    timings: dict[str, Any]

    @classmethod
    def from_turn(cls, turn: Turn) -> TurnFinal:
        return cls(
            outcome=turn.outcome,
            answer=turn.answer,
            evidence=turn.evidence,
            reasoning=turn.reasoning,
            steps=turn.steps,
            stop_reason=turn.stop_reason,
            usage=turn.usage or {},
            meta=turn.meta or {},
            timings=turn.timings or {},
        )

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> TurnFinal:
        """From the turn fields of a terminal event (``TurnPolicy.on_finish``)."""
        return cls(
            outcome=fields.get("outcome") or "",
            answer=fields.get("answer") or "",
            evidence=fields.get("evidence") or "",
            reasoning=fields.get("reasoning") or "",
            steps=int(fields.get("steps") or 0),
            stop_reason=fields.get("stop_reason") or "",
            usage=dict(fields.get("usage") or {}),
            meta=dict(fields.get("meta") or {}),
            timings=dict(fields.get("timings") or {}),
        )


def prediction_values(
    *, example: Example, turn: TurnFinal | None, error: str | None = None, latency_ms: int | None = None
) -> dict[str, Any]:
    """The fields of a completed prediction (a dict of ``Prediction`` field
    values, ``completed_at`` included), scored against ``example``.

    The turn's final state is the source of truth (answer, steps, usage,
    stop reason). A turn that did not answer scores as wrong — it stays in
    the accuracy denominator — unless the example cannot be scored at all
    (unscored). ``error`` is the driver's error, if any; a failed turn's
    cause is used otherwise; no turn at all is an error too.
    """
    scorer = scorer_for(example_scorer=example.scorer or None, task_type=example.task_type)
    answered = turn is not None and turn.outcome == TurnOutcome.ANSWERED
    answer = turn.answer if answered and turn is not None else None
    result = score(
        prediction=answer,
        gold=example.answer,
        scorer=scorer,
        choices=example.choices,
        metadata=example.metadata,
    )
    usage = _usage_total(turn.usage, turn.meta) if turn is not None else {}
    calls = int(usage.get("calls") or 0)
    unknown = int(usage.get("unknown_calls") or 0)
    tokens_known = calls > 0 and unknown == 0
    if turn is not None and not error and turn.outcome == TurnOutcome.FAILED:
        error = turn.meta.get("failure_error") or turn.meta.get("failure_cause") or "failed"
    if turn is None and not error:
        error = "no turn was run"
    if latency_ms is None and turn is not None:
        latency_ms = turn.timings.get("total_ms")
    first = _first_attempt_review(turn.meta if turn is not None else {})
    if first is None:
        first_correct = result.correct
    else:
        first_answer = first.get("answer") if first.get("outcome") == TurnOutcome.ANSWERED else None
        first_correct = score(
            prediction=first_answer,
            gold=example.answer,
            scorer=scorer,
            choices=example.choices,
            metadata=example.metadata,
        ).correct
    return {
        "prediction": answer or "",
        "scorer": scorer,
        "score": result.value,
        "correct": result.correct,
        "evidence": turn.evidence if turn is not None else "",
        "reasoning": turn.reasoning if turn is not None else "",
        "steps": turn.steps if turn is not None else 0,
        "input_tokens": int(usage.get("input_tokens") or 0) if tokens_known else None,
        "output_tokens": int(usage.get("output_tokens") or 0) if tokens_known else None,
        "cost": usage.get("cost"),
        "stop_reason": (turn.stop_reason if turn is not None else "") or "error",
        "error": error or "",
        "latency_ms": latency_ms,
        "review_retried": first is not None,
        "first_correct": first_correct,
        "review_verdict": _last_review_verdict(turn.meta if turn is not None else {}),
        "completed_at": timezone.now(),
    }


def prediction_record(
    *, prediction_id: int, error: str | None = None, latency_ms: int | None = None
) -> Prediction:
    """Complete a prediction from its turn's row and score it (see
    ``prediction_values``). Raises ``Prediction.DoesNotExist``."""
    prediction = Prediction.objects.select_related("example", "turn").get(pk=prediction_id)
    turn = TurnFinal.from_turn(prediction.turn) if prediction.turn is not None else None
    for name, value in prediction_values(
        example=prediction.example, turn=turn, error=error, latency_ms=latency_ms
    ).items():
        setattr(prediction, name, value)
    prediction.save()
    return prediction


def prediction_complete(*, prediction_id: int, example: Example, turn: TurnFinal) -> None:
    """Complete a prediction from a turn's final state already in hand — one
    ``UPDATE``, no read. ``run_eval`` calls it inside the terminal event's
    transaction (``EvaluationPolicy``), where the turn row holds exactly
    these values. Raises ``Prediction.DoesNotExist`` if the row is gone."""
    if update_by_pk(Prediction, prediction_id, prediction_values(example=example, turn=turn)) != 1:
        raise Prediction.DoesNotExist(f"prediction {prediction_id} does not exist")


def _first_attempt_review(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The turn's first archived attempt when a review retried the turn
    (some archived attempt has ``reason == "review"``), else ``None``."""
    attempts = meta.get("attempts") or []
    if not any(a.get("reason") == "review" for a in attempts):
        return None
    return attempts[0]


def _last_review_verdict(meta: Mapping[str, Any]) -> str:
    """The verdict of a turn's last review: the current attempt's
    (``meta["review"]``), else the last archived attempt's; ``""`` if none."""
    reviews = [a.get("review") for a in meta.get("attempts") or []] + [meta.get("review")]
    for review in reversed(reviews):
        if review and review.get("verdict"):
            return str(review["verdict"])
    return ""


def _usage_total(usage: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The usage of every attempt of a turn: the current attempt's
    (``usage``) plus the archived ones' in ``meta["attempts"]`` (a review
    retry's first attempt cost tokens too). Same shape as
    ``UsageTotals.to_dict()``."""
    archived = [a.get("usage") or {} for a in meta.get("attempts") or []]
    if not archived:
        return dict(usage or {})
    from agentlab.agent.usage import UsageTotals

    total = UsageTotals.from_dict(dict(usage or {}))
    for item in archived:
        total.merge(UsageTotals.from_dict(item))
    return total.to_dict()


def run_metrics(*, run: Run) -> dict[str, Any]:
    """Metrics over every prediction row of the run (completed or not), read
    from the database so a resumed run never counts an example twice."""
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
        )
        for p in run.predictions.all()
    ]
    return compute_metrics(rows)


def run_finish(
    *, run: Run, status: str = RunStatus.SUCCESS, driven: int = 0, wall_s: float | None = None
) -> Run:
    """Compute and store the run's metrics and final status.

    ``driven`` examples were driven in ``wall_s`` seconds by this invocation
    (a resumed run drives only what was left); they are stored as
    ``metrics["throughput"]`` = ``{"examples", "wall_s", "samples_per_s"}``.
    An invocation that drove nothing (a resume with everything done) keeps
    the throughput recorded before, if any: zero examples measure nothing.
    """
    earlier = (run.metrics or {}).get("throughput")
    run.metrics = run_metrics(run=run)
    if wall_s is not None and driven == 0 and earlier:
        run.metrics["throughput"] = earlier
    elif wall_s is not None:
        run.metrics["throughput"] = {
            "examples": driven,
            "wall_s": round(wall_s, 3),
            "samples_per_s": round(driven / wall_s, 2) if wall_s > 0 else None,
        }
    run.status = status
    run.finished_at = timezone.now()
    run.driver, run.heartbeat_at = "", None  # the lease ends with the invocation
    run.save(update_fields=["metrics", "status", "finished_at", "driver", "heartbeat_at"])
    return run

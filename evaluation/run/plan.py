"""Planning a run: which examples it still drives, each with a queued turn
and a prediction row written before the turn runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.sampling import seeded_sample
from evaluation.datasets.conversation_spec import conversation_kind
from evaluation.datasets.subsets import subset_examples
from evaluation.datasets.versions import examples_at
from evaluation.models import Example, Prediction, Run
from evaluation.run.conversation_plan import conversation_failed, conversation_open, conversation_retry
from turns.models import Turn, TurnKind, TurnStatus
from turns.services import (
    RETRYABLE_STATUSES,
    NewTurn,
    turn_create_many,
    turn_interrupt,
    turn_resume,
    turn_retry,
    turns_set_output_limit,
)


class PlanAction(StrEnum):
    """What a (possibly resumed) run does with one (example, epoch)
    (``plan_action`` decides, one writer in ``run_plan`` per action):

    - ``skip``: its prediction is complete — nothing to do;
    - ``retry``: ``--retry-errors`` and its completed prediction recorded an
      error or was cancelled — its turn gets a new attempt (``turn_retry``)
      and the row is completed anew;
    - ``follow``: ``run_eval --celery`` following again, and its turn is live
      on a worker (a heartbeat younger than ``TURN_STALE_S``) — left to it;
    - ``resume``: its turn was cut off (a killed process: running or waiting
      with no one driving it, or interrupted or failed) — interrupted if
      need be, then resumed (``turn_resume``) so the driver continues from
      its event log;
    - ``keep``: its turn exists but cannot be resumed (still queued; cut
      off with a cancel asked for, which the interruption ends cancelled;
      ended with its prediction not yet complete) — it is driven as it
      stands (the driver claims a queued turn; an ended one only has its
      prediction recorded) and is not reported as resumed;
    - ``fresh``: no turn yet — a queued turn and a pessimistic prediction row
      are written (in batches).
    """

    SKIP = "skip"
    RETRY = "retry"
    FOLLOW = "follow"
    RESUME = "resume"
    KEEP = "keep"
    FRESH = "fresh"


#: The turn statuses whose process is gone when a run is resumed without ``live_ok``.
_CUT_OFF = frozenset({TurnStatus.RUNNING, TurnStatus.WAITING})


def plan_action(prediction: Prediction | None, *, retry_errors: bool, live_ok: bool) -> PlanAction:
    """What to do with an (example, epoch) whose prediction row is
    ``prediction`` (``None``: none yet; its ``turn`` read). See ``PlanAction``."""
    if prediction is None or prediction.turn is None:
        return PlanAction.FRESH if prediction is None or prediction.completed_at is None else PlanAction.SKIP
    turn = prediction.turn
    if prediction.completed_at is not None:
        # an error, or cancelled (manage.py cancel_run): neither is an answer
        failed = bool(prediction.error) or prediction.stop_reason == "cancelled"
        if retry_errors and failed and turn.status in RETRYABLE_STATUSES:
            return PlanAction.RETRY
        return PlanAction.SKIP
    if live_ok and _is_live(turn):
        return PlanAction.FOLLOW
    if turn.can_resume() or (turn.status in _CUT_OFF and not turn.cancel_requested):
        return PlanAction.RESUME
    return PlanAction.KEEP


@dataclass(frozen=True, kw_only=True)
class PlannedExample:
    """An example of a run still to be driven — one epoch of it: its
    prediction row, its turn, the example itself (scored in memory when the
    turn finishes) and what the plan did with it (``PlanAction``)."""

    prediction_id: int
    turn_id: int
    example: Example
    action: PlanAction
    epoch: int = 1
    #: a conversation example's conversation (``None``: a one-question
    #: example); ``turn_id`` is then its latest turn, 0 when it has none yet
    #: (a simulated user that writes its first message)
    conversation_id: int | None = None
    #: the options of each turn a conversation example's drive creates
    template: NewTurn | None = None

    @property
    def example_id(self) -> int:
        return self.example.pk

    @property
    def resumed(self) -> bool:
        """Whether the plan resumed the turn (``turn_resume``): only a turn that could be."""
        return self.action == PlanAction.RESUME


def _turn_context(example: Example) -> dict[str, Any]:
    context = dict(example.context or {})
    if example.choices:
        context.setdefault("choices", example.choices)
    context.setdefault("task_type", example.task_type)
    return context


def run_plan(
    *,
    run: Run,
    limit: int | None,
    max_steps: int,
    model: str,
    retry_errors: bool = False,
    max_output_tokens: int | None = None,
    epochs: int = 1,
    live_ok: bool = False,
) -> tuple[list[PlannedExample], int]:
    """Decide what a (possibly resumed) run still has to do.

    Every example is run ``epochs`` times, each epoch an independent turn
    with its own prediction row (unique per run, example and epoch), and
    everything below holds per (example, epoch): a resume drives exactly the
    epochs that are not done. Planned in example order, epochs 1..K of an
    example together.
    For the first ``limit`` examples of the run's dataset (all when ``None``):
    each (example, epoch) gets one ``PlanAction`` (``plan_action``) and
    its writer: an example with a completed prediction is skipped; one whose
    earlier turn was cut off (killed process) gets that turn interrupted and
    resumed, so the driver continues from its event log; one with nothing yet gets a queued
    turn and a pessimistic prediction row (stop reason ``error``, wrong), in
    one transaction (for up to ``PLAN_BATCH`` examples at a time), so a
    prediction exists even if the turn never finishes.
    With ``retry_errors``, a completed prediction that recorded an error (a
    provider outage, say) or was cancelled (``manage.py cancel_run``) is
    planned again: its turn gets a new attempt
    (``turn_retry``, the failed one archived) and the row is completed anew.
    A queued turn gets the run's ``config["agent_options"]`` (an experiment
    variant's system prompt and temperature) as its ``agent_options``.
    Every planned turn gets ``max_output_tokens`` (``None``: the setting
    when driven), a resumed or retried one included: a run resumed with more
    tokens retries its truncated answers with more.
    With ``live_ok`` (``run_eval --celery`` following its run again), a
    running or waiting turn whose heartbeat is younger than ``TURN_STALE_S``
    is left to the worker driving it (planned, untouched).
    A conversation example's (example, epoch) is one conversation
    (``_plan_conversation``): a new one gets its conversation, first turn
    and prediction row; an unfinished one's latest turn is acted on as
    above, and the drive goes on from it.
    Returns the planned (example, epoch)s and the number skipped.
    Raises ``ValueError`` for ``epochs < 1``.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    examples = _run_examples(run, limit)
    predictions = {(p.example_id, p.epoch): p for p in run.predictions.select_related("turn")}
    planned: list[PlannedExample | None] = []  # None: a fresh example, queued below in batches
    fresh: list[tuple[int, Example, Prediction | None, int]] = []
    skipped = 0
    for example, epoch in ((e, k) for e in examples for k in range(1, epochs + 1)):
        prediction = predictions.get((example.pk, epoch))
        if conversation_kind(example.metadata) is not None:
            template = _template(run, example, max_steps=max_steps, model=model, tokens=max_output_tokens)
            item = _plan_conversation(run, example, epoch, prediction, retry_errors, template)
            skipped += item is None
            planned.extend([item] if item is not None else [])
            continue
        action = plan_action(prediction, retry_errors=retry_errors, live_ok=live_ok)
        if action == PlanAction.SKIP:
            skipped += 1
        elif action == PlanAction.FRESH:
            fresh.append((len(planned), example, prediction, epoch))
            planned.append(None)
        else:
            assert prediction is not None and prediction.turn is not None  # plan_action's contract
            _ACT[action](prediction)
            planned.append(
                PlannedExample(
                    prediction_id=prediction.pk,
                    turn_id=prediction.turn.pk,
                    example=example,
                    action=action,
                    epoch=epoch,
                )
            )
    for start in range(0, len(fresh), PLAN_BATCH):
        for index, item in _queue_fresh(
            run=run,
            fresh=fresh[start : start + PLAN_BATCH],
            max_steps=max_steps,
            model=model,
            max_output_tokens=max_output_tokens,
        ):
            planned[index] = item
    result = [item for item in planned if item is not None]
    existing = [item.turn_id for item in result if item.action != PlanAction.FRESH]
    if existing:
        turns_set_output_limit(turn_ids=existing, max_output_tokens=max_output_tokens)
    return result, skipped


def _template(run: Run, example: Example, *, max_steps: int, model: str, tokens: int | None) -> NewTurn:
    """The options of every turn of a conversation example (its question set per turn)."""
    return NewTurn(
        question="",
        context=_turn_context(example),
        max_steps=max_steps,
        model=model,
        max_output_tokens=tokens,
        agent_options=dict((run.config or {}).get("agent_options") or {}),
    )


def _plan_conversation(
    run: Run,
    example: Example,
    epoch: int,
    prediction: Prediction | None,
    retry_errors: bool,
    template: NewTurn,
) -> PlannedExample | None:
    """A conversation example's (example, epoch) planned
    (``evaluation.run.conversation_plan``): a new conversation (``fresh``);
    a completed one skipped, or with ``retry_errors`` one that ended in an
    error reopened (``retry``); an unfinished one's latest turn acted on as
    ``plan_action`` says for any turn. ``None``: skipped."""
    conversation_id: int | None
    if prediction is None:
        prediction_id, conversation_id, turn_id = conversation_open(
            run=run, example=example, epoch=epoch, template=template
        )
        action = PlanAction.FRESH
    else:
        if prediction.completed_at is not None:
            if not (retry_errors and conversation_failed(prediction)):
                return None
            conversation_retry(prediction)
            action = PlanAction.RETRY
        elif prediction.turn is None:
            action = PlanAction.KEEP
        else:
            action = plan_action(prediction, retry_errors=False, live_ok=False)
            _ACT[action](prediction)
        prediction_id, conversation_id, turn_id = (
            prediction.pk,
            prediction.conversation_id,
            prediction.turn_id or 0,
        )
    return PlannedExample(
        prediction_id=prediction_id,
        turn_id=turn_id,
        example=example,
        action=action,
        epoch=epoch,
        conversation_id=conversation_id,
        template=template,
    )


def _retry(prediction: Prediction) -> None:
    """``PlanAction.RETRY``: a new attempt of the turn, the row to be completed anew."""
    assert prediction.turn is not None
    with transaction.atomic():
        turn_retry(turn_id=prediction.turn.pk)
        Prediction.objects.filter(pk=prediction.pk).update(completed_at=None)


def _resume(prediction: Prediction) -> None:
    """``PlanAction.RESUME``: a turn whose process is gone (the run was
    killed; its log is kept) is interrupted first, then resumed."""
    turn = prediction.turn
    assert turn is not None
    if turn.status in _CUT_OFF:
        turn_interrupt(turn_id=turn.pk, reason="run_eval resumed the run")
    turn_resume(turn_id=turn.pk)


def _keep(prediction: Prediction) -> None:
    """``PlanAction.KEEP``: a cut-off turn is interrupted (with its cancel
    asked for, that ends it cancelled); any other is left as it is."""
    turn = prediction.turn
    assert turn is not None
    if turn.status in _CUT_OFF:
        turn_interrupt(turn_id=turn.pk, reason="run_eval resumed the run")


def _leave(prediction: Prediction) -> None:
    """``PlanAction.FOLLOW``: the turn is live on a worker; nothing is written."""


#: The one writer of each action of an existing turn (``fresh`` is batched in ``_queue_fresh``).
_ACT: dict[PlanAction, Callable[[Prediction], None]] = {
    PlanAction.RETRY: _retry,
    PlanAction.RESUME: _resume,
    PlanAction.FOLLOW: _leave,
    PlanAction.KEEP: _keep,
}


def sample_examples(examples: list[Example], *, n: int, seed: int) -> list[Example]:
    """``n`` of ``examples`` drawn at random with ``random.Random(seed)``
    (all of them when ``n`` is at least their number), in their order — the
    same ``n``, seed and dataset version give the same subset, so a resumed
    run (its config keeps them) drives the same examples."""
    return seeded_sample(examples, n, seed)


def _run_examples(run: Run, limit: int | None) -> list[Example]:
    """The first ``limit`` examples of the run's dataset version (of its
    subset: ``config["split"]`` and ``config["tags"]``; or the seeded sample of
    its config's ``sample``: ``run_eval --sample``), each given the run's one
    dataset row: scoring a finished turn reads the dataset's scorer
    (``example_scorer``), a query per example otherwise, inside the terminal
    event's transaction."""
    examples = subset_examples(
        examples_at(run.dataset_id, run.dataset_version),
        split=run.config.get("split"),
        tags=run.config.get("tags") or (),
    )[: limit if limit else None]
    sample = (run.config or {}).get("sample")
    if isinstance(sample, dict):
        examples = sample_examples(list(examples), n=int(sample["n"]), seed=int(sample["seed"]))
    dataset = run.dataset
    for example in examples:
        example.dataset = dataset
    return examples


def _is_live(turn: Turn) -> bool:
    """A running or waiting turn with a heartbeat younger than ``TURN_STALE_S``."""
    if turn.status not in (TurnStatus.RUNNING, TurnStatus.WAITING) or turn.heartbeat_at is None:
        return False
    return (timezone.now() - turn.heartbeat_at).total_seconds() <= float(settings.TURN_STALE_S)


#: Examples queued per transaction when a run is planned.
PLAN_BATCH = 500


def _queue_fresh(
    *,
    run: Run,
    fresh: Sequence[tuple[int, Example, Prediction | None, int]],
    max_steps: int,
    model: str,
    max_output_tokens: int | None = None,
) -> list[tuple[int, PlannedExample]]:
    """Queue a turn for each ``(slot, example, prediction or None, epoch)`` and give
    each its pessimistic prediction row (stop reason ``error``, wrong), all in
    one transaction and a handful of statements (``turn_create_many``,
    ``bulk_create``). Returns ``(slot, planned example)`` pairs."""
    if run.system_user is None:  # run_start gives every run its system user
        raise ValueError(f"run {run.run_id!r} has no system user: start it with run_start")
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
                    max_output_tokens=max_output_tokens,
                    # an experiment variant's system prompt and temperature
                    agent_options=dict((run.config or {}).get("agent_options") or {}),
                )
                for _, example, _, _ in fresh
            ],
        )
        new_rows, relinked = [], []
        for (_, example, prediction, epoch), turn in zip(fresh, turns, strict=True):
            if prediction is None:
                new_rows.append(
                    Prediction(
                        run=run,
                        example=example,
                        epoch=epoch,
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
    by_key = {(p.example_id, p.epoch): p for p in [*new_rows, *relinked]}
    return [
        (
            index,
            PlannedExample(
                prediction_id=by_key[(example.pk, epoch)].pk,
                turn_id=turn.pk,
                example=example,
                action=PlanAction.FRESH,
                epoch=epoch,
            ),
        )
        for (index, example, _, epoch), turn in zip(fresh, turns, strict=True)
    ]

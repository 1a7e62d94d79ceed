"""Planning a conversation example (docs/evaluating.md#conversation-examples):
one (example, epoch) is one conversation owned by the run's system user, its
turns created one after another as it is driven
(``evaluation.run.conversation_drive``).

The prediction row names the conversation (``Prediction.conversation``) and
its latest turn (``Prediction.turn``), so a resumed run finds where the
conversation stopped: its latest turn is resumed or driven as
``evaluation.run.plan.plan_action`` says for any turn, and the drive goes on
from there — at the first unfinished turn.
"""

from __future__ import annotations

import dataclasses

from django.db import transaction

from evaluation.datasets.conversation_spec import SIMULATED_KEY, TURNS_KEY, conversation_kind
from evaluation.models import Example, Prediction, Run
from turns.models import Conversation, Turn, TurnKind
from turns.services import RETRYABLE_STATUSES, NewTurn, turn_create_many, turn_retry


def first_message(example: Example) -> str | None:
    """The conversation's first user message when the dataset gives it (a
    scripted conversation's first turn, a simulated user's
    ``first_message``); ``None``: the simulator writes it."""
    metadata = example.metadata or {}
    if conversation_kind(metadata) == "turns":
        return str(metadata[TURNS_KEY][0]["user"])
    return (metadata.get(SIMULATED_KEY) or {}).get("first_message") or None


def conversation_open(*, run: Run, example: Example, epoch: int, template: NewTurn) -> tuple[int, int, int]:
    """A new conversation for ``example``'s ``epoch``: the conversation
    (owned by the run's system user), its first turn when the first message
    is known (``first_message``), and the pessimistic prediction row (stop
    reason ``error``, wrong), in one transaction. ``template``: the options
    of every turn of the conversation (its question replaced). Returns
    ``(prediction id, conversation id, turn id or 0 when none yet)``."""
    if run.system_user is None:
        raise ValueError(f"run {run.run_id!r} has no system user: start it with run_start")
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner=run.system_user, title=f"{run.run_id}: {example.external_id} (epoch {epoch})"[:200]
        )
        message = first_message(example)
        turn: Turn | None = None
        if message is not None:
            spec = dataclasses.replace(
                template, question=message, conversation_id=conversation.pk, position=1
            )
            (turn,) = turn_create_many(owner=run.system_user, turns=[spec], kind=TurnKind.EVALUATION)
        prediction = Prediction.objects.create(
            run=run,
            example=example,
            epoch=epoch,
            turn=turn,
            conversation=conversation,
            task_type=example.task_type,
            gold_answer=example.answer,
            stop_reason="error",
            correct=False,
            score=0.0,
            error="the conversation did not finish",
        )
    return prediction.pk, conversation.pk, turn.pk if turn is not None else 0


def conversation_retry(prediction: Prediction) -> None:
    """``--retry-errors`` on a conversation that ended in an error: its
    latest turn gets a new attempt when it failed (a provider outage, say),
    and the row is completed anew — the drive goes on from that turn, or
    asks the simulator again when it was the simulator that failed."""
    with transaction.atomic():
        turn = prediction.turn
        if turn is not None and turn.status in RETRYABLE_STATUSES:
            turn_retry(turn_id=turn.pk)
        Prediction.objects.filter(pk=prediction.pk).update(completed_at=None)


def conversation_failed(prediction: Prediction) -> bool:
    """Whether a completed conversation's row recorded an error or a cancel
    (what ``--retry-errors`` drives again)."""
    return bool(prediction.error) or prediction.stop_reason == "cancelled"

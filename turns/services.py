"""Writes on conversations and turns (HackSoft "services"): create, cancel, resume.

Every change of a turn's status that watchers must see goes through the event
log (``turns.events.event_append_many``) in the same transaction.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agentlab.errors import StateConflict

from .events import NewEvent, event_append_many
from .models import ACTIVE_STATUSES, Conversation, EventType, Turn, TurnKind, TurnOutcome, TurnStatus


def turn_create(
    *,
    owner: AbstractBaseUser,
    question: str,
    conversation: Conversation | None = None,
    kind: str = TurnKind.CHAT,
    context: dict[str, Any] | None = None,
    max_steps: int = 6,
    model: str = "",
) -> Turn:
    """Create a queued turn and its ``turn.queued`` event, in one transaction.

    Raises ``ValueError`` for an empty question or ``max_steps < 1``; nothing
    is written then.
    """
    if not question or not question.strip():
        raise ValueError("a turn needs a non-empty question")
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    with transaction.atomic():
        position = 1
        if conversation is not None:
            position = conversation.turns.count() + 1
        turn = Turn.objects.create(
            owner=owner, conversation=conversation, kind=kind, position=position, question=question,
            context=context or {}, max_steps=max_steps, model=model, status=TurnStatus.QUEUED,
        )
        event_append_many(turn_id=turn.pk, events=[NewEvent(EventType.TURN_QUEUED, {"kind": kind})])
    turn.last_seq = 1
    return turn


def turn_cancel(*, turn_id: int) -> Turn:
    """Ask a turn to stop.

    A queued or interrupted turn is cancelled at once (``turn.cancelled``); a
    running or waiting one gets its cancel flag set, which its driver sees
    within ``CANCEL_POLL_S`` and ends with ``turn.cancelled`` itself. Raises
    ``StateConflict`` for a finished turn, changing nothing.
    """
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if turn.is_terminal:
            raise StateConflict(f"turn {turn_id} has already finished ({turn.status})")
        if turn.status in (TurnStatus.QUEUED, TurnStatus.INTERRUPTED):
            event_append_many(
                turn_id=turn_id,
                events=[NewEvent(EventType.TURN_CANCELLED, {"stop_reason": "cancelled", "steps": turn.steps})],
                turn_fields={"status": TurnStatus.CANCELLED, "outcome": TurnOutcome.CANCELLED,
                             "stop_reason": "cancelled", "cancel_requested": True, "finished_at": timezone.now()},
            )
        else:
            Turn.objects.filter(pk=turn_id).update(cancel_requested=True)
    turn.refresh_from_db()
    return turn


def turn_interrupt(*, turn_id: int, reason: str) -> bool:
    """Mark an active turn whose job is gone as interrupted (``turn.interrupted``).

    Returns ``False`` and writes nothing when the turn is no longer active.
    """
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if turn.status not in ACTIVE_STATUSES:
            return False
        event_append_many(
            turn_id=turn_id,
            events=[NewEvent(EventType.TURN_INTERRUPTED, {"reason": reason, "was": turn.status})],
            turn_fields={"status": TurnStatus.INTERRUPTED},
        )
    return True


def turn_resume(*, turn_id: int) -> Turn:
    """Put an interrupted or failed turn back to ``queued`` (``turn.resumed``).

    The driver that claims it next rebuilds the agent's state from the event
    log and continues at the next seq. Raises ``StateConflict`` for a turn that
    cannot be resumed, changing nothing.
    """
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if not turn.can_resume():
            raise StateConflict(f"turn {turn_id} cannot be resumed from status {turn.status}")
        event_append_many(
            turn_id=turn_id,
            events=[NewEvent(EventType.TURN_RESUMED, {"from": turn.status})],
            turn_fields={"status": TurnStatus.QUEUED, "outcome": "", "stop_reason": "", "cancel_requested": False,
                         "finished_at": None},
        )
    turn.refresh_from_db()
    return turn

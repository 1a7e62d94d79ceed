"""Writes on conversations, and handing their turns to a job (HackSoft "services").

One active turn per conversation: ``turn_start`` and the ``*_and_enqueue``
services lock the conversation row before they check, then enqueue the turn
(``turns.services.enqueue.turn_enqueue``) once the transaction commits.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from common.errors import NotFound, StateConflict
from turns.models import ACTIVE_STATUSES, Conversation, HistoryMode, Turn
from turns.services import enqueue
from turns.services.turns import turn_cancel, turn_continue, turn_create, turn_resume, turn_retry


def turn_start(*, conversation: Conversation, question: str, acting_user: User) -> Turn:
    """Create the next turn of ``conversation`` and run it in the background.

    The turn belongs to the conversation's owner (docs/architecture.md#the-driver) and is handed
    to ``turns.services.enqueue.turn_enqueue`` after the commit. One active turn per
    conversation: the conversation row is locked first, so two concurrent
    starts cannot both see "no active turn" (check-then-act under a lock).

    Raises ``NotFound`` when ``acting_user`` is neither the owner nor staff,
    ``StateConflict`` when the conversation already has a queued, running or
    waiting turn, ``ValueError`` for an empty question; nothing is written then.
    """
    if conversation.owner_id != acting_user.pk and not getattr(acting_user, "is_staff", False):
        raise NotFound(f"conversation {conversation.pk} not found")
    with transaction.atomic():
        locked = Conversation.objects.select_for_update().get(pk=conversation.pk)
        active = locked.turns.filter(status__in=ACTIVE_STATUSES).values_list("pk", flat=True).first()
        if active is not None:
            raise StateConflict(f"conversation {conversation.pk} already has an active turn ({active})")
        turn = turn_create(
            owner=locked.owner,
            question=question,
            conversation=locked,
            max_steps=int(settings.AGENTLAB_MAX_STEPS),
        )
        Conversation.objects.filter(pk=locked.pk).update(updated_at=timezone.now())
        enqueue.turn_enqueue(turn.pk)  # fires after the commit
    return turn


def turn_resume_and_enqueue(*, turn_id: int, acting_user: User | None = None) -> Turn:
    """``turn_resume`` and hand the turn to a job once that commits, keeping
    one active turn per conversation.

    This is what interfaces (API, admin) call; ``turn_resume`` alone only
    changes the state. Raises ``StateConflict`` like ``turn_resume``, and when
    another turn of the same conversation is queued, running or waiting.
    """
    return _requeue_in_conversation(
        turn_id=turn_id, requeue=lambda: turn_resume(turn_id=turn_id, acting_user=acting_user)
    )


def conversation_create(*, owner: User, title: str = "", history: str = "") -> Conversation:
    """Create an empty conversation owned by ``owner``; ``title`` is trimmed
    to 200 characters. ``history``: what each turn is given of the turns
    before it, ``answers`` or ``full`` (``HistoryMode``); ``""`` follows
    ``AGENTLAB_CHAT_HISTORY``. Raises ``ValueError`` naming another value."""
    if history not in ("", *HistoryMode.values):
        raise ValueError(
            f"history must be one of {', '.join(HistoryMode.values)} (or empty), got {history!r}"
        )
    return Conversation.objects.create(owner=owner, title=(title or "").strip()[:200], history=history)


def conversation_delete(*, conversation_id: int) -> None:
    """Delete a conversation with its turns and their events.

    Its active turns are cancelled first (``turn_cancel``): a queued one ends
    at once with ``turn.cancelled``, a running one gets its cancel flag — its
    watchers are told by the doorbell of that event before the rows go, and a
    driver still running finds its turn gone and stops. Predictions that
    point at a deleted turn keep their row (``SET_NULL``). Raises
    ``Conversation.DoesNotExist`` for an unknown conversation.
    """
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
        # Lock every turn row up front, in pk order, in one statement: a
        # driver appends an event by updating its turn row first, so once we
        # hold them no event can slip in between the cancel and the delete
        # (a row inserted then would break the delete's foreign keys), and a
        # fixed lock order leaves no cycle with other lockers. Seen under
        # schemathesis: cancelling turn by turn while drivers appended
        # deadlocked on PostgreSQL.
        rows = list(conversation.turns.select_for_update().order_by("pk").values_list("pk", "status"))
        for turn_id, status in rows:
            if status in ACTIVE_STATUSES:
                turn_cancel(turn_id=turn_id)
        conversation.delete()


def _requeue_in_conversation(*, turn_id: int, requeue: Callable[[], Turn]) -> Turn:
    """Run ``requeue`` — a service that puts the turn back to ``queued`` —
    holding the conversation's row lock, refusing with ``StateConflict`` when
    another turn of the conversation is queued, running or waiting (one
    active turn per conversation); enqueue the turn once that commits."""
    with transaction.atomic():
        turn = Turn.objects.get(pk=turn_id)
        other = _conversation_other_active(turn=turn)
        if other is not None:
            raise StateConflict(f"conversation {turn.conversation_id} already has an active turn ({other})")
        turn = requeue()
        enqueue.turn_enqueue(turn.pk)
    return turn


def _conversation_other_active(*, turn: Turn) -> int | None:
    """Lock the turn's conversation and return the id of another active turn in it, if any."""
    if turn.conversation_id is None:
        return None
    locked = Conversation.objects.select_for_update().get(pk=turn.conversation_id)
    return (
        locked.turns.filter(status__in=ACTIVE_STATUSES)
        .exclude(pk=turn.pk)
        .values_list("pk", flat=True)
        .first()
    )


def turn_retry_and_enqueue(*, turn_id: int, acting_user: User | None = None) -> Turn:
    """``turn_retry`` and hand the turn to a job once that commits.

    Keeps one active turn per conversation: retrying while another turn of
    the same conversation is queued, running or waiting raises
    ``StateConflict`` (the conversation row is locked for the check, as in
    ``turn_start``). Raises ``StateConflict`` like ``turn_retry`` otherwise.
    """
    return _requeue_in_conversation(
        turn_id=turn_id, requeue=lambda: turn_retry(turn_id=turn_id, acting_user=acting_user)
    )


def turn_continue_and_enqueue(*, turn_id: int, extra_steps: int, acting_user: User | None = None) -> Turn:
    """``turn_continue`` and hand the turn to a job once that commits, keeping
    one active turn per conversation (``StateConflict`` otherwise)."""
    return _requeue_in_conversation(
        turn_id=turn_id,
        requeue=lambda: turn_continue(turn_id=turn_id, extra_steps=extra_steps, acting_user=acting_user),
    )

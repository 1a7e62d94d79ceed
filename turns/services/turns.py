"""Writes on turns (HackSoft "services"): create, cancel, interrupt, resume, retry, continue.

Every change of a turn's status that watchers must see goes through the event
log (``turns.events.event_append_many``) in the same transaction. These only
change state; ``turns.services.conversations`` hands turns to a job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agentlab.agent.text import clean_text, json_safe
from common.errors import StateConflict
from turns.attempts import attempt_archive, attempt_of_turn, attempt_reset
from turns.event_types import (
    AttemptRetryData,
    PreviousAttemptData,
    TurnCancelledData,
    TurnInterruptedData,
    TurnQueuedData,
    TurnResumedData,
)
from turns.events import NewEvent, event_append_each, event_append_many
from turns.meta import meta_cancel_by, meta_with_cancel
from turns.models import (
    ACTIVE_STATUSES,
    AttemptReason,
    Conversation,
    EventType,
    Turn,
    TurnAttempt,
    TurnKind,
    TurnOutcome,
    TurnStatus,
)


def turn_create(
    *,
    owner: User,
    question: str,
    conversation: Conversation | None = None,
    kind: str = TurnKind.CHAT,
    context: dict[str, Any] | None = None,
    max_steps: int = 6,
    model: str = "",
    max_output_tokens: int | None = None,
) -> Turn:
    """Create a queued turn and its ``turn.queued`` event, in one transaction.
    ``max_output_tokens`` ``None``: ``AGENTLAB_MAX_OUTPUT_TOKENS`` when driven.

    Raises ``ValueError`` for an empty question, ``max_steps < 1`` or
    ``max_output_tokens < 1``; nothing is written then.
    """
    if not question or not question.strip():
        raise ValueError("a turn needs a non-empty question")
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    if max_output_tokens is not None and max_output_tokens < 1:
        raise ValueError(f"max_output_tokens must be at least 1, got {max_output_tokens}")
    with transaction.atomic():
        position = 1
        if conversation is not None:
            position = conversation.turns.count() + 1
        turn = Turn.objects.create(
            owner=owner,
            conversation=conversation,
            kind=kind,
            position=position,
            question=clean_text(question),
            context=json_safe(context or {}),
            max_steps=max_steps,
            max_output_tokens=max_output_tokens,
            model=model,
            status=TurnStatus.QUEUED,
        )
        event_append_many(
            turn_id=turn.pk, events=[NewEvent(EventType.TURN_QUEUED, TurnQueuedData(kind=kind))]
        )
    turn.last_seq = 1
    return turn


@dataclass(frozen=True)
class NewTurn:
    """One turn for ``turn_create_many``: its question, tool context (JSON),
    step budget, model name, output-token limit (``None``: the setting),
    agent loop options (``Turn.agent_options``), for a replay the turn it
    replays, and for a turn of an evaluation conversation example its
    conversation and position there (``None`` and 1: a turn of its own)."""

    question: str
    context: dict[str, Any]
    max_steps: int
    model: str = ""
    max_output_tokens: int | None = None
    agent_options: dict[str, Any] = field(default_factory=dict)
    #: the recorded turn a replay turn replays (``Turn.replay_of``)
    replay_of_id: int | None = None
    conversation_id: int | None = None
    position: int = 1


def turn_create_many(*, owner: User, turns: Sequence[NewTurn], kind: str = TurnKind.EVALUATION) -> list[Turn]:
    """Create many queued turns (an evaluation run's examples; each in the
    conversation its ``NewTurn`` names, if any) with their ``turn.queued`` events, in one transaction and a
    handful of statements (``bulk_create``, then ``event_append_each``).
    Returns them in order. Raises ``ValueError`` as ``turn_create`` does;
    nothing is written then."""
    for spec in turns:
        if not spec.question or not spec.question.strip():
            raise ValueError("a turn needs a non-empty question")
        if spec.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {spec.max_steps}")
    with transaction.atomic():
        created = Turn.objects.bulk_create(
            [
                Turn(
                    owner=owner,
                    kind=kind,
                    conversation_id=spec.conversation_id,
                    position=spec.position,
                    question=clean_text(spec.question),
                    context=json_safe(spec.context or {}),
                    max_steps=spec.max_steps,
                    max_output_tokens=spec.max_output_tokens,
                    agent_options=json_safe(spec.agent_options or {}),
                    model=spec.model,
                    status=TurnStatus.QUEUED,
                    replay_of_id=spec.replay_of_id,
                )
                for spec in turns
            ]
        )
        event_append_each(
            turn_ids=[t.pk for t in created], event=NewEvent(EventType.TURN_QUEUED, TurnQueuedData(kind=kind))
        )
    for turn in created:
        turn.last_seq = 1
    return created


def turns_set_output_limit(*, turn_ids: Sequence[int], max_output_tokens: int | None) -> int:
    """Give queued turns a new output-token limit (a resumed run's
    ``--max-output-tokens``: a turn truncated under the old one is retried
    with the new). Only queued turns change; returns how many did."""
    return Turn.objects.filter(pk__in=list(turn_ids), status=TurnStatus.QUEUED).update(
        max_output_tokens=max_output_tokens
    )


def username_of(user: User | None) -> str | None:
    """How an event names the user who acted (``None`` for the system)."""
    return user.get_username() if user is not None else None


def turn_cancel(*, turn_id: int, acting_user: User | None = None) -> Turn:
    """Ask a turn to stop.

    A queued or interrupted turn is cancelled at once (``turn.cancelled``); a
    running or waiting one gets its cancel flag set, which its driver sees
    within ``CANCEL_POLL_S`` and ends with ``turn.cancelled`` itself. Who asked
    is kept in ``meta["cancel"]`` and named (``by``) in the ``turn.cancelled``
    event. Raises ``StateConflict`` for a finished turn, changing nothing.
    """
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if turn.is_terminal:
            raise StateConflict(f"turn {turn_id} has already finished ({turn.status})")
        meta = meta_with_cancel(turn.meta, by=username_of(acting_user), at=timezone.now().isoformat())
        if turn.status in (TurnStatus.QUEUED, TurnStatus.INTERRUPTED):
            event_append_many(
                turn_id=turn_id,
                events=[
                    NewEvent(
                        EventType.TURN_CANCELLED,
                        TurnCancelledData(
                            stop_reason="cancelled", steps=turn.steps, by=username_of(acting_user)
                        ),
                    )
                ],
                turn_fields={
                    "status": TurnStatus.CANCELLED,
                    "outcome": TurnOutcome.CANCELLED,
                    "stop_reason": "cancelled",
                    "cancel_requested": True,
                    "finished_at": timezone.now(),
                    "meta": meta,
                },
            )
        else:
            Turn.objects.filter(pk=turn_id).update(cancel_requested=True, meta=meta)
    turn.refresh_from_db()
    return turn


def turn_interrupt(*, turn_id: int, reason: str) -> bool:
    """Mark an active turn whose job is gone as interrupted (``turn.interrupted``).

    A turn whose cancel was asked for (its driver died before it saw the
    flag) is not left to be resumed: it ends at once, ``turn.interrupted``
    then ``turn.cancelled``, status ``cancelled`` — an accepted cancel is
    never lost. Returns ``False`` and writes nothing when the turn is no
    longer active.
    """
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if turn.status not in ACTIVE_STATUSES:
            return False
        events = [NewEvent(EventType.TURN_INTERRUPTED, TurnInterruptedData(reason=reason, was=turn.status))]
        fields: dict[str, Any] = {"status": TurnStatus.INTERRUPTED}
        if turn.cancel_requested:
            by = meta_cancel_by(turn.meta)
            events.append(
                NewEvent(
                    EventType.TURN_CANCELLED,
                    TurnCancelledData(stop_reason="cancelled", steps=turn.steps, by=by),
                )
            )
            fields = {
                "status": TurnStatus.CANCELLED,
                "outcome": TurnOutcome.CANCELLED,
                "stop_reason": "cancelled",
                "finished_at": timezone.now(),
            }
        event_append_many(turn_id=turn_id, events=events, turn_fields=fields)
    return True


def turn_resume(*, turn_id: int, acting_user: User | None = None) -> Turn:
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
            events=[
                NewEvent(
                    EventType.TURN_RESUMED,
                    TurnResumedData({"from": turn.status, "by": username_of(acting_user)}),
                )
            ],
            turn_fields={
                "status": TurnStatus.QUEUED,
                "outcome": "",
                "stop_reason": "",
                "cancel_requested": False,
                "finished_at": None,
            },
        )
    turn.refresh_from_db()
    return turn


#: A retry starts a new attempt; ``turn_resume`` continues the same one.
RETRYABLE_STATUSES = frozenset({TurnStatus.FAILED, TurnStatus.INTERRUPTED, TurnStatus.CANCELLED})


def turn_retry(*, turn_id: int, acting_user: User | None = None) -> Turn:
    """Start a failed, interrupted or cancelled turn over as a new attempt (``attempt.retry``).

    ``turn_resume`` continues the current attempt from its event log; a retry
    instead archives the current attempt's result and puts the turn back to
    ``queued`` with ``attempts`` one higher, so the driver that claims it next
    finds no recorded steps for the new attempt number and starts afresh
    (``recorded_steps`` reads events by their ``attempt``). A turn that never
    started (``attempts == 0``) counts as having had attempt 1.

    In one transaction, under the turn's row lock: the attempt's status,
    outcome, stop reason, answer, evidence, reasoning, clarifying question,
    steps, usage, timings, failure cause/error and finish time become a
    ``TurnAttempt`` row (``turns.attempts.attempt_archive``) and are cleared
    on the turn (``attempt_reset``), and an ``attempt.retry`` event is written with data
    ``{"attempt": new, "from": old status, "previous": {attempt, status,
    outcome, stop_reason}, "by": username | None}``.

    Raises ``StateConflict`` for a turn in any other status, changing nothing;
    ``Turn.DoesNotExist`` for an unknown turn.
    """
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if turn.status not in RETRYABLE_STATUSES:
            raise StateConflict(
                f"turn {turn_id} cannot be retried from status {turn.status}; "
                f"only {', '.join(sorted(RETRYABLE_STATUSES))} turns can"
            )
        _attempt_start_next(turn, reason=AttemptReason.RETRY, acting_user=acting_user)
    turn.refresh_from_db()
    return turn


def turn_continue(*, turn_id: int, extra_steps: int, acting_user: User | None = None) -> Turn:
    """Give a turn that failed with stop reason ``max_steps`` ``extra_steps``
    more steps, as a new attempt that continues from the previous one's
    recorded steps (no LLM call or tool is repeated).

    In one transaction, under the turn's row lock: the attempt is archived
    as ``turn_retry`` does, ended by ``continue``
    (which tells the driver to rebuild the new attempt on top of it, see
    ``turns.driver.replay.attempt_steps``); ``max_steps`` grows by ``extra_steps``;
    ``attempt.retry`` ``{"attempt", "reason": "continue", "extra_steps",
    "max_steps", "previous", "by"}`` is written and the turn is ``queued``.
    The caller enqueues it (``turn_continue_and_enqueue``).

    Raises ``ValueError`` for ``extra_steps < 1``, ``StateConflict`` for a
    turn that is not failed with ``max_steps``; nothing is written then.
    """
    if extra_steps < 1:
        raise ValueError(f"extra_steps must be at least 1, got {extra_steps}")
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if turn.status != TurnStatus.FAILED or turn.stop_reason != "max_steps":
            raise StateConflict(
                f"turn {turn_id} can only be continued after failing with max_steps "
                f"(it is {turn.status}, stop reason {turn.stop_reason or 'none'})"
            )
        max_steps = turn.max_steps + extra_steps
        _attempt_start_next(
            turn,
            reason=AttemptReason.CONTINUE,
            acting_user=acting_user,
            data={"extra_steps": extra_steps, "max_steps": max_steps},
            fields={"max_steps": max_steps},
        )
    turn.refresh_from_db()
    return turn


def _attempt_start_next(
    turn: Turn,
    *,
    reason: str,
    acting_user: User | None,
    data: dict[str, Any] | None = None,
    fields: dict[str, Any] | None = None,
) -> None:
    """Archive ``turn``'s current attempt and queue the next one, in the
    caller's transaction (the turn's row locked): the ``attempt.retry`` event
    ``{"attempt": new, "reason", **data, "from": old status, "by",
    "previous"}`` and the turn's fields reset (``attempt_reset``, the new
    attempt number, ``fields``, the meta the archive left). The one start
    shared by ``turn_retry`` and ``turn_continue``."""
    archived = attempt_of_turn(turn, ended_by=reason)
    previous = archived.number
    meta = attempt_archive(archived, turn.meta)
    event_data = {
        "attempt": previous + 1,
        "reason": reason,
        **(data or {}),
        "from": turn.status,
        "by": username_of(acting_user),
        "previous": _previous(archived),
    }
    event_append_many(
        turn_id=turn.pk,
        events=[NewEvent(EventType.ATTEMPT_RETRY, AttemptRetryData(**event_data))],  # type: ignore[typeddict-item]
        turn_fields={**attempt_reset(reason), "attempts": previous + 1, **(fields or {}), "meta": meta},
    )


def _previous(archived: TurnAttempt) -> PreviousAttemptData:
    return PreviousAttemptData(
        attempt=archived.number,
        status=archived.status,
        outcome=archived.outcome,
        stop_reason=archived.stop_reason,
    )

"""Writes on conversations and turns (HackSoft "services"): create, cancel, resume.

Every change of a turn's status that watchers must see goes through the event
log (``turns.events.event_append_many``) in the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from common.errors import StateConflict

from .events import NewEvent, event_append_each, event_append_many
from .models import (
    ACTIVE_STATUSES,
    Approval,
    Conversation,
    EventType,
    Turn,
    TurnKind,
    TurnOutcome,
    TurnStatus,
)

logger = logging.getLogger(__name__)


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
            owner=owner,
            conversation=conversation,
            kind=kind,
            position=position,
            question=question,
            context=context or {},
            max_steps=max_steps,
            model=model,
            status=TurnStatus.QUEUED,
        )
        event_append_many(turn_id=turn.pk, events=[NewEvent(EventType.TURN_QUEUED, {"kind": kind})])
    turn.last_seq = 1
    return turn


@dataclass(frozen=True)
class NewTurn:
    """One turn for ``turn_create_many``: its question, tool context (JSON),
    step budget and model name."""

    question: str
    context: dict[str, Any]
    max_steps: int
    model: str = ""


def turn_create_many(
    *, owner: AbstractBaseUser, turns: Sequence[NewTurn], kind: str = TurnKind.EVALUATION
) -> list[Turn]:
    """Create many queued turns without a conversation (an evaluation run's
    examples) with their ``turn.queued`` events, in one transaction and a
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
                    position=1,
                    question=spec.question,
                    context=spec.context or {},
                    max_steps=spec.max_steps,
                    model=spec.model,
                    status=TurnStatus.QUEUED,
                )
                for spec in turns
            ]
        )
        event_append_each(
            turn_ids=[t.pk for t in created], event=NewEvent(EventType.TURN_QUEUED, {"kind": kind})
        )
    for turn in created:
        turn.last_seq = 1
    return created


def _by(user: AbstractBaseUser | None) -> str | None:
    """How an event names the user who acted (``None`` for the system)."""
    return user.get_username() if user is not None else None


def turn_cancel(*, turn_id: int, acting_user: AbstractBaseUser | None = None) -> Turn:
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
        meta = {**(turn.meta or {}), "cancel": {"by": _by(acting_user), "at": timezone.now().isoformat()}}
        if turn.status in (TurnStatus.QUEUED, TurnStatus.INTERRUPTED):
            event_append_many(
                turn_id=turn_id,
                events=[
                    NewEvent(
                        EventType.TURN_CANCELLED,
                        {"stop_reason": "cancelled", "steps": turn.steps, "by": _by(acting_user)},
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
        events = [NewEvent(EventType.TURN_INTERRUPTED, {"reason": reason, "was": turn.status})]
        fields: dict[str, Any] = {"status": TurnStatus.INTERRUPTED}
        if turn.cancel_requested:
            by = ((turn.meta or {}).get("cancel") or {}).get("by")
            events.append(
                NewEvent(
                    EventType.TURN_CANCELLED, {"stop_reason": "cancelled", "steps": turn.steps, "by": by}
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


def turn_resume(*, turn_id: int, acting_user: AbstractBaseUser | None = None) -> Turn:
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
            events=[NewEvent(EventType.TURN_RESUMED, {"from": turn.status, "by": _by(acting_user)})],
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


def turn_retry(*, turn_id: int, acting_user: AbstractBaseUser | None = None) -> Turn:
    """Start a failed, interrupted or cancelled turn over as a new attempt (``attempt.retry``).

    ``turn_resume`` continues the current attempt from its event log; a retry
    instead archives the current attempt's result and puts the turn back to
    ``queued`` with ``attempts`` one higher, so the driver that claims it next
    finds no recorded steps for the new attempt number and starts afresh
    (``recorded_steps`` reads events by their ``attempt``). A turn that never
    started (``attempts == 0``) counts as having had attempt 1.

    In one transaction, under the turn's row lock: the attempt's status,
    outcome, stop reason, answer, evidence, reasoning, clarifying question,
    steps, usage, timings, failure cause/error and finish time are appended to
    ``meta["attempts"]`` (a list of dicts, oldest first) and cleared on the
    turn, and an ``attempt.retry`` event is written with data
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
        previous = max(turn.attempts, 1)
        meta = dict(turn.meta or {})
        archived = {
            "attempt": previous,
            "reason": "retry",
            "status": turn.status,
            "outcome": turn.outcome,
            "stop_reason": turn.stop_reason,
            "answer": turn.answer,
            "evidence": turn.evidence,
            "reasoning": turn.reasoning,
            "clarifying_question": turn.clarifying_question,
            "steps": turn.steps,
            "usage": turn.usage or {},
            "timings": turn.timings or {},
            "failure_cause": meta.pop("failure_cause", None),
            "failure_error": meta.pop("failure_error", None),
            "finished_at": turn.finished_at.isoformat() if turn.finished_at else None,
        }
        meta["attempts"] = [*meta.get("attempts", []), archived]
        meta.pop("retry_context", None)  # the same question again, afresh
        meta.pop("review", None)
        by = acting_user.get_username() if acting_user is not None else None
        event_append_many(
            turn_id=turn_id,
            events=[
                NewEvent(
                    EventType.ATTEMPT_RETRY,
                    {
                        "attempt": previous + 1,
                        "reason": "retry",
                        "from": turn.status,
                        "by": by,
                        "previous": {k: archived[k] for k in ("attempt", "status", "outcome", "stop_reason")},
                    },
                )
            ],
            turn_fields={
                "status": TurnStatus.QUEUED,
                "attempts": previous + 1,
                "phase": "",
                "outcome": "",
                "stop_reason": "",
                "answer": "",
                "evidence": "",
                "reasoning": "",
                "clarifying_question": "",
                "steps": 0,
                "usage": {},
                "timings": {},
                "meta": meta,
                "cancel_requested": False,
                "finished_at": None,
            },
        )
    turn.refresh_from_db()
    return turn


# --- starting, resuming and sweeping background turns (issue 4) -----------------


def turn_start(*, conversation: Conversation, question: str, acting_user: AbstractBaseUser) -> Turn:
    """Create the next turn of ``conversation`` and run it in the background.

    The turn belongs to the conversation's owner (DESIGN.md §8) and is handed
    to ``turns.jobs.turn_enqueue`` after the commit. One active turn per
    conversation: the conversation row is locked first, so two concurrent
    starts cannot both see "no active turn" (check-then-act under a lock).

    Raises ``NotFound`` when ``acting_user`` is neither the owner nor staff,
    ``StateConflict`` when the conversation already has a queued, running or
    waiting turn, ``ValueError`` for an empty question; nothing is written then.
    """
    from django.conf import settings

    from common.errors import NotFound

    from .jobs import turn_enqueue

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
        turn_enqueue(turn.pk)  # fires after the commit
    return turn


def turn_resume_and_enqueue(*, turn_id: int, acting_user: AbstractBaseUser | None = None) -> Turn:
    """``turn_resume`` and hand the turn to a job once that commits, keeping
    one active turn per conversation.

    This is what interfaces (API, admin) call; ``turn_resume`` alone only
    changes the state. Raises ``StateConflict`` like ``turn_resume``, and when
    another turn of the same conversation is queued, running or waiting.
    """
    return _requeue_in_conversation(
        turn_id=turn_id, requeue=lambda: turn_resume(turn_id=turn_id, acting_user=acting_user)
    )


def turns_sweep_stale(*, stale_s: float) -> int:
    """Mark running or waiting turns whose heartbeat is older than ``stale_s``
    seconds (or missing) as interrupted, each with a ``turn.interrupted`` event.

    Each candidate is re-checked under its row lock before it is marked, so a
    driver that wrote a heartbeat after the first read is left alone. Safe to
    run from several processes at once. Returns how many turns were marked.
    (healthchecks ``sendalerts``: select candidates, then act under a lock.)
    """
    from datetime import timedelta

    swept = (TurnStatus.RUNNING, TurnStatus.WAITING)
    cutoff = timezone.now() - timedelta(seconds=stale_s)
    stale = Q(status__in=swept) & (Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
    return sum(
        _interrupt_if(turn_id=turn_id, still=stale, reason=f"no heartbeat for {stale_s:g} s")
        for turn_id in list(Turn.objects.filter(stale).values_list("pk", flat=True))
    )


def _interrupt_if(*, turn_id: int, still: Q, reason: str) -> bool:
    """``turn_interrupt`` the turn if it still matches ``still`` once its row
    is locked: a candidate read earlier may have moved on since (a heartbeat
    written, a new claim). Returns whether it was marked."""
    with transaction.atomic():
        if not list(Turn.objects.select_for_update().filter(still, pk=turn_id).values_list("pk")):
            return False
        return turn_interrupt(turn_id=turn_id, reason=reason)


def turns_requeue_lost(*, older_than_s: float) -> list[int]:
    """Hand chat turns that have been ``queued`` for more than ``older_than_s``
    seconds to a job again (``turns.jobs.turn_enqueue``); return their ids.

    A queued turn is lost when its hand-over was: the broker refused the
    message after the commit, or the server process that was to drive it
    inline stopped first. Nothing else would ever claim it. Handing it over
    twice is harmless — the driver's claim is conditional, so the later
    delivery does nothing — and each turn is handed over at most once per
    ``older_than_s``: the conditional ``UPDATE`` that picks it (safe with
    several sweepers at once) also moves its ``updated_at`` to now. A queued
    turn's ``updated_at`` is the time it was queued: nothing writes to it
    while it waits. Evaluation turns are left alone; ``run_eval`` drives them
    itself and resumes them on its next invocation.
    """
    from datetime import timedelta

    from .jobs import turn_enqueue

    now = timezone.now()
    lost = Turn.objects.filter(
        status=TurnStatus.QUEUED, kind=TurnKind.CHAT, updated_at__lt=now - timedelta(seconds=older_than_s)
    )
    requeued = []
    for turn_id in list(lost.values_list("pk", flat=True)[:REQUEUE_BATCH]):
        with transaction.atomic():
            if lost.filter(pk=turn_id).update(updated_at=now):
                turn_enqueue(turn_id)  # after the commit
                requeued.append(turn_id)
    return requeued


#: The most lost turns one sweep hands over again (the next sweep takes more).
REQUEUE_BATCH = 500


def turns_interrupt_gone(*, job_is_gone: Callable[[str], bool]) -> int:
    """Mark running or waiting turns whose driver is known to be dead as
    interrupted now, without waiting for their heartbeat to go stale:
    ``job_is_gone(job_id)`` says so (``turns.jobs.local_job_is_gone``: the
    inline executor or ``run_eval`` of a process of this machine that
    exited). Each turn is re-checked under its row lock, still held by that
    job. Returns how many were marked."""
    active = Q(status__in=(TurnStatus.RUNNING, TurnStatus.WAITING)) & ~Q(job_id="")
    return sum(
        _interrupt_if(
            turn_id=turn_id, still=active & Q(job_id=job_id), reason=f"its driver ({job_id}) is gone"
        )
        for turn_id, job_id in list(Turn.objects.filter(active).values_list("pk", "job_id"))
        if job_is_gone(job_id)
    )


@dataclass(frozen=True)
class SweepResult:
    """What one sweep did: turns marked interrupted, turns handed over again."""

    interrupted: int
    requeued: int


def turns_sweep(*, stale_s: float) -> SweepResult:
    """The periodic sweep (Celery beat, the inline executor, server start,
    ``manage.py sweep_turns``): ``turns_interrupt_gone`` for inline drivers
    of this machine that exited, ``turns_sweep_stale`` with ``stale_s``
    seconds, then ``turns_requeue_lost`` with the same age."""
    from .jobs import local_job_is_gone

    interrupted = turns_interrupt_gone(job_is_gone=local_job_is_gone)
    interrupted += turns_sweep_stale(stale_s=stale_s)
    requeued = turns_requeue_lost(older_than_s=stale_s)
    if requeued:
        logger.warning(
            "handed %d turn(s) queued for more than %g s to a job again: %s",
            len(requeued),
            stale_s,
            requeued[:20],
        )
    return SweepResult(interrupted=interrupted, requeued=len(requeued))


# --- conversations, retries and approval decisions for the API and chat pages (issue 5) ---


def conversation_create(*, owner: AbstractBaseUser, title: str = "") -> Conversation:
    """Create an empty conversation owned by ``owner``; ``title`` is trimmed to 200 characters."""
    return Conversation.objects.create(owner=owner, title=(title or "").strip()[:200])


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
    from .jobs import turn_enqueue

    with transaction.atomic():
        turn = Turn.objects.get(pk=turn_id)
        other = _conversation_other_active(turn=turn)
        if other is not None:
            raise StateConflict(f"conversation {turn.conversation_id} already has an active turn ({other})")
        turn = requeue()
        turn_enqueue(turn.pk)
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


def turn_retry_and_enqueue(*, turn_id: int, acting_user: AbstractBaseUser | None = None) -> Turn:
    """``turn_retry`` and hand the turn to a job once that commits.

    Keeps one active turn per conversation: retrying while another turn of
    the same conversation is queued, running or waiting raises
    ``StateConflict`` (the conversation row is locked for the check, as in
    ``turn_start``). Raises ``StateConflict`` like ``turn_retry`` otherwise.
    """
    return _requeue_in_conversation(
        turn_id=turn_id, requeue=lambda: turn_retry(turn_id=turn_id, acting_user=acting_user)
    )


def approval_decide(*, approval_id: int, approve: bool, acting_user: AbstractBaseUser) -> Approval:
    """Approve or reject a pending approval; exactly one decision counts.

    The decision is a conditional update (``status = pending`` and the
    deadline, if any, not passed), so of two concurrent decisions one updates
    the row and the other finds nothing to update and gets ``StateConflict``
    (healthchecks ``sendalerts``). The winner appends ``approval.resolved``
    (``{"approval_id", "status", "by", "tool"}``) in the same transaction; the
    driver waiting on the approval reads the row. Raises ``NotFound`` for an
    unknown approval, ``StateConflict`` for one already decided or expired.
    """
    from common.errors import NotFound

    from .models import ApprovalStatus

    now = timezone.now()
    status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
    with transaction.atomic():
        found = Approval.objects.filter(pk=approval_id).values_list("turn_id", flat=True).first()
        if found is None:
            raise NotFound(f"approval {approval_id} not found")
        # Lock the turn first: a turn that ended some other way (cancelled,
        # failed) takes no decision, and it cannot end while we decide.
        turn = Turn.objects.select_for_update().get(pk=found)
        open_ = Q(pk=approval_id, status=ApprovalStatus.PENDING) & (
            Q(deadline__isnull=True) | Q(deadline__gt=now)
        )
        updated = 0
        if not turn.is_terminal:
            updated = Approval.objects.filter(open_).update(
                status=status, decided_by=acting_user, decided_at=now
            )
        approval = Approval.objects.get(pk=approval_id)
        if updated != 1:
            if approval.status == ApprovalStatus.PENDING and turn.is_terminal:
                raise StateConflict(
                    f"approval {approval_id} cannot be decided: its turn has finished ({turn.status})"
                )
            state = approval.status if approval.status != ApprovalStatus.PENDING else "expired"
            raise StateConflict(f"approval {approval_id} cannot be decided: it is {state}")
        event_append_many(
            turn_id=approval.turn_id,
            events=[
                NewEvent(
                    EventType.APPROVAL_RESOLVED,
                    {
                        "approval_id": approval.pk,
                        "status": status,
                        "by": acting_user.get_username(),
                        "tool": (approval.tool_call or {}).get("name"),
                    },
                )
            ],
        )
    return approval


def turn_continue(*, turn_id: int, extra_steps: int, acting_user: AbstractBaseUser | None = None) -> Turn:
    """Give a turn that failed with stop reason ``max_steps`` ``extra_steps``
    more steps, as a new attempt that continues from the previous one's
    recorded steps (no LLM call or tool is repeated).

    In one transaction, under the turn's row lock: the attempt is archived in
    ``meta["attempts"]`` as ``turn_retry`` does, with ``reason: "continue"``
    (which tells the driver to rebuild the new attempt on top of it, see
    ``turns.driver.attempt_steps``); ``max_steps`` grows by ``extra_steps``;
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
        previous = max(turn.attempts, 1)
        meta = dict(turn.meta or {})
        archived = {
            "attempt": previous,
            "reason": "continue",
            "status": turn.status,
            "outcome": turn.outcome,
            "stop_reason": turn.stop_reason,
            "answer": turn.answer,
            "evidence": turn.evidence,
            "reasoning": turn.reasoning,
            "steps": turn.steps,
            "max_steps": turn.max_steps,
            "usage": turn.usage or {},
            "timings": turn.timings or {},
            "failure_cause": meta.pop("failure_cause", None),
            "failure_error": meta.pop("failure_error", None),
            "finished_at": turn.finished_at.isoformat() if turn.finished_at else None,
        }
        meta["attempts"] = [*meta.get("attempts", []), archived]
        max_steps = turn.max_steps + extra_steps
        event_append_many(
            turn_id=turn_id,
            events=[
                NewEvent(
                    EventType.ATTEMPT_RETRY,
                    {
                        "attempt": previous + 1,
                        "reason": "continue",
                        "extra_steps": extra_steps,
                        "max_steps": max_steps,
                        "from": turn.status,
                        "by": _by(acting_user),
                        "previous": {k: archived[k] for k in ("attempt", "status", "outcome", "stop_reason")},
                    },
                )
            ],
            turn_fields={
                "status": TurnStatus.QUEUED,
                "attempts": previous + 1,
                "max_steps": max_steps,
                "phase": "",
                "outcome": "",
                "stop_reason": "",
                "usage": {},
                "timings": {},
                "meta": meta,
                "cancel_requested": False,
                "finished_at": None,
            },
        )
    turn.refresh_from_db()
    return turn


def turn_continue_and_enqueue(
    *, turn_id: int, extra_steps: int, acting_user: AbstractBaseUser | None = None
) -> Turn:
    """``turn_continue`` and hand the turn to a job once that commits, keeping
    one active turn per conversation (``StateConflict`` otherwise)."""
    return _requeue_in_conversation(
        turn_id=turn_id,
        requeue=lambda: turn_continue(turn_id=turn_id, extra_steps=extra_steps, acting_user=acting_user),
    )

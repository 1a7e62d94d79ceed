"""Ending a turn: map the loop's stop reason to a terminal event and write it
(docs/architecture.md#the-turn-lifecycle)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentlab.agent.loop import LoopResult
from agentlab.agent.text import safe_fields

# called through the module, so that a test can break every write of the driver at once
from turns import events as event_log
from turns.driver.policies import TurnPolicy
from turns.event_types import (
    PhaseData,
    TurnAnsweredData,
    TurnAskedData,
    TurnCancelledData,
    TurnFailedData,
    TurnInterruptedData,
)
from turns.events import NewEvent
from turns.meta import meta_with_answer_type, meta_with_failure
from turns.models import EventType, Turn, TurnOutcome, TurnPhase, TurnStatus

_FAILED_STOPS = {
    "empty_answer",
    "length",
    "max_steps",
    "timeout",
    "context_overflow",
    "provider_error",
    "error",
}


def finish_fields(result: LoopResult) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Map a loop result to (terminal event type, its data, turn fields).

    final → succeeded/answered; asked → succeeded/asked; approval_rejected →
    cancelled/rejected; cancelled and approval_required → cancelled/cancelled;
    empty_answer, length, max_steps, timeout, context_overflow, provider_error, error →
    failed/failed with the stop reason as the cause (``length``: the final
    answer was cut by the output-token limit; what was written is kept as the
    event's ``partial_answer``, not as the turn's answer).
    """
    stop = result.stop_reason
    steps = result.steps_used
    fields: dict[str, Any] = {
        "stop_reason": stop,
        "steps": steps,
        "usage": result.usage.to_dict(),
        "phase": TurnPhase.FINISH,
        "finished_at": timezone.now(),
    }
    if stop == "final":
        fields.update(
            status=TurnStatus.SUCCEEDED,
            outcome=TurnOutcome.ANSWERED,
            answer=result.answer,
            evidence=result.evidence,
            reasoning=result.reasoning,
        )
        answered = TurnAnsweredData(
            stop_reason=stop,
            steps=steps,
            answer=result.answer,
            evidence=result.evidence,
            reasoning=result.reasoning,
        )
        if result.answer_type:
            answered["answer_type"] = result.answer_type
        return EventType.TURN_ANSWERED, dict(answered), fields
    if stop == "asked":
        fields.update(
            status=TurnStatus.SUCCEEDED, outcome=TurnOutcome.ASKED, clarifying_question=result.question or ""
        )
        asked = TurnAskedData(stop_reason=stop, steps=steps, question=result.question or "")
        return EventType.TURN_ASKED, dict(asked), fields
    cancelled = TurnCancelledData(stop_reason=stop, steps=steps)
    if stop == "approval_rejected":
        fields.update(status=TurnStatus.CANCELLED, outcome=TurnOutcome.REJECTED)
        cancelled["reason"] = "a human rejected the approval"
        return EventType.TURN_CANCELLED, dict(cancelled), fields
    if stop in ("cancelled", "approval_required"):
        fields.update(status=TurnStatus.CANCELLED, outcome=TurnOutcome.CANCELLED)
        if result.pending_call is not None:
            cancelled["tool"] = result.pending_call.name
        return EventType.TURN_CANCELLED, dict(cancelled), fields
    cause = stop if stop in _FAILED_STOPS else "error"
    fields.update(status=TurnStatus.FAILED, outcome=TurnOutcome.FAILED)
    failed = TurnFailedData(stop_reason=stop, steps=steps, cause=cause, error=result.error or "")
    if stop == "length":
        failed["partial_answer"] = result.partial_answer
    return EventType.TURN_FAILED, dict(failed), fields


def finish_write(
    *,
    turn_id: int,
    event_type: str,
    data: dict[str, Any],
    fields: dict[str, Any],
    timings: dict[str, int],
    meta: dict[str, Any],
    pending: Sequence[NewEvent] = (),
    policy: TurnPolicy,
    holder: str,
) -> None:
    """Write the terminal event (after any ``pending`` step events) and the
    turn's final fields in one transaction. ``timings`` and ``meta`` are the
    turn's values as claimed: only the driver that holds the turn writes them."""
    if event_type == EventType.TURN_FAILED:
        meta = dict(meta_with_failure(meta, cause=data.get("cause"), error=data.get("error")))
    elif event_type == EventType.TURN_ANSWERED:
        meta = dict(meta_with_answer_type(meta, data.get("answer_type")))
    else:
        meta = dict(meta)
    # cleaned here, not only in the append: the policy scores these very values
    turn_fields = safe_fields({**fields, "meta": meta, "timings": timings})
    with transaction.atomic():
        event_log.event_append_many(
            turn_id=turn_id,
            events=[
                *pending,
                NewEvent(EventType.PHASE, PhaseData(phase=TurnPhase.FINISH)),
                NewEvent(event_type, data),
            ],
            turn_fields=turn_fields,
            holder=holder,
        )
        policy.on_finish(turn_id=turn_id, turn_fields=turn_fields)


def finish_unexpected(
    *,
    turn_id: int,
    error: str,
    usage: dict[str, Any],
    steps: int,
    timings: dict[str, int],
    meta: dict[str, Any],
    pending: list[NewEvent],
    pending_fields: dict[str, Any],
    policy: TurnPolicy,
    holder: str,
) -> None:
    """End a turn whose driver itself raised; only if it is still ours."""
    if not Turn.objects.filter(
        pk=turn_id, job_id=holder, status__in=(TurnStatus.RUNNING, TurnStatus.WAITING)
    ).exists():
        return
    fields = {
        **pending_fields,
        "status": TurnStatus.FAILED,
        "outcome": TurnOutcome.FAILED,
        "stop_reason": "error",
        "phase": TurnPhase.FINISH,
        "finished_at": timezone.now(),
        "usage": usage,
        "steps": steps,
    }
    finish_write(
        turn_id=turn_id,
        event_type=EventType.TURN_FAILED,
        data=dict(TurnFailedData(stop_reason="error", steps=steps, cause="error", error=error)),
        fields=fields,
        timings=timings,
        meta=meta,
        pending=pending,
        policy=policy,
        holder=holder,
    )


def finish_interrupted(
    *,
    reason: str,
    turn_id: int,
    usage: dict[str, Any],
    steps: int,
    timings: dict[str, int],
    pending: list[NewEvent],
    pending_fields: dict[str, Any],
    holder: str,
) -> bool:
    """End a turn whose driver lost the database mid-turn (a restart, a
    network cut) as ``interrupted`` — resumable — rather than failed: its
    step events held back for the finishing write (``pending``: a final
    answer, say) are written first, so a resume reuses them and no answer
    is lost. Only if the turn is still held by ``holder``; returns whether
    it was written. Raises the database's error while it is still down (the
    sweeper then marks the turn interrupted once its heartbeat is stale)."""
    fields = {**pending_fields, "status": TurnStatus.INTERRUPTED, "usage": usage, "steps": steps}
    try:
        event_log.event_append_many(
            turn_id=turn_id,
            events=[
                *pending,
                NewEvent(EventType.TURN_INTERRUPTED, TurnInterruptedData(reason=reason, was="running")),
            ],
            turn_fields={**safe_fields(fields), "timings": timings},
            holder=holder,
        )
    except event_log.TurnNotHeld:
        return False
    return True

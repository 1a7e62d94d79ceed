"""Ending a turn (docs/architecture.md#the-turn-lifecycle): map the loop's
stop reason to a terminal event and write it (``finish_fields``,
``finish_append`` through the group-commit writer, ``finish_write`` on the
calling thread); what a driven turn ended with (``DriveResult``); and the
ends the driver writes when a turn cannot finish normally: the database
failed under it (``finish_after_outage``: interrupted, resumable) or the
driver itself raised (``finish_after_error``: failed, the error recorded).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentlab.agent.loop import LoopResult
from agentlab.agent.text import safe_fields
from common.db import is_connection_error

# called through the module, so that a test can break every write of the driver at once
from turns import events as event_log
from turns.driver.context import DriveContext
from turns.driver.record import Recorder
from turns.driver.writer import events_write
from turns.event_types import (
    PhaseData,
    TurnAnsweredData,
    TurnAskedData,
    TurnCancelledData,
    TurnFailedData,
    TurnInterruptedData,
)
from turns.events import NewEvent, TurnNotHeld
from turns.meta import meta_with_answer_type, meta_with_failure
from turns.models import EventType, Turn, TurnOutcome, TurnPhase, TurnStatus

logger = logging.getLogger(__name__)

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
    cancelled/rejected; cancelled, approval_required and a replay's
    replay_diverged / replay_unsafe → cancelled/cancelled (the tool named);
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
    if stop in ("cancelled", "approval_required", "replay_diverged", "replay_unsafe"):
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


def finish_values(
    *,
    event_type: str,
    data: dict[str, Any],
    fields: dict[str, Any],
    timings: dict[str, int],
    meta: dict[str, Any],
    pending: Sequence[NewEvent] = (),
) -> tuple[list[NewEvent], dict[str, Any]]:
    """The terminal write's events (any ``pending`` step events, ``phase:
    finish``, the terminal event) and the turn's final fields. ``timings``
    and ``meta`` are the turn's values as claimed: only the driver that holds
    the turn writes them."""
    if event_type == EventType.TURN_FAILED:
        meta = dict(meta_with_failure(meta, cause=data.get("cause"), error=data.get("error")))
    elif event_type == EventType.TURN_ANSWERED:
        meta = dict(meta_with_answer_type(meta, data.get("answer_type")))
    else:
        meta = dict(meta)
    # cleaned here, not only in the append: the policy scores these very values
    turn_fields = safe_fields({**fields, "meta": meta, "timings": timings})
    events = [
        *pending,
        NewEvent(EventType.PHASE, PhaseData(phase=TurnPhase.FINISH)),
        NewEvent(event_type, data),
    ]
    return events, turn_fields


def finish_write(ctx: DriveContext, **values: Any) -> None:
    """Write the terminal event and the turn's final fields (``finish_values``
    of ``values``) in one transaction on this thread, the policy's
    ``on_finish`` in it."""
    events, turn_fields = finish_values(**values)
    with transaction.atomic():
        event_log.event_append_many(
            turn_id=ctx.turn_id, events=events, turn_fields=turn_fields, holder=ctx.holder
        )
        ctx.policy.on_finish(turn_id=ctx.turn_id, turn_fields=turn_fields)


async def finish_append(ctx: DriveContext, **values: Any) -> None:
    """``finish_write`` through the drive's group-commit writer
    (``turns.driver.writer.events_write``): the terminal event, the turn's final
    fields and the policy's ``on_finish`` commit together, maybe in one
    transaction with other turns' writes; returns once durable."""
    events, turn_fields = finish_values(**values)
    await events_write(
        ctx.db,
        turn_id=ctx.turn_id,
        events=events,
        turn_fields=turn_fields,
        holder=ctx.holder,
        then=functools.partial(ctx.policy.on_finish, turn_id=ctx.turn_id, turn_fields=turn_fields),
    )


def finish_unexpected(
    ctx: DriveContext,
    *,
    error: str,
    usage: dict[str, Any],
    steps: int,
    timings: dict[str, int],
    meta: dict[str, Any],
    pending: list[NewEvent],
    pending_fields: dict[str, Any],
) -> None:
    """End a turn whose driver itself raised; only if it is still ours."""
    if not Turn.objects.filter(
        pk=ctx.turn_id, job_id=ctx.holder, status__in=(TurnStatus.RUNNING, TurnStatus.WAITING)
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
        ctx,
        event_type=EventType.TURN_FAILED,
        data=dict(TurnFailedData(stop_reason="error", steps=steps, cause="error", error=error)),
        fields=fields,
        timings=timings,
        meta=meta,
        pending=pending,
    )


def finish_interrupted(
    ctx: DriveContext,
    *,
    reason: str,
    usage: dict[str, Any],
    steps: int,
    timings: dict[str, int],
    pending: list[NewEvent],
    pending_fields: dict[str, Any],
) -> bool:
    """End a turn whose driver lost the database mid-turn (a restart, a
    network cut) as ``interrupted`` — resumable — rather than failed: its
    step events held back for the finishing write (``pending``: a final
    answer, say) are written first, so a resume reuses them and no answer
    is lost. Only if the turn is still held by ``ctx.holder``; returns whether
    it was written. Raises the database's error while it is still down (the
    sweeper then marks the turn interrupted once its heartbeat is stale)."""
    fields = {**pending_fields, "status": TurnStatus.INTERRUPTED, "usage": usage, "steps": steps}
    try:
        event_log.event_append_many(
            turn_id=ctx.turn_id,
            events=[
                *pending,
                NewEvent(EventType.TURN_INTERRUPTED, TurnInterruptedData(reason=reason, was="running")),
            ],
            turn_fields={**safe_fields(fields), "timings": timings},
            holder=ctx.holder,
        )
    except event_log.TurnNotHeld:
        return False
    return True


@dataclass(frozen=True)
class DriveResult:
    """What a driven turn ended with (the same values are on the turn row)."""

    turn_id: int
    status: str
    outcome: str
    stop_reason: str
    answer: str
    evidence: str
    reasoning: str
    steps: int
    usage: dict[str, Any]
    error: str | None
    latency_ms: int

    @classmethod
    def errored(
        cls, *, turn_id: int, status: str, outcome: str, recorder: Recorder, error: str, latency_ms: int
    ) -> DriveResult:
        """The result of a turn the driver could not finish (it raised, or
        the database failed under it): stop reason ``error``, no answer, the
        steps and usage ``recorder`` had."""
        return cls(
            turn_id=turn_id,
            status=status,
            outcome=outcome,
            stop_reason="error",
            answer="",
            evidence="",
            reasoning="",
            steps=recorder.steps,
            usage=recorder.usage.to_dict(),
            error=error,
            latency_ms=latency_ms,
        )


async def finish_after_error(
    ctx: DriveContext,
    exc: Exception,
    *,
    recorder: Recorder,
    timings: dict[str, int],
    meta: dict[str, Any],
) -> DriveResult:
    """End a turn whose driver raised ``exc``: a database outage interrupts
    it (``finish_after_outage``); a turn swept and resumed elsewhere, or
    deleted with its conversation, is logged and left alone; anything else
    fails it with the error recorded (``finish_unexpected``), best effort.
    ``timings`` already holds ``total_ms``."""
    turn_id = ctx.turn_id
    if is_connection_error(exc):
        return await finish_after_outage(ctx, exc, recorder=recorder, timings=timings)
    if isinstance(exc, TurnNotHeld | Turn.DoesNotExist):
        # swept and resumed elsewhere, or deleted with its conversation:
        # not a failure of this turn, and nothing more to write
        logger.warning("turn %s: driver stopped: %s", turn_id, exc)
    else:
        logger.exception("turn %s: driver failed", turn_id)
    error = f"{type(exc).__name__}: {exc}"
    try:
        await ctx.db.run(
            finish_unexpected,
            ctx,
            error=error,
            usage=recorder.usage.to_dict(),
            steps=recorder.steps,
            timings=timings,
            meta=meta,
            pending=recorder.pending,
            pending_fields=recorder.pending_fields,
        )
    except Exception:
        logger.exception("turn %s: could not record the failure", turn_id)
    return DriveResult.errored(
        turn_id=turn_id,
        status=TurnStatus.FAILED,
        outcome=TurnOutcome.FAILED,
        recorder=recorder,
        error=error,
        latency_ms=timings["total_ms"],
    )


#: How often, and how far apart (seconds), a driver that lost the database
#: tries to mark its turn interrupted before leaving that to the sweeper.
OUTAGE_WRITE_TRIES = 3
OUTAGE_WRITE_PAUSE_S = 1.0


async def finish_after_outage(
    ctx: DriveContext,
    exc: Exception,
    *,
    recorder: Recorder,
    timings: dict[str, int],
) -> DriveResult:
    """The database failed under the turn (a restart, a network cut): end it
    ``interrupted`` — resumable, with the steps it had held back — not
    failed (``finish_interrupted``). The database may still be down: a few
    tries, then the turn stays ``running`` for the sweeper to mark
    interrupted once its heartbeat is stale. Either way it resumes."""
    turn_id = ctx.turn_id
    error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    logger.warning("turn %s: the database failed under it; interrupting: %s", turn_id, error)
    for attempt in range(OUTAGE_WRITE_TRIES):
        if attempt:
            await asyncio.sleep(OUTAGE_WRITE_PAUSE_S)
        try:
            await ctx.db.run(
                finish_interrupted,
                ctx,
                reason=f"database error: {error}"[:500],
                usage=recorder.usage.to_dict(),
                steps=recorder.steps,
                timings=timings,
                pending=recorder.pending,
                pending_fields=recorder.pending_fields,
            )
            break
        except Exception as again:
            if not is_connection_error(again):
                logger.exception("turn %s: could not record the interruption", turn_id)
                break
    return DriveResult.errored(
        turn_id=turn_id,
        status=TurnStatus.INTERRUPTED,
        outcome="",
        recorder=recorder,
        error=error,
        latency_ms=timings.get("total_ms", 0),
    )

"""The review phase of an answered attempt, and the one retry it may ask for
(docs/architecture.md#the-turn-lifecycle).

A reviewer LLM judges the answer (``agentlab.agent.review``); a ``retry``
verdict with an instruction archives the attempt (``turns.attempts.attempt_archive``)
and starts the next one, asked with the previous answer and the instruction
— at most once per turn (``drive_turn`` decides, ``REVIEW_RETRIES``). A chat
review later than its wait is recorded after the turn finished
(``review_append_late``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from django.db import transaction

from agentlab.agent.loop import LoopResult
from agentlab.agent.review import Review, retry_question, review_answer
from agentlab.agent.types import Completion, LLMProvider
from agentlab.agent.usage import UsageTotals

# called through the module, so that a test can break every write of the driver at once
from turns import events as event_log
from turns.attempts import attempt_archive, attempt_of_fields, column_defaults, review_retries
from turns.driver.context import DriveContext
from turns.driver.finish import finish_fields
from turns.driver.record import Attempt
from turns.driver.writer import events_write
from turns.event_types import (
    AttemptRetryData,
    CompletionUsageData,
    PhaseData,
    PreviousAttemptData,
    ReviewData,
)
from turns.events import NewEvent
from turns.meta import TurnMeta, meta_of, meta_retry_context, meta_with_review
from turns.models import (
    AttemptReason,
    EventType,
    Turn,
    TurnAttempt,
    TurnEvent,
    TurnOutcome,
    TurnPhase,
    TurnStatus,
)

logger = logging.getLogger(__name__)

#: How many times a review may retry one turn.
REVIEW_RETRIES = 1


def review_may_retry(*, review: Review | None, turn_id: int) -> bool:
    """Whether ``review`` asks for a retry that is still allowed: a ``retry``
    verdict with an instruction, and fewer than ``REVIEW_RETRIES`` attempts
    of the turn ended by a review so far (a query only for such a verdict)."""
    return review is not None and review.wants_retry and review_retries(turn_id=turn_id) < REVIEW_RETRIES


def attempt_question(*, question: str, meta: Mapping[str, Any]) -> str:
    """The question an attempt is asked: the turn's own, or — after a review
    asked for a retry — with the previous answer and the instruction
    (the meta's ``retry_context``, kept for resumes and continued attempts)."""
    context = meta_retry_context(meta)
    if not context:
        return question
    return retry_question(
        question=question,
        previous_answer=str(context.get("previous_answer") or ""),
        instruction=str(context.get("instruction") or ""),
    )


async def review_phase(
    ctx: DriveContext,
    *,
    attempt: Attempt,
    result: LoopResult,
    cancel: asyncio.Event,
    meta: TurnMeta,
    conversation: str = "",
) -> tuple[Review | None, asyncio.Task[tuple[Review, Completion | None]] | None, TurnMeta]:
    """Review an answered attempt; returns ``(review, None, meta)`` when it
    came in time (its ``review`` event written, its usage added to the
    attempt's, the review in ``meta``), ``(None, task, meta)`` when the
    policy's wait ran out first (the caller records the task's result after
    finishing), ``(None, None, meta)`` when the turn was cancelled meanwhile
    (the review is abandoned; the answer stands).

    The held-back final step (``final_answer``'s completion and result) is
    written with the ``phase: review`` event, so the log shows the answer
    before its review. ``conversation``: the turns before this one as text,
    shown to the reviewer before the question.
    """
    recorder = attempt.recorder
    await events_write(
        ctx.db,
        turn_id=ctx.turn_id,
        events=[*recorder.pending, NewEvent(EventType.PHASE, PhaseData(phase=TurnPhase.REVIEW))],
        turn_fields={**recorder.pending_fields, "phase": TurnPhase.REVIEW},
        holder=ctx.holder,
    )
    recorder.pending, recorder.pending_fields = [], {}
    task = asyncio.create_task(
        _run_review(
            ctx.provider,
            question=ctx.turn.question,
            result=result,
            max_tokens=attempt.max_output_tokens,
            conversation=conversation,
        )
    )
    stop = asyncio.ensure_future(cancel.wait())
    try:
        done, _ = await asyncio.wait(
            {task, stop}, timeout=ctx.policy.review_wait_s(), return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stop.cancel()
    if task not in done:
        if cancel.is_set():
            task.cancel()
            return None, None, meta
        return None, task, meta
    review, completion = task.result()
    if completion is not None:
        recorder.usage.add(completion, role="review")
    data = review_data(attempt=attempt.number, review=review, completion=completion, late=False)
    await events_write(
        ctx.db,
        turn_id=ctx.turn_id,
        events=[NewEvent(EventType.REVIEW, data)],
        turn_fields={"usage": recorder.usage.to_dict()},
        holder=ctx.holder,
    )
    return review, None, meta_with_review(meta, data)


async def retry_after_review(
    ctx: DriveContext,
    *,
    attempt: Attempt,
    result: LoopResult,
    review: Review,
    meta: TurnMeta,
) -> TurnMeta:
    """Archive the reviewed attempt and start the next one (one transaction,
    holder-guarded): the attempt's row (its loop result mapped by
    ``finish_fields``, its usage with the review's), ``attempt.retry``
    ``{"attempt": next, "reason": "review", "instruction", "previous": {…}}``
    then ``phase: act``. Returns the new meta."""
    _, _, fields = finish_fields(result)
    archived = attempt_of_fields(
        turn_id=ctx.turn_id,
        number=attempt.number,
        ended_by=AttemptReason.REVIEW,
        fields={**fields, "usage": attempt.recorder.usage.to_dict()},
        question=attempt.question,
        trace=[s.to_dict() for s in result.steps],
    )
    retry = AttemptRetryData(
        attempt=attempt.number + 1,
        reason="review",
        instruction=review.retry_instruction,
        previous=PreviousAttemptData(
            attempt=attempt.number,
            status=TurnStatus.SUCCEEDED,
            outcome=TurnOutcome.ANSWERED,
            stop_reason=result.stop_reason,
            answer=result.answer,
        ),
    )
    return await ctx.db.run(
        _archive_and_start_next,
        ctx,
        archived=archived,
        meta=meta,
        retry=retry,
        retry_instruction=review.retry_instruction,
    )


def _archive_and_start_next(
    ctx: DriveContext,
    *,
    archived: TurnAttempt,
    meta: TurnMeta,
    retry: AttemptRetryData,
    retry_instruction: str | None,
) -> TurnMeta:
    """``retry_after_review``'s write, in one transaction under the turn's row lock."""
    with transaction.atomic():
        current = Turn.objects.select_for_update().values_list("meta", flat=True).get(pk=ctx.turn_id) or {}
        # what others wrote since the claim (a cancel request) wins over our copy
        merged = meta_of({**current, **{k: v for k, v in meta.items() if k not in current}})
        if "review" in meta:  # the archive keeps the review just made, whatever the row holds
            merged["review"] = meta["review"]
        new_meta = attempt_archive(archived, merged, retry_instruction=retry_instruction)
        event_log.event_append_many(
            turn_id=ctx.turn_id,
            events=[
                NewEvent(EventType.ATTEMPT_RETRY, retry),
                NewEvent(EventType.PHASE, PhaseData(phase=TurnPhase.ACT)),
            ],
            turn_fields={
                **column_defaults(("usage", "steps")),
                "attempts": archived.number + 1,
                "meta": new_meta,
                "phase": TurnPhase.ACT,
            },
            holder=ctx.holder,
        )
    return new_meta


async def review_record_late(
    ctx: DriveContext, *, attempt: int, task: asyncio.Task[tuple[Review, Completion | None]]
) -> None:
    """Wait for a review that missed the chat wait and append it (``late: true``)."""
    try:
        review, completion = await task
        data = review_data(attempt=attempt, review=review, completion=completion, late=True)
        await ctx.db.run(
            review_append_late, turn_id=ctx.turn_id, attempt=attempt, data=data, completion=completion
        )
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("turn %s: could not record the late review", ctx.turn_id)


def _completion_usage(completion: Completion | None) -> CompletionUsageData | None:
    if completion is None:
        return None
    return CompletionUsageData(
        model=completion.model,
        input_tokens=completion.usage.input_tokens,
        output_tokens=completion.usage.output_tokens,
        cost=completion.cost,
        finish_reason=completion.finish_reason,
        decoding=completion.decoding,
    )


def review_data(*, attempt: int, review: Review, completion: Completion | None, late: bool) -> ReviewData:
    """The ``review`` event's payload (also kept as the meta's ``review``)."""
    data = ReviewData(
        attempt=attempt,
        verdict=review.verdict,
        note=review.note,
        retry_instruction=review.retry_instruction,
        usage=_completion_usage(completion),
        late=late,
    )
    if review.error:
        data["error"] = review.error
    return data


async def _run_review(
    provider: LLMProvider,
    *,
    question: str,
    result: LoopResult,
    max_tokens: int | None = None,
    conversation: str = "",
) -> tuple[Review, Completion | None]:
    """One review call (at most ``max_tokens`` output tokens, ``None``: the
    reviewer's default); any failure becomes a ``failed`` review (the turn
    does not fail)."""
    try:
        return await review_answer(
            provider,
            question=question,
            answer=result.answer,
            evidence=result.evidence,
            reasoning=result.reasoning,
            steps=result.steps,
            conversation=conversation,
            **({"max_tokens": max_tokens} if max_tokens is not None else {}),
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.warning("review failed", exc_info=True)
        return Review("failed", error=f"{type(exc).__name__}: {exc}"), None


def review_append_late(
    *, turn_id: int, attempt: int, data: Mapping[str, Any], completion: Completion | None
) -> bool:
    """Record a review that arrived after its turn finished (``late: true``).

    The turn is no longer held by anyone, so this appends without a holder;
    it is guarded instead by the turn's row lock and a check that attempt
    ``attempt`` has no ``review`` event yet, so it is written at most once.
    The review's usage is added to the turn's usage (by model) when the turn
    is still on that attempt, and the verdict is kept in the meta's
    ``review``. Returns whether it was written.
    """
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if TurnEvent.objects.filter(turn_id=turn_id, type=EventType.REVIEW, data__attempt=attempt).exists():
            return False
        fields: dict[str, Any] = {}
        if turn.attempts == attempt:
            if completion is not None:
                totals = UsageTotals.from_dict(turn.usage)
                totals.add(completion, role="review")
                fields["usage"] = totals.to_dict()
            fields["meta"] = meta_with_review(turn.meta, data)  # type: ignore[arg-type]
        event_log.event_append_many(
            turn_id=turn_id, events=[NewEvent(EventType.REVIEW, data)], turn_fields=fields
        )
    return True

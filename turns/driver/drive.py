"""The turn driver: runs one turn through the agent core, for chat and evaluation.

One driver serves both; a ``TurnPolicy`` carries the few differences
(DESIGN.md §8). ``drive_turn``

1. claims the turn with a conditional update (``queued → running``,
   ``claim.turn_claim``), so a duplicate job delivery does nothing and writes
   nothing;
2. rebuilds the agent's recorded steps from the event log (``replay``), so a
   resumed turn reuses LLM replies and tool results instead of requesting or
   running them again;
3. runs the agent loop, persisting every completion and every tool result as
   events *before* the next step starts (``recorder``);
4. watches the turn row for the cancel flag and writes a heartbeat while it
   runs (``watch``);
5. reviews an answered attempt and retries it once if asked (``review``);
6. reaches a terminal event on every path, exceptions included (``finish``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agentlab.agent.extensions import Extensions
from agentlab.agent.loop import AgentLoop, ApprovalDecision
from agentlab.agent.review import Review
from agentlab.agent.tools import ToolContext, ToolRegistry, default_registry
from agentlab.agent.types import Completion, LLMProvider, Step, ToolCall
from agentlab.agent.usage import UsageTotals
from common.db import DatabaseThreads, is_connection_error
from turns.driver.claim import turn_claim
from turns.driver.extensions import (
    ExtensionsUnavailable,
    Subject,
    attempt_checks,
    attempt_setup,
    attempt_setup_record,
    meta_after_setup,
    plugin_context,
    unavailable_result,
)
from turns.driver.finish import finish_fields, finish_interrupted, finish_unexpected, finish_write
from turns.driver.policies import TurnPolicy
from turns.driver.recorder import Attempt, Recorder
from turns.driver.replay import attempt_steps, calls_started
from turns.driver.review_phase import (
    attempt_question,
    retry_after_review,
    review_may_retry,
    review_phase,
    review_record_late,
)
from turns.driver.watch import turn_watcher
from turns.events import TurnNotHeld
from turns.extension_settings import recorded_extensions
from turns.meta import TurnMeta, meta_cancel_by, meta_extensions, meta_of, meta_with_setup
from turns.models import ApprovalStatus, Turn, TurnOutcome, TurnStatus
from turns.selectors import approval_status_of, turn_checked, turn_meta

logger = logging.getLogger(__name__)

_default_tools: ToolRegistry | None = None


def shared_default_tools() -> ToolRegistry:
    """The built-in tools, built once per process: they keep no per-turn state
    (the turn's documents and database path come in the ``ToolContext``,
    which also decides which of them are offered), and building their
    JSON schemas for every turn was a measurable share of ``run_eval``'s CPU."""
    global _default_tools
    if _default_tools is None:
        _default_tools = default_registry()
    return _default_tools


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


async def drive_turn(
    turn_id: int,
    *,
    policy: TurnPolicy,
    provider: LLMProvider,
    db: DatabaseThreads,
    tools: ToolRegistry | None = None,
    job_id: str = "",
    timeout_s: float | None = None,
    extensions: Extensions | None = None,
    subject: Subject | None = None,
) -> DriveResult | None:
    """Run turn ``turn_id`` to a terminal state under ``policy``.

    Returns ``None`` without writing anything when the turn could not be
    claimed (not queued: a duplicate delivery, or already taken). Otherwise
    returns the result, which is also on the turn row and at the end of its
    event log. The agent loop's failures become a ``turn.failed`` event; so do
    unexpected exceptions in the driver (re-raised after recording only if they
    are ``asyncio.CancelledError``, which leaves the turn running for the
    sweeper to mark interrupted).

    Phases (DESIGN.md §4): **act** (the agent loop) → **review** when the
    attempt answered and ``policy.review_enabled()`` — one reviewer call
    (``agentlab.agent.review``), recorded as a ``review`` event whose usage is
    added to the turn's — → at most one automatic retry on a ``retry``
    verdict with an instruction (the attempt is archived in
    ``meta["attempts"]``, ``attempt.retry`` ``{"attempt", "reason": "review",
    "instruction"}``, then a new act phase whose steps carry the new attempt
    number) → finish. A chat review that is later than
    ``policy.review_wait_s()`` is left running: the turn finishes without it,
    and this coroutine returns only after the late review is recorded
    (``review_append_late``), so a Celery task keeps it alive.

    ``extensions``: the plugins and MCP servers of the turn (``None``: the
    settings', plus the plugins the turn recorded running with); each attempt
    gets its tools and system prompt from them and ends with their ``check``
    events (``driver.extensions``). ``subject``: the example, run and dataset
    plugins are told of (evaluation). An MCP server unreachable at the start
    fails the turn (stop reason ``error``).
    """
    started = time.monotonic()
    turn = await db.run(turn_claim, turn_id=turn_id, job_id=job_id)
    if turn is None:
        return None
    holder = turn.job_id
    meta: TurnMeta = meta_of(turn.meta)
    tools = tools or shared_default_tools()
    if extensions is None:
        extensions = recorded_extensions(meta_extensions(meta))
    max_output_tokens = int(turn.max_output_tokens or settings.AGENTLAB_MAX_OUTPUT_TOKENS)
    inherited, own = (
        ([], [])
        if turn.fresh
        else await db.run(attempt_steps, turn_id=turn_id, attempt=turn.attempts, meta=meta)
    )
    # tool calls a crash may have cut between their run and their result
    started_calls: frozenset[str] = (
        frozenset()
        if turn.fresh or not own
        else await db.run(calls_started, turn_id=turn_id, attempt=turn.attempts)
    )

    def new_attempt(number: int, steps_before: int, own_steps: list[Step]) -> Attempt:
        usage = UsageTotals()
        for step in own_steps:
            usage.add(step.completion)
        recorder = Recorder(
            turn_id=turn_id,
            holder=holder,
            attempt=number,
            db=db,
            usage=usage,
            steps=steps_before + len(own_steps),
            tools=tools,
        )
        return Attempt(
            number=number,
            question=attempt_question(question=turn.question, meta=meta),
            recorder=recorder,
            max_output_tokens=max_output_tokens,
        )

    current = new_attempt(turn.attempts, len(inherited), own)
    recorded = [*inherited, *own]
    cancel = asyncio.Event()
    watch = turn_watcher()
    watch.add(turn_id=turn_id, holder=holder, cancel=cancel)
    late_review: asyncio.Task[tuple[Review, Completion | None]] | None = None

    async def gate(call: ToolCall) -> ApprovalDecision:
        return await policy.approval(turn_id=turn_id, call=call, db=db, holder=holder)

    timeout = timeout_s if timeout_s is not None else float(settings.AGENTLAB_TURN_TIMEOUT_S)
    deadline = time.monotonic() + timeout if timeout else None
    timings: dict[str, int] = {}
    try:
        # checks are appended with an attempt's next write: a resumed attempt
        # may have written them already (before its review), never twice
        checked = (
            not turn.fresh
            and bool(extensions)
            and await db.run(turn_checked, turn_id=turn_id, attempt=current.number)
        )
        while True:
            setup = None
            if extensions:
                context = plugin_context(
                    turn, kind=policy.name, attempt=current.number, question=current.question, subject=subject
                )
                try:
                    setup = await attempt_setup(extensions, tools=tools, context=context)
                except ExtensionsUnavailable as exc:
                    result = unavailable_result(str(exc), recorded=recorded, usage=current.recorder.usage)
                    break
                current.recorder.tools = setup.tools
                meta = meta_after_setup(meta, extensions, setup)
            loop = AgentLoop(
                provider,
                setup.tools if setup else tools,
                max_steps=turn.max_steps,
                max_tokens=max_output_tokens,
                system_prompt=setup.system_prompt if setup else None,
            )
            tool_context = ToolContext(
                documents=list((turn.context or {}).get("documents") or []),
                metadata=dict(turn.context or {}),
                idempotency_scope=f"turn-{turn_id}/attempt-{current.number}",
                started_calls=started_calls if current.number == turn.attempts else frozenset(),
            )
            started_with = attempt_setup_record(
                loop, question=current.question, context=tool_context, attempt=current.number
            )
            # written with the turn's meta at its next meta write (the review
            # phase's, else the finish's): a transaction of its own cost an
            # evaluated example a fifth of its database time
            meta = meta_with_setup(meta, started_with)
            act_started = time.monotonic()
            on_text = current.recorder.stream_deltas() if policy.streams else None
            result = await loop.run(
                current.question,
                context=tool_context,
                on_report=current.recorder,
                cancel=cancel,
                recorded=recorded,
                approval=gate,
                deadline=deadline,
                on_text=on_text,
            )
            if on_text is not None:
                await on_text.close()
            timings["act_ms"] = timings.get("act_ms", 0) + int((time.monotonic() - act_started) * 1000)
            if setup is not None and not checked and result.stop_reason != "cancelled":
                inherited_steps = len(inherited) if current.number == turn.attempts else 0
                current.recorder.pending += await attempt_checks(
                    setup, context=context, result=result, inherited_steps=inherited_steps
                )
            checked = False
            if result.stop_reason != "final" or not policy.review_enabled() or cancel.is_set():
                break
            review_started = time.monotonic()
            review, late_review, meta = await review_phase(
                turn_id=turn_id,
                holder=holder,
                attempt=current,
                provider=provider,
                policy=policy,
                question=turn.question,
                result=result,
                cancel=cancel,
                db=db,
                meta=meta,
            )
            timings["review_ms"] = timings.get("review_ms", 0) + int(
                (time.monotonic() - review_started) * 1000
            )
            if review is None or not review_may_retry(review=review, meta=meta) or cancel.is_set():
                break
            meta = await retry_after_review(
                turn_id=turn_id,
                holder=holder,
                attempt=current,
                result=result,
                review=review,
                db=db,
                meta=meta,
            )
            current = new_attempt(current.number + 1, 0, [])
            recorded = []
        timings["total_ms"] = int((time.monotonic() - started) * 1000)
        event_type, data, fields = finish_fields(result)
        fields["usage"] = current.recorder.usage.to_dict()
        if result.stop_reason == "cancelled":
            # turn_cancel wrote who asked into meta after this driver claimed
            cancel_request = meta_of(await db.run(turn_meta, turn_id=turn_id)).get("cancel")
            meta = meta_of({**meta, "cancel": cancel_request})
            data["by"] = meta_cancel_by(meta)
        if result.stop_reason == "approval_rejected" and result.pending_call is not None:
            status = await db.run(approval_status_of, turn_id=turn_id, call_id=result.pending_call.id)
            if status == ApprovalStatus.EXPIRED:
                data["reason"] = "the approval expired"
        await db.run(
            finish_write,
            turn_id=turn_id,
            event_type=event_type,
            data=data,
            fields={**current.recorder.pending_fields, **fields},
            timings={**(turn.timings or {}), **timings},
            meta=dict(meta),
            pending=current.recorder.pending,
            policy=policy,
            holder=holder,
        )
        if late_review is not None:
            await review_record_late(turn_id=turn_id, attempt=current.number, task=late_review, db=db)
        return DriveResult(
            turn_id=turn_id,
            status=fields["status"],
            outcome=fields["outcome"],
            stop_reason=result.stop_reason,
            answer=result.answer,
            evidence=result.evidence,
            reasoning=result.reasoning,
            steps=result.steps_used,
            usage=fields["usage"],
            error=result.error,
            latency_ms=timings["total_ms"],
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if is_connection_error(exc):
            timings["total_ms"] = int((time.monotonic() - started) * 1000)
            return await _interrupted_by_outage(
                exc,
                turn_id=turn_id,
                holder=holder,
                recorder=current.recorder,
                db=db,
                timings={**(turn.timings or {}), **timings},
            )
        if isinstance(exc, TurnNotHeld | Turn.DoesNotExist):
            # swept and resumed elsewhere, or deleted with its conversation:
            # not a failure of this turn, and nothing more to write
            logger.warning("turn %s: driver stopped: %s", turn_id, exc)
        else:
            logger.exception("turn %s: driver failed", turn_id)
        error = f"{type(exc).__name__}: {exc}"
        timings["total_ms"] = int((time.monotonic() - started) * 1000)
        recorder = current.recorder
        try:
            await db.run(
                finish_unexpected,
                turn_id=turn_id,
                error=error,
                usage=recorder.usage.to_dict(),
                steps=recorder.steps,
                timings={**(turn.timings or {}), **timings},
                meta=dict(meta),
                pending=recorder.pending,
                pending_fields=recorder.pending_fields,
                policy=policy,
                holder=holder,
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
    finally:
        cancel.set()
        if current.recorder.deltas is not None:
            await current.recorder.deltas.close()
        watch.discard(turn_id, holder)
        if late_review is not None and not late_review.done():
            late_review.cancel()


#: How often, and how far apart (seconds), a driver that lost the database
#: tries to mark its turn interrupted before leaving that to the sweeper.
OUTAGE_WRITE_TRIES = 3
OUTAGE_WRITE_PAUSE_S = 1.0


async def _interrupted_by_outage(
    exc: Exception,
    *,
    turn_id: int,
    holder: str,
    recorder: Recorder,
    db: DatabaseThreads,
    timings: dict[str, int],
) -> DriveResult:
    """The database failed under the turn (a restart, a network cut): end it
    ``interrupted`` — resumable, with the steps it had held back — not
    failed (``finish_interrupted``). The database may still be down: a few
    tries, then the turn stays ``running`` for the sweeper to mark
    interrupted once its heartbeat is stale. Either way it resumes."""
    error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    logger.warning("turn %s: the database failed under it; interrupting: %s", turn_id, error)
    for attempt in range(OUTAGE_WRITE_TRIES):
        if attempt:
            await asyncio.sleep(OUTAGE_WRITE_PAUSE_S)
        try:
            await db.run(
                finish_interrupted,
                reason=f"database error: {error}"[:500],
                turn_id=turn_id,
                usage=recorder.usage.to_dict(),
                steps=recorder.steps,
                timings=timings,
                pending=recorder.pending,
                pending_fields=recorder.pending_fields,
                holder=holder,
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

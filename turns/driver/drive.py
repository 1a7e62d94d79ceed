"""The turn driver: runs one turn through the agent core, for chat and evaluation.

One driver serves both; a ``TurnPolicy`` carries the few differences
(docs/architecture.md#the-driver). ``drive_turn``

1. claims the turn with a conditional update (``queued → running``,
   ``lease.turn_claim``, through the group-commit writer: ``writer``), so a
   duplicate job delivery does nothing and writes nothing;
2. rebuilds the agent's recorded steps from the event log (``replay``), so a
   resumed turn reuses LLM replies and tool results instead of requesting or
   running them again;
3. runs the agent loop, persisting every completion and every tool result as
   events *before* the next step starts (``record``), with the conversation
   before the turn, recorded once before the first call (``history``);
4. watches the turn row for the cancel flag and writes a heartbeat while it
   runs (``lease``);
5. reviews an answered attempt and retries it once if asked (``review``);
6. reaches a terminal event on every path, exceptions included — a failure
   while the drive begins (replay, extensions) as well (``finish``).

``drive_turn`` reads as those phases: claim, then ``TurnDrive`` — act (one
attempt of the agent loop), review (and the one retry it may ask for),
finish — with ``finish.finish_after_error`` on every exception. What every
phase reads (the claimed turn, its holder, the database threads, the policy,
the provider, the tools) is one ``DriveContext``, made once per drive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from django.conf import settings

from agentlab.agent.extensions import Extensions, TurnSetup
from agentlab.agent.history import conversation_text
from agentlab.agent.loop import AgentLoop, ApprovalDecision, LoopResult
from agentlab.agent.replay import ReplayScript
from agentlab.agent.review import Review
from agentlab.agent.tools import ToolContext, ToolRegistry, default_registry
from agentlab.agent.types import Completion, LLMProvider, Step, ToolCall
from agentlab.agent.usage import UsageTotals
from agentlab.telemetry import turn_trace
from common.db import DatabaseThreads
from turns.driver.context import DriveContext
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
from turns.driver.finish import DriveResult, finish_after_error, finish_append, finish_fields
from turns.driver.history import turn_history
from turns.driver.lease import turn_watcher
from turns.driver.policies import TurnPolicy
from turns.driver.record import Attempt, Recorder, model_load
from turns.driver.replay import attempt_steps, calls_started
from turns.driver.review import (
    attempt_question,
    retry_after_review,
    review_may_retry,
    review_phase,
    review_record_late,
)
from turns.driver.writer import claim_write
from turns.extension_settings import recorded_extensions
from turns.meta import TurnMeta, meta_cancel_by, meta_extensions, meta_of, meta_with_setup
from turns.models import ApprovalStatus, EventType
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
    replay: ReplayScript | None = None,
) -> DriveResult | None:
    """Run turn ``turn_id`` to a terminal state under ``policy``.

    Returns ``None`` without writing anything when the turn could not be
    claimed (not queued: a duplicate delivery, or already taken). Otherwise
    returns the result, which is also on the turn row and at the end of its
    event log. The agent loop's failures become a ``turn.failed`` event; so do
    unexpected exceptions in the driver (re-raised after recording only if they
    are ``asyncio.CancelledError``, which leaves the turn running for the
    sweeper to mark interrupted).

    Phases (docs/architecture.md#the-turn-lifecycle): **act** (the agent loop) → **review** when the
    attempt answered and ``policy.review_enabled()`` — one reviewer call
    (``agentlab.agent.review``), recorded as a ``review`` event whose usage is
    added to the turn's — → at most one automatic retry on a ``retry``
    verdict with an instruction (the attempt archived as a ``TurnAttempt``,
    ``attempt.retry``, a new act phase with the next number) → finish. A chat
    review later than ``policy.review_wait_s()`` is left running: the turn finishes without it,
    and this coroutine returns only after the late review is recorded
    (``review_append_late``), so a Celery task keeps it alive.

    ``extensions``: the plugins and MCP servers of the turn (``None``: the
    settings', plus the plugins the turn recorded running with); each attempt
    gets its tools and system prompt from them and ends with their ``check``
    events (``driver.extensions``). ``subject``: the example, run and dataset
    plugins are told of (evaluation). An MCP server unreachable at the start
    fails the turn (stop reason ``error``). ``replay``: the recorded path a
    replay turn follows (``agentlab.agent.replay``; ``DriveContext.replay``).
    """
    started = time.monotonic()
    if (turn := await claim_write(db, turn_id=turn_id, job_id=job_id)) is None:
        return None
    trace = turn_trace(turn, kind=policy.name, subject=subject)  # its spans and metrics: ends with it
    ctx = DriveContext(
        turn=turn,
        db=db,
        policy=policy,
        provider=provider,
        tools=tools or shared_default_tools(),
        subject=subject,
        replay=replay,
    )
    drive: TurnDrive | None = None
    try:  # begin (replay, extensions) inside: its failure ends the turn failed too
        drive = await TurnDrive.begin(ctx, extensions=extensions, timeout_s=timeout_s, started=started)
        result = await drive.act_and_review()
        return trace.end(await drive.finish(result))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        # a drive that could not begin fails through a bare one (no replay, no extensions)
        drive = drive or TurnDrive(ctx, extensions=Extensions(), deadline=None, started=started)
        return trace.end(await drive.fail(exc))
    finally:
        if drive is not None:
            await drive.close()


class TurnDrive:
    """One drive of one claimed turn: what its phases read (``ctx``, the
    ``DriveContext``), the state that changes as it goes (the turn's meta,
    the current attempt and its recorder, the steps recorded before, the
    cancel flag, the timings) and the phases themselves."""

    def __init__(
        self,
        ctx: DriveContext,
        *,
        extensions: Extensions,
        deadline: float | None,
        started: float,
    ) -> None:
        self.ctx, self.extensions, self.deadline, self.started = ctx, extensions, deadline, started
        turn = ctx.turn
        # the parts of ctx the phases below use most, by name
        self.turn, self.policy, self.provider = turn, ctx.policy, ctx.provider
        self.db, self.tools = ctx.db, ctx.tools
        self.meta: TurnMeta = meta_of(turn.meta)
        self.max_output_tokens = int(turn.max_output_tokens or settings.AGENTLAB_MAX_OUTPUT_TOKENS)
        self.inherited: list[Step] = []
        self.recorded: list[Step] = []
        # tool calls a crash may have cut between their run and their result
        self.started_calls: frozenset[str] = frozenset()
        self.cancel = asyncio.Event()
        self.timings: dict[str, int] = {}
        self.late_review: asyncio.Task[tuple[Review, Completion | None]] | None = None
        #: the conversation's earlier turns given to every attempt (``history``); ``None``: not read yet
        self.history: list[dict[str, Any]] | None = None
        self.current = self.new_attempt(turn.attempts, 0, [])
        self.watch = turn_watcher()

    @classmethod
    async def begin(
        cls,
        ctx: DriveContext,
        *,
        extensions: Extensions | None,
        timeout_s: float | None,
        started: float,
    ) -> TurnDrive:
        """The drive of ``ctx.turn`` (just claimed): its recorded steps rebuilt
        from the event log unless it is fresh, its watch (heartbeat, cancel
        flag) started. ``extensions`` ``None``: the settings' plus the
        plugins the turn recorded running with."""
        turn = ctx.turn
        meta = meta_of(turn.meta)
        timeout = timeout_s if timeout_s is not None else float(settings.AGENTLAB_TURN_TIMEOUT_S)
        drive = cls(
            ctx,
            extensions=recorded_extensions(meta_extensions(meta)) if extensions is None else extensions,
            deadline=time.monotonic() + timeout if timeout else None,
            started=started,
        )
        if not turn.fresh:
            await drive.replay()
        drive.watch.add(turn_id=turn.id, holder=ctx.holder, cancel=drive.cancel)
        return drive

    async def replay(self) -> None:
        """Rebuild the steps a resumed turn already recorded: the inherited
        ones (a continued attempt builds on its predecessor's) and the
        current attempt's own, which it reuses instead of asking again."""
        turn, db = self.turn, self.db
        inherited, own = await db.run(attempt_steps, turn_id=turn.id, attempt=turn.attempts)
        if own:
            self.started_calls = await db.run(calls_started, turn_id=turn.id, attempt=turn.attempts)
        self.inherited, self.recorded = inherited, [*inherited, *own]
        self.current = self.new_attempt(turn.attempts, len(inherited), own)

    def new_attempt(self, number: int, steps_before: int, own_steps: list[Step]) -> Attempt:
        """Attempt ``number``, its recorder counting ``steps_before`` steps
        and the usage of ``own_steps`` (already recorded) as done."""
        usage = UsageTotals()
        for step in own_steps:
            usage.add(step.completion)
        recorder = Recorder(
            self.ctx, attempt=number, usage=usage, steps=steps_before + len(own_steps), tools=self.tools
        )
        return Attempt(
            number=number,
            question=attempt_question(question=self.turn.question, meta=self.meta),
            recorder=recorder,
            max_output_tokens=self.max_output_tokens,
        )

    async def gate(self, call: ToolCall) -> ApprovalDecision:
        """The approval gate of a tool call (the policy's)."""
        ctx = self.ctx  # the policy is part of the context, so it is given the parts it needs
        return await self.policy.approval(turn_id=ctx.turn_id, call=call, db=ctx.db, holder=ctx.holder)

    def _add_time(self, key: str, since: float) -> None:
        self.timings[key] = self.timings.get(key, 0) + int((time.monotonic() - since) * 1000)

    async def act_and_review(self) -> LoopResult:
        """Act, then review an answered attempt, retrying once if the review
        asks: the result of the last attempt."""
        turn = self.turn
        # checks are appended with an attempt's next write: a resumed attempt
        # may have written them already (before its review), never twice
        checked = (
            not turn.fresh
            and bool(self.extensions)
            and await self.db.run(turn_checked, turn_id=turn.id, attempt=self.current.number)
        )
        await model_load(self.ctx)
        while True:
            result = await self.act(checked=checked)
            checked = False
            reviewable = result.stop_reason == "final" and self.policy.review_enabled(self.provider)
            if not reviewable or self.cancel.is_set() or not await self.review(result):
                return result

    async def act(self, *, checked: bool) -> LoopResult:
        """One attempt of the agent loop with its extensions' tools and system
        prompt, every step recorded as it happens; then the extensions'
        checks, unless ``checked`` (written before) or cancelled."""
        setup, context = None, None
        if self.extensions:
            context = plugin_context(
                self.turn,
                kind=self.policy.name,
                attempt=self.current.number,
                question=self.current.question,
                subject=self.ctx.subject,
            )
            try:
                setup = await attempt_setup(self.extensions, tools=self.tools, context=context)
            except ExtensionsUnavailable as exc:
                return unavailable_result(str(exc), recorded=self.recorded, usage=self.current.recorder.usage)
            self.current.recorder.tools = setup.tools
            self.meta = meta_after_setup(self.meta, self.extensions, setup)
        result = await self._run_loop(setup)
        if setup is not None and context is not None and not checked and result.stop_reason != "cancelled":
            inherited_steps = len(self.inherited) if self.current.number == self.turn.attempts else 0
            self.current.recorder.pending += await attempt_checks(
                setup, context=context, result=result, inherited_steps=inherited_steps
            )
        return result

    async def _run_loop(self, setup: TurnSetup | None) -> LoopResult:
        """Run the agent loop for the current attempt (its time is ``act_ms``)."""
        turn, current = self.turn, self.current
        loop = AgentLoop(
            self.provider,
            setup.tools if setup else self.tools,
            max_steps=turn.max_steps,
            max_tokens=self.max_output_tokens,
            # a plugin's prompt wins over the turn's own (an experiment variant's)
            system_prompt=(setup.system_prompt if setup else None) or turn.agent_options.get("system_prompt"),
            temperature=turn.agent_options.get("temperature"),
        )
        tool_context = self.ctx.tool_context(attempt=current.number, started_calls=self.started_calls)
        started_with = attempt_setup_record(
            loop, question=current.question, context=tool_context, attempt=current.number
        )
        # written with the turn's meta at its next meta write (the review
        # phase's, else the finish's): a transaction of its own cost an
        # evaluated example a fifth of its database time
        self.meta = meta_with_setup(self.meta, started_with)
        history = await self._history(loop, tool_context)
        act_started = time.monotonic()
        on_text = current.recorder.stream_deltas() if self.policy.streams else None
        result = await loop.run(
            current.question,
            context=tool_context,
            on_report=current.recorder,
            cancel=self.cancel,
            recorded=self.recorded,
            approval=self.gate,
            deadline=self.deadline,
            on_text=on_text,
            history=history,
            replay=self.ctx.replay,
        )
        if on_text is not None:
            await on_text.close()
        self._add_time("act_ms", act_started)
        return result

    async def _history(self, loop: AgentLoop, context: ToolContext) -> list[dict[str, Any]]:
        """The messages of the conversation before this turn, read (or
        recorded) once per drive and given to each of its attempts
        (``turns.driver.history``: recorded before the first LLM call)."""
        if self.history is None:
            history = await turn_history(
                self.ctx,
                loop=loop,
                question=self.current.question,
                context=context,
                attempt=self.current.number,
                reply_tokens=self.max_output_tokens,
            )
            self.history = history.messages if history is not None else []
        return self.history

    async def review(self, result: LoopResult) -> bool:
        """Review the answered attempt; on a ``retry`` verdict the review may
        act on, archive it and start the next attempt. True when it did."""
        review_started = time.monotonic()
        review, self.late_review, self.meta = await review_phase(
            self.ctx,
            attempt=self.current,
            result=result,
            cancel=self.cancel,
            meta=self.meta,
            conversation=conversation_text(self.history or []),
        )
        self._add_time("review_ms", review_started)
        if review is None or self.cancel.is_set() or not review.wants_retry:
            return False
        if not await self.db.run(review_may_retry, review=review, turn_id=self.turn.id):
            return False
        self.meta = await retry_after_review(
            self.ctx, attempt=self.current, result=result, review=review, meta=self.meta
        )
        self.current = self.new_attempt(self.current.number + 1, 0, [])
        self.recorded = []
        return True

    async def finish(self, result: LoopResult) -> DriveResult:
        """Write the terminal event for ``result`` with the turn's fields,
        then record a late review if one is still running."""
        turn_id, db = self.turn.id, self.db
        self.timings["total_ms"] = int((time.monotonic() - self.started) * 1000)
        event_type, data, fields = finish_fields(result)
        fields.update(usage=self.current.recorder.usage.to_dict(), attempts=self.current.number)
        if result.stop_reason == "cancelled":
            # turn_cancel wrote who asked into meta after this driver claimed
            cancel_request = meta_of(await db.run(turn_meta, turn_id=turn_id)).get("cancel")
            self.meta = meta_of({**self.meta, "cancel": cancel_request})
            data["by"] = meta_cancel_by(self.meta)
        if self.late_review is not None and event_type == EventType.TURN_ANSWERED:
            data["review_pending"] = True
        if result.stop_reason == "approval_rejected" and result.pending_call is not None:
            status = await db.run(approval_status_of, turn_id=turn_id, call_id=result.pending_call.id)
            if status == ApprovalStatus.EXPIRED:
                data["reason"] = "the approval expired"
        await finish_append(
            self.ctx,
            event_type=event_type,
            data=data,
            fields={**self.current.recorder.pending_fields, **fields},
            timings=self.all_timings(),
            meta=dict(self.meta),
            pending=self.current.recorder.pending,
        )
        if self.late_review is not None:
            await review_record_late(self.ctx, attempt=self.current.number, task=self.late_review)
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
            latency_ms=self.timings["total_ms"],
        )

    def all_timings(self) -> dict[str, int]:
        """The turn's timings: those of earlier drives, updated by this one's."""
        return {**(self.turn.timings or {}), **self.timings}

    async def fail(self, exc: Exception) -> DriveResult:
        """End the turn after the driver raised ``exc`` (``finish_after_error``)."""
        self.timings["total_ms"] = int((time.monotonic() - self.started) * 1000)
        return await finish_after_error(
            self.ctx, exc, recorder=self.current.recorder, timings=self.all_timings(), meta=dict(self.meta)
        )

    async def close(self) -> None:
        """Stop the loop's work for this turn: the cancel flag set, the token
        stream flushed, the watch ended, a late review still running cancelled."""
        self.cancel.set()
        if self.current.recorder.deltas is not None:
            await self.current.recorder.deltas.close()
        self.watch.discard(self.turn.id, self.ctx.holder)
        if self.late_review is not None and not self.late_review.done():
            self.late_review.cancel()

"""The turn driver: runs one turn through the agent core, for chat and evaluation.

One driver serves both; a ``TurnPolicy`` carries the few differences
(DESIGN.md §8). The driver

1. claims the turn with a conditional update (``queued → running``), so a
   duplicate job delivery does nothing and writes nothing;
2. rebuilds the agent's recorded steps from the event log, so a resumed turn
   reuses LLM replies and tool results instead of requesting or running them
   again;
3. runs the agent loop, persisting every completion and every tool result as
   events *before* the next step starts;
4. watches the turn row for the cancel flag and writes a heartbeat while it
   runs;
5. reaches a terminal event on every path, exceptions included.

The seed turn driver (``shared/seeds/004``) shaped the policy hooks: the chat
and evaluation paths differ only in how a pending approval is handled and how
long a review may take.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db.models import F, Value
from django.db.models.functions import Coalesce, Greatest
from django.db import transaction
from django.utils import timezone

from agentlab.agent.loop import AgentLoop, ApprovalDecision, CompletionReport, LoopResult, Report, ToolResultReport
from agentlab.agent.tools import ToolContext, ToolRegistry, default_registry
from agentlab.agent.types import Completion, LLMProvider, Step, ToolCall, ToolResult, Usage
from agentlab.agent.usage import UsageTotals
from agentlab.db import DatabaseThreads

from .events import NewEvent, event_append_many
from .models import EventType, Turn, TurnEvent, TurnOutcome, TurnPhase, TurnStatus

logger = logging.getLogger(__name__)


class TurnPolicy:
    """What differs between a chat turn and an evaluation turn.

    ``approval`` decides a tool call that needs approval: ``"approved"`` runs
    it, ``"rejected"`` ends the turn as rejected, ``"unavailable"`` stops the
    loop with stop reason ``approval_required``.
    """

    name = "base"

    def on_finish(self, *, turn_id: int) -> None:
        """Called inside the transaction that writes the turn's terminal event,
        after the turn row has its final fields: what the caller records here
        commits or rolls back with the end of the turn."""

    async def approval(self, *, turn_id: int, call: ToolCall, db: DatabaseThreads) -> ApprovalDecision:
        return "unavailable"


class EvaluationPolicy(TurnPolicy):
    """Evaluation: nobody is there to approve, so a tool that needs approval
    cancels the turn with stop reason ``approval_required``.

    ``finish`` (``turn_id -> None``), when given, runs in the terminal event's
    transaction — ``run_eval`` completes the example's prediction there, so a
    finished turn never lacks its prediction.
    """

    name = "evaluation"

    def __init__(self, finish: Callable[..., None] | None = None) -> None:
        self._finish = finish

    def on_finish(self, *, turn_id: int) -> None:
        if self._finish is not None:
            self._finish(turn_id=turn_id)


class ChatPolicy(TurnPolicy):
    """Chat: the turn's owner is watching. Waiting for a human decision on an
    approval (status ``waiting``) arrives with the approvals work; until then a
    tool that needs approval stops the turn with ``approval_required``."""

    name = "chat"


EVALUATION = EvaluationPolicy()
CHAT = ChatPolicy()

#: How often the driver looks at the cancel flag while a turn runs (seconds).
CANCEL_POLL_S = 0.5

_default_tools: ToolRegistry | None = None


def shared_default_tools() -> ToolRegistry:
    """The built-in tools, built once per process: they keep no per-turn state
    (the turn's documents come in the ``ToolContext``), and building their
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


# --- claiming and rebuilding (sync; run on database threads) -------------------


def turn_claim(*, turn_id: int, job_id: str = "") -> tuple[Turn, bool] | None:
    """Claim a queued turn for this job: ``queued → running`` by a conditional
    update. Returns ``(turn, fresh)`` — ``fresh`` when the turn never ran
    before, so there is no recorded step to rebuild — or ``None`` when someone
    else has it (or it is no longer queued); then nothing is written.
    (healthchecks ``sendalerts``.)

    The claim stores a token unique to this claim in ``turn.job_id`` (the job
    id plus a random suffix); every later write of this driver is conditional
    on it (``event_append_many(holder=…)``).
    """
    now = timezone.now()
    job_id = f"{job_id[:40] or 'inline'}:{uuid.uuid4().hex[:16]}"
    with transaction.atomic():
        claimed = Turn.objects.filter(pk=turn_id, status=TurnStatus.QUEUED).update(
            status=TurnStatus.RUNNING, heartbeat_at=now, job_id=job_id, updated_at=now, phase=TurnPhase.ACT,
            started_at=Coalesce(F("started_at"), Value(now)), attempts=Greatest(F("attempts"), Value(1)),
        )
        if claimed != 1:
            return None
        turn = Turn.objects.get(pk=turn_id)
        fresh = turn.started_at == now
        events = event_append_many(
            turn_id=turn_id,
            events=[
                NewEvent(EventType.TURN_STARTED, {"attempt": turn.attempts, "job_id": job_id}),
                NewEvent(EventType.PHASE, {"phase": TurnPhase.ACT}),
            ],
        )
    turn.last_seq = events[-1].seq
    return turn, fresh


def recorded_steps(*, turn_id: int, attempt: int) -> list[Step]:
    """Rebuild the agent's steps of one attempt from the turn's event log.

    ``llm.usage`` events carry the completion's usage, model and finish reason,
    ``thinking`` its text, ``tool.call`` its calls and ``tool.result`` the
    observations, each tagged with ``step``. A step whose process died between
    tools comes back with fewer results than calls.
    """
    by_step: dict[int, dict[str, Any]] = defaultdict(lambda: {"text": None, "calls": [], "results": [], "usage": None})
    rows = TurnEvent.objects.filter(
        turn_id=turn_id,
        type__in=[EventType.THINKING, EventType.LLM_USAGE, EventType.TOOL_CALL, EventType.TOOL_RESULT],
    ).order_by("seq")
    for row in rows.values_list("type", "data"):
        etype, data = row
        if data.get("attempt", 1) != attempt or "step" not in data:
            continue
        slot = by_step[int(data["step"])]
        if etype == EventType.THINKING:
            slot["text"] = data.get("text")
        elif etype == EventType.LLM_USAGE:
            slot["usage"] = data
        elif etype == EventType.TOOL_CALL:
            slot["calls"].append(ToolCall.from_dict(data["call"]))
        else:
            slot["results"].append(ToolResult.from_dict(data["result"]))
    steps = []
    for index in sorted(by_step):
        slot = by_step[index]
        usage = slot["usage"]
        if usage is None:  # the completion itself was never fully recorded
            break
        completion = Completion(
            text=slot["text"],
            tool_calls=tuple(slot["calls"]),
            usage=Usage(usage.get("input_tokens"), usage.get("output_tokens")),
            model=usage.get("model") or "",
            finish_reason=usage.get("finish_reason"),
            cost=usage.get("cost"),
        )
        steps.append(Step(index=index, completion=completion, results=slot["results"]))
    return steps


def _current_meta(*, turn_id: int) -> dict[str, Any]:
    return dict(Turn.objects.values_list("meta", flat=True).get(pk=turn_id) or {})


def _poll(*, turn_id: int, holder: str, beat: bool) -> tuple[bool, bool]:
    """Read the turn's cancel flag and whether ``holder`` still holds it;
    with ``beat``, also write the heartbeat (only while held)."""
    held = Turn.objects.filter(pk=turn_id, job_id=holder, status__in=(TurnStatus.RUNNING, TurnStatus.WAITING))
    if beat:
        held.update(heartbeat_at=timezone.now())
    row = held.values_list("cancel_requested", flat=True).first()
    return bool(row), row is not None


# --- finishing -----------------------------------------------------------------

_FAILED_STOPS = {"max_steps", "timeout", "context_overflow", "provider_error", "error"}


def finish_fields(result: LoopResult) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Map a loop result to (terminal event type, its data, turn fields).

    final → succeeded/answered; asked → succeeded/asked; approval_rejected →
    cancelled/rejected; cancelled and approval_required → cancelled/cancelled;
    max_steps, timeout, context_overflow, provider_error, error →
    failed/failed with the stop reason as the cause.
    """
    stop = result.stop_reason
    data: dict[str, Any] = {"stop_reason": stop, "steps": result.steps_used}
    fields: dict[str, Any] = {
        "stop_reason": stop,
        "steps": result.steps_used,
        "usage": result.usage.to_dict(),
        "phase": TurnPhase.FINISH,
        "finished_at": timezone.now(),
    }
    if stop == "final":
        fields.update(status=TurnStatus.SUCCEEDED, outcome=TurnOutcome.ANSWERED, answer=result.answer,
                      evidence=result.evidence, reasoning=result.reasoning)
        data.update(answer=result.answer, evidence=result.evidence, reasoning=result.reasoning)
        return EventType.TURN_ANSWERED, data, fields
    if stop == "asked":
        fields.update(status=TurnStatus.SUCCEEDED, outcome=TurnOutcome.ASKED,
                      clarifying_question=result.question or "")
        data.update(question=result.question or "")
        return EventType.TURN_ASKED, data, fields
    if stop == "approval_rejected":
        fields.update(status=TurnStatus.CANCELLED, outcome=TurnOutcome.REJECTED)
        data.update(reason="a human rejected the approval")
        return EventType.TURN_CANCELLED, data, fields
    if stop in ("cancelled", "approval_required"):
        fields.update(status=TurnStatus.CANCELLED, outcome=TurnOutcome.CANCELLED)
        if result.pending_call is not None:
            data.update(tool=result.pending_call.name)
        return EventType.TURN_CANCELLED, data, fields
    cause = stop if stop in _FAILED_STOPS else "error"
    fields.update(status=TurnStatus.FAILED, outcome=TurnOutcome.FAILED)
    data.update(cause=cause, error=result.error or "")
    return EventType.TURN_FAILED, data, fields


def _finish(*, turn_id: int, event_type: str, data: dict[str, Any], fields: dict[str, Any],
            timings: dict[str, int], meta: dict[str, Any], pending: Sequence[NewEvent] = (),
            policy: TurnPolicy, holder: str) -> None:
    """Write the terminal event (after any ``pending`` step events) and the
    turn's final fields in one transaction. ``timings`` and ``meta`` are the
    turn's values as claimed: only the driver that holds the turn writes them."""
    meta = dict(meta)
    if event_type == EventType.TURN_FAILED:
        meta["failure_cause"] = data.get("cause")
        if data.get("error"):
            meta["failure_error"] = data["error"]
    with transaction.atomic():
        event_append_many(
            turn_id=turn_id,
            events=[*pending, NewEvent(EventType.PHASE, {"phase": TurnPhase.FINISH}), NewEvent(event_type, data)],
            turn_fields={**fields, "meta": meta, "timings": timings},
            holder=holder,
        )
        policy.on_finish(turn_id=turn_id)


def _fail_unexpected(*, turn_id: int, error: str, usage: dict[str, Any], steps: int, timings: dict[str, int],
                     meta: dict[str, Any], pending: list[NewEvent], policy: TurnPolicy, holder: str) -> None:
    """End a turn whose driver itself raised; only if it is still ours."""
    if not Turn.objects.filter(pk=turn_id, job_id=holder, status__in=(TurnStatus.RUNNING, TurnStatus.WAITING)).exists():
        return
    fields = {"status": TurnStatus.FAILED, "outcome": TurnOutcome.FAILED, "stop_reason": "error",
              "phase": TurnPhase.FINISH, "finished_at": timezone.now(), "usage": usage, "steps": steps}
    _finish(turn_id=turn_id, event_type=EventType.TURN_FAILED,
            data={"stop_reason": "error", "cause": "error", "error": error, "steps": steps},
            fields=fields, timings=timings, meta=meta, pending=pending, policy=policy, holder=holder)


# --- driving -------------------------------------------------------------------


class _Recorder:
    """Persists each loop report as events before the loop takes its next step,
    keeping the turn's running usage and step count on the same write."""

    def __init__(self, *, turn_id: int, holder: str, attempt: int, db: DatabaseThreads, usage: UsageTotals,
                 steps: int, tools: ToolRegistry) -> None:
        self.turn_id = turn_id
        self.holder = holder
        self.tools = tools
        #: step events held back for the finishing transaction (see below)
        self.pending: list[NewEvent] = []
        self.attempt = attempt
        self.db = db
        self.usage = usage
        self.steps = steps

    async def __call__(self, report: Report) -> None:
        if isinstance(report, CompletionReport):
            c = report.completion
            self.usage.add(c)
            self.steps = max(self.steps, report.step)
            base = {"attempt": self.attempt, "step": report.step}
            events = []
            if c.text:
                events.append(NewEvent(EventType.THINKING, {**base, "text": c.text}))
            events.append(NewEvent(EventType.LLM_USAGE, {
                **base, "model": c.model, "input_tokens": c.usage.input_tokens,
                "output_tokens": c.usage.output_tokens, "cost": c.cost, "finish_reason": c.finish_reason,
            }))
            events.extend(NewEvent(EventType.TOOL_CALL, {**base, "call": call.to_dict()}) for call in c.tool_calls)
            fields = {"usage": self.usage.to_dict(), "steps": self.steps, "model": c.model}
        else:
            assert isinstance(report, ToolResultReport)
            event = NewEvent(EventType.TOOL_RESULT,
                             {"attempt": self.attempt, "step": report.step, "result": report.result.to_dict()})
            tool = self.tools.get(report.call.name)
            if tool is not None and tool.ends_turn and not report.result.is_error:
                # Nothing follows a turn-ending tool (final_answer, ask_user)
                # but the terminal event: write both in one transaction. If
                # the process dies before it, resume runs this tool again —
                # it has no side effect.
                self.pending.append(event)
                return
            events, fields = [event], {}
        await self.db.run(event_append_many, turn_id=self.turn_id, events=events, turn_fields=fields,
                          holder=self.holder)


async def _watch(*, turn_id: int, holder: str, cancel: asyncio.Event, db: DatabaseThreads) -> None:
    """Poll the cancel flag every ``CANCEL_POLL_S`` and write the heartbeat
    every ``HEARTBEAT_S``, until cancelled. A turn no longer held (swept to
    interrupted while this driver was merely slow) is cancelled too: its
    appends would be refused anyway, and the loop should stop spending."""
    beat_every = max(CANCEL_POLL_S, min(float(settings.HEARTBEAT_S), float(settings.TURN_STALE_S) / 4))
    last_beat = time.monotonic()
    while not cancel.is_set():
        await asyncio.sleep(CANCEL_POLL_S)
        try:
            if time.monotonic() - last_beat >= beat_every:
                last_beat = time.monotonic()
                flagged, held = await db.run(_poll, turn_id=turn_id, holder=holder, beat=True)
            else:
                flagged, held = await db.run(_poll, turn_id=turn_id, holder=holder, beat=False)
        except Exception:  # noqa: BLE001 - a missed tick is retried on the next one
            logger.warning("turn %s: heartbeat failed", turn_id, exc_info=True)
            continue
        if flagged or not held:
            if not held:
                logger.warning("turn %s: the claim %s was lost; stopping", turn_id, holder)
            cancel.set()


async def drive_turn(
    turn_id: int,
    *,
    policy: TurnPolicy,
    provider: LLMProvider,
    db: DatabaseThreads,
    tools: ToolRegistry | None = None,
    job_id: str = "",
    timeout_s: float | None = None,
) -> DriveResult | None:
    """Run turn ``turn_id`` to a terminal state under ``policy``.

    Returns ``None`` without writing anything when the turn could not be
    claimed (not queued: a duplicate delivery, or already taken). Otherwise
    returns the result, which is also on the turn row and at the end of its
    event log. The agent loop's failures become a ``turn.failed`` event; so do
    unexpected exceptions in the driver (re-raised after recording only if they
    are ``asyncio.CancelledError``, which leaves the turn running for the
    sweeper to mark interrupted).
    """
    started = time.monotonic()
    claim = await db.run(turn_claim, turn_id=turn_id, job_id=job_id)
    if claim is None:
        return None
    turn, fresh = claim
    holder = turn.job_id
    attempt = turn.attempts
    recorded = [] if fresh else await db.run(recorded_steps, turn_id=turn_id, attempt=attempt)
    usage = UsageTotals()
    for step in recorded:
        usage.add(step.completion)
    tools = tools or shared_default_tools()
    recorder = _Recorder(turn_id=turn_id, holder=holder, attempt=attempt, db=db, usage=usage, steps=len(recorded), tools=tools)
    cancel = asyncio.Event()
    watcher = asyncio.create_task(_watch(turn_id=turn_id, holder=holder, cancel=cancel, db=db))

    async def gate(call: ToolCall) -> ApprovalDecision:
        return await policy.approval(turn_id=turn_id, call=call, db=db)

    timeout = timeout_s if timeout_s is not None else float(settings.AGENTLAB_TURN_TIMEOUT_S)
    loop = AgentLoop(provider, tools, max_steps=turn.max_steps)
    timings: dict[str, int] = {}
    try:
        act_started = time.monotonic()
        result = await loop.run(
            turn.question,
            context=ToolContext(documents=list((turn.context or {}).get("documents") or []),
                                metadata=dict(turn.context or {})),
            on_report=recorder,
            cancel=cancel,
            recorded=recorded,
            approval=gate,
            deadline=time.monotonic() + timeout if timeout else None,
        )
        timings["act_ms"] = int((time.monotonic() - act_started) * 1000)
        timings["total_ms"] = int((time.monotonic() - started) * 1000)
        event_type, data, fields = finish_fields(result)
        meta = turn.meta or {}
        if result.stop_reason == "cancelled":
            # turn_cancel wrote who asked into meta after this driver claimed
            meta = await db.run(_current_meta, turn_id=turn_id)
            data["by"] = (meta.get("cancel") or {}).get("by")
        await db.run(_finish, turn_id=turn_id, event_type=event_type, data=data, fields=fields,
                     timings={**(turn.timings or {}), **timings}, meta=meta, pending=recorder.pending,
                     policy=policy, holder=holder)
        return DriveResult(
            turn_id=turn_id, status=fields["status"], outcome=fields["outcome"], stop_reason=result.stop_reason,
            answer=result.answer, evidence=result.evidence, reasoning=result.reasoning, steps=result.steps_used,
            usage=result.usage.to_dict(), error=result.error, latency_ms=timings["total_ms"],
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - every path reaches a terminal event
        logger.exception("turn %s: driver failed", turn_id)
        error = f"{type(exc).__name__}: {exc}"
        timings["total_ms"] = int((time.monotonic() - started) * 1000)
        try:
            await db.run(_fail_unexpected, turn_id=turn_id, error=error, usage=usage.to_dict(),
                         steps=recorder.steps, timings={**(turn.timings or {}), **timings}, meta=turn.meta or {},
                         pending=recorder.pending, policy=policy, holder=holder)
        except Exception:  # noqa: BLE001 - the sweeper will mark it interrupted
            logger.exception("turn %s: could not record the failure", turn_id)
        return DriveResult(
            turn_id=turn_id, status=TurnStatus.FAILED, outcome=TurnOutcome.FAILED, stop_reason="error",
            answer="", evidence="", reasoning="", steps=recorder.steps, usage=usage.to_dict(), error=error,
            latency_ms=timings["total_ms"],
        )
    finally:
        cancel.set()
        watcher.cancel()

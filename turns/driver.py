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
import weakref
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentlab.agent.loop import (
    AgentLoop,
    ApprovalDecision,
    CompletionReport,
    LoopResult,
    Report,
    ToolResultReport,
)
from agentlab.agent.review import Review, retry_question, review_answer
from agentlab.agent.tools import ToolContext, ToolRegistry, default_registry
from agentlab.agent.types import Completion, LLMProvider, Step, ToolCall, ToolResult, Usage
from agentlab.agent.usage import UsageTotals
from common.db import DatabaseThreads

from .events import ClaimedTurn, NewEvent, TurnNotHeld, event_append_claim, event_append_many, json_safe
from .models import Approval, ApprovalStatus, EventType, Turn, TurnEvent, TurnOutcome, TurnPhase, TurnStatus

logger = logging.getLogger(__name__)


class TurnPolicy:
    """What differs between a chat turn and an evaluation turn (DESIGN.md §8).

    ``approval`` decides a tool call that needs approval: ``"approved"`` runs
    it, ``"rejected"`` ends the turn as rejected, ``"unavailable"`` stops the
    loop with stop reason ``approval_required``.

    ``review`` turns the review phase on or off; ``None`` follows the
    ``AGENTLAB_REVIEW`` setting. ``review_wait_s()`` is how long the driver
    waits for a review before finishing without it (``None``: until it comes).
    """

    name = "base"

    def __init__(self, *, review: bool | None = None) -> None:
        self._review = review

    def review_enabled(self) -> bool:
        return bool(settings.AGENTLAB_REVIEW) if self._review is None else self._review

    def review_wait_s(self) -> float | None:
        return None

    def on_finish(self, *, turn_id: int, turn_fields: Mapping[str, Any]) -> None:
        """Called inside the transaction that writes the turn's terminal event,
        after the turn row has its final fields — ``turn_fields``, the fields
        just written (status, outcome, answer, evidence, reasoning, steps,
        stop_reason, usage, meta, timings …): what the caller records here
        commits or rolls back with the end of the turn."""

    async def approval(
        self, *, turn_id: int, call: ToolCall, db: DatabaseThreads, holder: str
    ) -> ApprovalDecision:
        return "unavailable"


class EvaluationPolicy(TurnPolicy):
    """Evaluation: nobody is there to approve, so a tool that needs approval
    cancels the turn with stop reason ``approval_required``; a review is
    waited for however long it takes.

    ``finish`` (called as ``finish(turn_id=…, turn_fields=…)``, see
    ``TurnPolicy.on_finish``), when given, runs in the terminal event's
    transaction — ``run_eval`` completes the example's prediction there, so a
    finished turn never lacks its prediction.
    """

    name = "evaluation"

    def __init__(self, finish: Callable[..., None] | None = None, *, review: bool | None = None) -> None:
        super().__init__(review=review)
        self._finish = finish

    def on_finish(self, *, turn_id: int, turn_fields: Mapping[str, Any]) -> None:
        if self._finish is not None:
            self._finish(turn_id=turn_id, turn_fields=turn_fields)


class ChatPolicy(TurnPolicy):
    """Chat: the turn's owner is watching. A tool that needs approval waits
    for a human decision (status ``waiting``, see ``approval_wait``); a review
    is waited for at most ``REVIEW_WAIT_S`` seconds, and a late one is still
    recorded after the turn has finished."""

    name = "chat"

    def review_wait_s(self) -> float | None:
        return float(settings.REVIEW_WAIT_S)

    async def approval(
        self, *, turn_id: int, call: ToolCall, db: DatabaseThreads, holder: str
    ) -> ApprovalDecision:
        return await approval_wait(turn_id=turn_id, call=call, db=db, holder=holder)


EVALUATION = EvaluationPolicy()
CHAT = ChatPolicy()

#: How often the driver looks at the cancel flag while a turn runs (seconds).
CANCEL_POLL_S = 0.5

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


# --- claiming and rebuilding (sync; run on database threads) -------------------


def turn_claim(*, turn_id: int, job_id: str = "") -> ClaimedTurn | None:
    """Claim a queued turn for this job: ``queued → running`` by a conditional
    update, with its ``turn.started`` and ``phase: act`` events
    (``event_append_claim``). Returns the turn as claimed — ``fresh`` when it
    never ran before, so there is no recorded step to rebuild — or ``None``
    when someone else has it (or it is no longer queued); then nothing is
    written. (healthchecks ``sendalerts``.)

    The claim stores a token unique to this claim in ``turn.job_id`` (the job
    id plus a random suffix); every later write of this driver is conditional
    on it (``event_append_many(holder=…)``).
    """
    job_id = f"{job_id[:40] or 'inline'}:{uuid.uuid4().hex[:16]}"
    with transaction.atomic():
        claimed = event_append_claim(
            turn_id=turn_id,
            job_id=job_id,
            count=2,
            events=lambda turn: [
                NewEvent(EventType.TURN_STARTED, {"attempt": turn.attempts, "job_id": job_id}),
                NewEvent(EventType.PHASE, {"phase": TurnPhase.ACT}),
            ],
        )
    return None if claimed is None else claimed[0]


def recorded_steps(*, turn_id: int, attempt: int) -> list[Step]:
    """Rebuild the agent's steps of one attempt from the turn's event log.

    ``llm.usage`` events carry the completion's usage, model and finish reason,
    ``thinking`` its text, ``tool.call`` its calls and ``tool.result`` the
    observations, each tagged with ``step``. A step whose process died between
    tools comes back with fewer results than calls.
    """
    by_step: dict[int, dict[str, Any]] = defaultdict(
        lambda: {"text": None, "calls": [], "results": [], "usage": None}
    )
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


def _poll(*, holders: Mapping[int, str], beat: bool) -> dict[int, tuple[bool, bool]]:
    """For each watched turn (``turn id → claim token``): ``(cancel flag,
    still held)``. With ``beat``, first write the heartbeat of every turn
    still held. Two statements for any number of turns."""
    active = Turn.objects.filter(pk__in=list(holders), status__in=(TurnStatus.RUNNING, TurnStatus.WAITING))
    if beat:
        # a claim token belongs to one claim of one turn: job_id IN (ours)
        # matches exactly the turns still held by their watcher
        active.filter(job_id__in=list(holders.values())).update(heartbeat_at=timezone.now())
    found = {
        pk: (bool(flag), job_id == holders[pk])
        for pk, job_id, flag in active.values_list("pk", "job_id", "cancel_requested")
    }
    return {turn_id: found.get(turn_id, (False, False)) for turn_id in holders}


# --- approvals (chat) ------------------------------------------------------------


def approval_open(*, turn_id: int, call: ToolCall, holder: str) -> tuple[int, str]:
    """Find the approval of ``call`` (by tool call id) or create it; return
    ``(approval_id, status)``.

    A decided approval (the turn was resumed after a human decided) is
    returned as it is and nothing is written. Otherwise, in one transaction,
    a new approval row (deadline ``APPROVAL_TIMEOUT_S`` from now, or none) is
    created and ``approval.requested`` ``{"approval_id", "call", "deadline"}``
    appended with the turn set to ``waiting`` — only while ``holder`` holds
    the turn (``TurnNotHeld`` otherwise, and the row is rolled back). A pending
    approval found again on resume gets the event again, with ``"resumed": true``.
    """
    with transaction.atomic():
        approval = Approval.objects.filter(turn_id=turn_id, tool_call__id=call.id).order_by("pk").first()
        if approval is not None and approval.status != ApprovalStatus.PENDING:
            return approval.pk, approval.status
        data: dict[str, Any] = {}
        if approval is None:
            timeout = settings.APPROVAL_TIMEOUT_S
            deadline = timezone.now() + timedelta(seconds=float(timeout)) if timeout else None
            approval = Approval.objects.create(
                turn_id=turn_id, tool_call=json_safe(call.to_dict()), deadline=deadline
            )
        else:
            data["resumed"] = True
        data.update(
            approval_id=approval.pk,
            call=call.to_dict(),
            deadline=approval.deadline.isoformat() if approval.deadline else None,
        )
        event_append_many(
            turn_id=turn_id,
            events=[NewEvent(EventType.APPROVAL_REQUESTED, data)],
            turn_fields={"status": TurnStatus.WAITING},
            holder=holder,
        )
    return approval.pk, ApprovalStatus.PENDING


def approval_poll(*, approval_id: int, turn_id: int, holder: str) -> str:
    """The approval's status; a pending one past its deadline is expired here.

    Expiry is a conditional update (``pending → expired``), so it and a
    concurrent human decision cannot both count: whichever updates the row
    first wins and the other finds nothing to update (``approval_decide``
    then answers 409). The expiry's ``approval.resolved`` ``{"approval_id",
    "status": "expired", "by": None, "tool"}`` is written in the same
    transaction, holder-guarded. Human decisions write their own
    ``approval.resolved`` (``approval_decide``); this never writes a second.
    """
    approval = Approval.objects.get(pk=approval_id)
    now = timezone.now()
    if (
        approval.status == ApprovalStatus.PENDING
        and approval.deadline is not None
        and approval.deadline <= now
    ):
        with transaction.atomic():
            # turn row first, as approval_decide does: one lock order, no deadlock
            list(Turn.objects.select_for_update().filter(pk=turn_id).values_list("pk", flat=True))
            expired = Approval.objects.filter(pk=approval_id, status=ApprovalStatus.PENDING).update(
                status=ApprovalStatus.EXPIRED, decided_at=now
            )
            if expired == 1:
                event_append_many(
                    turn_id=turn_id,
                    events=[
                        NewEvent(
                            EventType.APPROVAL_RESOLVED,
                            {
                                "approval_id": approval_id,
                                "status": ApprovalStatus.EXPIRED,
                                "by": None,
                                "tool": (approval.tool_call or {}).get("name"),
                            },
                        )
                    ],
                    holder=holder,
                )
                return ApprovalStatus.EXPIRED
        approval.refresh_from_db()
    return approval.status


def _running_again(*, turn_id: int, holder: str) -> None:
    """``waiting → running`` once the approval is decided (holder-guarded)."""
    updated = Turn.objects.filter(pk=turn_id, job_id=holder, status=TurnStatus.WAITING).update(
        status=TurnStatus.RUNNING, heartbeat_at=timezone.now()
    )
    if (
        updated != 1
        and not Turn.objects.filter(pk=turn_id, job_id=holder, status=TurnStatus.RUNNING).exists()
    ):
        raise TurnNotHeld(f"turn {turn_id} is no longer held by {holder}")


async def approval_wait(
    *, turn_id: int, call: ToolCall, db: DatabaseThreads, holder: str
) -> ApprovalDecision:
    """The chat policy's approval gate: open (or find) the approval of
    ``call``, then poll it every ``CANCEL_POLL_S`` until it is decided or
    expires. ``approved`` → the tool runs; ``rejected`` or ``expired`` →
    ``"rejected"``. The agent loop awaits this under its cancel guard, and the
    driver's watcher keeps writing heartbeats and reading the cancel flag
    meanwhile, so a cancel ends the wait within ``CANCEL_POLL_S``.
    """
    approval_id, status = await db.run(approval_open, turn_id=turn_id, call=call, holder=holder)
    while status == ApprovalStatus.PENDING:
        await asyncio.sleep(CANCEL_POLL_S)
        status = await db.run(approval_poll, approval_id=approval_id, turn_id=turn_id, holder=holder)
    await db.run(_running_again, turn_id=turn_id, holder=holder)
    return "approved" if status == ApprovalStatus.APPROVED else "rejected"


def _approval_status_of(*, turn_id: int, call_id: str) -> str | None:
    return (
        Approval.objects.filter(turn_id=turn_id, tool_call__id=call_id)
        .values_list("status", flat=True)
        .first()
    )


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
        fields.update(
            status=TurnStatus.SUCCEEDED,
            outcome=TurnOutcome.ANSWERED,
            answer=result.answer,
            evidence=result.evidence,
            reasoning=result.reasoning,
        )
        data.update(answer=result.answer, evidence=result.evidence, reasoning=result.reasoning)
        return EventType.TURN_ANSWERED, data, fields
    if stop == "asked":
        fields.update(
            status=TurnStatus.SUCCEEDED, outcome=TurnOutcome.ASKED, clarifying_question=result.question or ""
        )
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


def _finish(
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
    meta = dict(meta)
    if event_type == EventType.TURN_FAILED:
        meta["failure_cause"] = data.get("cause")
        if data.get("error"):
            meta["failure_error"] = data["error"]
    turn_fields = {**fields, "meta": meta, "timings": timings}
    with transaction.atomic():
        event_append_many(
            turn_id=turn_id,
            events=[
                *pending,
                NewEvent(EventType.PHASE, {"phase": TurnPhase.FINISH}),
                NewEvent(event_type, data),
            ],
            turn_fields=turn_fields,
            holder=holder,
        )
        policy.on_finish(turn_id=turn_id, turn_fields=turn_fields)


def _fail_unexpected(
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
    _finish(
        turn_id=turn_id,
        event_type=EventType.TURN_FAILED,
        data={"stop_reason": "error", "cause": "error", "error": error, "steps": steps},
        fields=fields,
        timings=timings,
        meta=meta,
        pending=pending,
        policy=policy,
        holder=holder,
    )


# --- driving -------------------------------------------------------------------


class _Recorder:
    """Persists each loop report as events before the loop takes its next step,
    keeping the turn's running usage and step count on the same write.

    A step that only ends the turn — a completion whose calls are all
    turn-ending tools (``final_answer``, ``ask_user``), and their successful
    results — is held back in ``pending`` / ``pending_fields`` and written
    with the next write: the terminal event's transaction (or the review
    phase's first event). Nothing but the end of the turn follows such a
    step, those tools have no side effect, and a process that dies before
    that write leaves a turn whose resume asks the model again — while every
    evaluated example saves one transaction. Any other write first flushes
    what is pending, so the log keeps its order.
    """

    def __init__(
        self,
        *,
        turn_id: int,
        holder: str,
        attempt: int,
        db: DatabaseThreads,
        usage: UsageTotals,
        steps: int,
        tools: ToolRegistry,
    ) -> None:
        self.turn_id = turn_id
        self.holder = holder
        self.tools = tools
        #: step events held back for the finishing transaction (see above)
        self.pending: list[NewEvent] = []
        #: turn fields that go with ``pending``
        self.pending_fields: dict[str, Any] = {}
        self.attempt = attempt
        self.db = db
        self.usage = usage
        self.steps = steps

    def _ends_turn(self, call: ToolCall) -> bool:
        tool = self.tools.get(call.name)
        return tool is not None and tool.ends_turn and call.error is None

    async def __call__(self, report: Report) -> None:
        if isinstance(report, CompletionReport):
            c = report.completion
            self.usage.add(c)
            self.steps = max(self.steps, report.step)
            base = {"attempt": self.attempt, "step": report.step}
            events = []
            if c.text:
                events.append(NewEvent(EventType.THINKING, {**base, "text": c.text}))
            events.append(
                NewEvent(
                    EventType.LLM_USAGE,
                    {
                        **base,
                        "model": c.model,
                        "input_tokens": c.usage.input_tokens,
                        "output_tokens": c.usage.output_tokens,
                        "cost": c.cost,
                        "finish_reason": c.finish_reason,
                    },
                )
            )
            events.extend(
                NewEvent(EventType.TOOL_CALL, {**base, "call": call.to_dict()}) for call in c.tool_calls
            )
            fields = {"usage": self.usage.to_dict(), "steps": self.steps, "model": c.model}
            hold = bool(c.tool_calls) and all(self._ends_turn(call) for call in c.tool_calls)
        else:
            assert isinstance(report, ToolResultReport)
            events = [
                NewEvent(
                    EventType.TOOL_RESULT,
                    {"attempt": self.attempt, "step": report.step, "result": report.result.to_dict()},
                )
            ]
            fields = {}
            hold = self._ends_turn(report.call) and not report.result.is_error
        if hold:
            self.pending.extend(events)
            self.pending_fields.update(fields)
            return
        await self.db.run(
            event_append_many,
            turn_id=self.turn_id,
            events=[*self.pending, *events],
            turn_fields={**self.pending_fields, **fields},
            holder=self.holder,
        )
        self.pending, self.pending_fields = [], {}


class _Watch:
    """Watches every turn driven on one database pool: every ``CANCEL_POLL_S``
    one query reads the cancel flags and claims of all of them, and every
    ``HEARTBEAT_S`` (at most a quarter of ``TURN_STALE_S``) one update writes
    their heartbeats — instead of a poller per turn, whose queries were a
    fifth of ``run_eval``'s database work at 32 turns at once.

    A turn whose flag is set, or that is no longer held (swept to interrupted
    while its driver was merely slow), gets its ``cancel`` event set: its
    appends would be refused anyway, and the loop should stop spending. The
    polling task runs on the loop of the drivers while any turn is watched.
    """

    def __init__(self, db: DatabaseThreads) -> None:
        self.db = db
        self.turns: dict[int, tuple[str, asyncio.Event]] = {}
        self.task: asyncio.Task[None] | None = None

    def add(self, *, turn_id: int, holder: str, cancel: asyncio.Event) -> None:
        self.turns[turn_id] = (holder, cancel)
        loop = asyncio.get_running_loop()
        if self.task is None or self.task.done() or self.task.get_loop() is not loop:
            self.task = loop.create_task(self._run())

    def discard(self, turn_id: int, holder: str) -> None:
        if self.turns.get(turn_id, ("",))[0] == holder:
            del self.turns[turn_id]

    async def _run(self) -> None:
        beat_every = max(CANCEL_POLL_S, min(float(settings.HEARTBEAT_S), float(settings.TURN_STALE_S) / 4))
        last_beat = time.monotonic()
        while self.turns:
            await asyncio.sleep(CANCEL_POLL_S)
            watched = dict(self.turns)
            if not watched:
                break
            beat = time.monotonic() - last_beat >= beat_every
            try:
                states = await self.db.run(_poll, holders={t: h for t, (h, _) in watched.items()}, beat=beat)
            except Exception:
                logger.warning("turn watch: polling %d turns failed", len(watched), exc_info=True)
                continue
            if beat:
                last_beat = time.monotonic()
            for turn_id, (holder, cancel) in watched.items():
                flagged, held = states[turn_id]
                if (flagged or not held) and self.turns.get(turn_id, ("",))[0] == holder:
                    if not held:
                        logger.warning("turn %s: the claim %s was lost; stopping", turn_id, holder)
                    cancel.set()


_watches: weakref.WeakKeyDictionary[DatabaseThreads, _Watch] = weakref.WeakKeyDictionary()


def _watch_of(db: DatabaseThreads) -> _Watch:
    watch = _watches.get(db)
    if watch is None:
        watch = _watches[db] = _Watch(db)
    return watch


# --- attempts and review ---------------------------------------------------------


def _attempt_question(*, question: str, meta: dict[str, Any]) -> str:
    """The question an attempt is asked: the turn's own, or — after a review
    asked for a retry — with the previous answer and the instruction
    (``meta["retry_context"]``, kept for resumes and continued attempts)."""
    context = meta.get("retry_context")
    if not context:
        return question
    return retry_question(
        question=question,
        previous_answer=str(context.get("previous_answer") or ""),
        instruction=str(context.get("instruction") or ""),
    )


def _continued_attempts(*, meta: dict[str, Any], attempt: int) -> list[int]:
    """The earlier attempts whose steps attempt ``attempt`` continues from
    (``turn_continue`` archives them with ``reason == "continue"``), oldest first."""
    archived = {int(a.get("attempt", 0)): a for a in meta.get("attempts", [])}
    chain: list[int] = []
    current = attempt
    while archived.get(current - 1, {}).get("reason") == "continue":
        current -= 1
        chain.insert(0, current)
    return chain


def attempt_steps(*, turn_id: int, attempt: int, meta: dict[str, Any]) -> tuple[list[Step], list[Step]]:
    """``(inherited, own)`` recorded steps of ``attempt``: steps of the attempts
    it continues (not re-run, not counted in its usage) and its own."""
    inherited: list[Step] = []
    for earlier in _continued_attempts(meta=meta, attempt=attempt):
        inherited.extend(recorded_steps(turn_id=turn_id, attempt=earlier))
    return inherited, recorded_steps(turn_id=turn_id, attempt=attempt)


def _auto_retries(meta: dict[str, Any]) -> int:
    return sum(1 for a in meta.get("attempts", []) if a.get("reason") == "review")


def _completion_usage(completion: Completion | None) -> dict[str, Any] | None:
    if completion is None:
        return None
    return {
        "model": completion.model,
        "input_tokens": completion.usage.input_tokens,
        "output_tokens": completion.usage.output_tokens,
        "cost": completion.cost,
    }


def _review_data(
    *, attempt: int, review: Review, completion: Completion | None, late: bool
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "attempt": attempt,
        "verdict": review.verdict,
        "note": review.note,
        "retry_instruction": review.retry_instruction,
        "usage": _completion_usage(completion),
        "late": late,
    }
    if review.error:
        data["error"] = review.error
    return data


async def _run_review(
    provider: LLMProvider, *, question: str, result: LoopResult
) -> tuple[Review, Completion | None]:
    """One review call; any failure becomes a ``failed`` review (the turn does not fail)."""
    try:
        return await review_answer(
            provider,
            question=question,
            answer=result.answer,
            evidence=result.evidence,
            reasoning=result.reasoning,
            steps=result.steps,
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.warning("review failed", exc_info=True)
        return Review("failed", error=f"{type(exc).__name__}: {exc}"), None


def review_append_late(
    *, turn_id: int, attempt: int, data: dict[str, Any], completion: Completion | None
) -> bool:
    """Record a review that arrived after its turn finished (``late: true``).

    The turn is no longer held by anyone, so this appends without a holder;
    it is guarded instead by the turn's row lock and a check that attempt
    ``attempt`` has no ``review`` event yet, so it is written at most once.
    The review's usage is added to the turn's usage (by model) when the turn
    is still on that attempt, and the verdict is kept in ``meta["review"]``.
    Returns whether it was written.
    """
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if TurnEvent.objects.filter(turn_id=turn_id, type=EventType.REVIEW, data__attempt=attempt).exists():
            return False
        fields: dict[str, Any] = {}
        if turn.attempts == attempt:
            if completion is not None:
                totals = UsageTotals.from_dict(turn.usage)
                totals.add(completion)
                fields["usage"] = totals.to_dict()
            fields["meta"] = {**(turn.meta or {}), "review": data}
        event_append_many(turn_id=turn_id, events=[NewEvent(EventType.REVIEW, data)], turn_fields=fields)
    return True


@dataclass
class _Attempt:
    """The driver's running state of the current attempt."""

    number: int
    question: str
    recorder: _Recorder
    act_ms: int = 0


# --- driving the turn --------------------------------------------------------------


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
    """
    started = time.monotonic()
    turn = await db.run(turn_claim, turn_id=turn_id, job_id=job_id)
    if turn is None:
        return None
    holder = turn.job_id
    meta: dict[str, Any] = dict(turn.meta or {})
    tools = tools or shared_default_tools()
    inherited, own = (
        ([], [])
        if turn.fresh
        else await db.run(attempt_steps, turn_id=turn_id, attempt=turn.attempts, meta=meta)
    )

    def new_attempt(number: int, steps_before: int, own_steps: list[Step]) -> _Attempt:
        usage = UsageTotals()
        for step in own_steps:
            usage.add(step.completion)
        recorder = _Recorder(
            turn_id=turn_id,
            holder=holder,
            attempt=number,
            db=db,
            usage=usage,
            steps=steps_before + len(own_steps),
            tools=tools,
        )
        return _Attempt(
            number=number, question=_attempt_question(question=turn.question, meta=meta), recorder=recorder
        )

    current = new_attempt(turn.attempts, len(inherited), own)
    recorded = [*inherited, *own]
    cancel = asyncio.Event()
    watch = _watch_of(db)
    watch.add(turn_id=turn_id, holder=holder, cancel=cancel)
    late_review: asyncio.Task[tuple[Review, Completion | None]] | None = None

    async def gate(call: ToolCall) -> ApprovalDecision:
        return await policy.approval(turn_id=turn_id, call=call, db=db, holder=holder)

    timeout = timeout_s if timeout_s is not None else float(settings.AGENTLAB_TURN_TIMEOUT_S)
    deadline = time.monotonic() + timeout if timeout else None
    timings: dict[str, int] = {}
    try:
        while True:
            loop = AgentLoop(provider, tools, max_steps=turn.max_steps)
            act_started = time.monotonic()
            result = await loop.run(
                current.question,
                context=ToolContext(
                    documents=list((turn.context or {}).get("documents") or []),
                    metadata=dict(turn.context or {}),
                ),
                on_report=current.recorder,
                cancel=cancel,
                recorded=recorded,
                approval=gate,
                deadline=deadline,
            )
            timings["act_ms"] = timings.get("act_ms", 0) + int((time.monotonic() - act_started) * 1000)
            if result.stop_reason != "final" or not policy.review_enabled() or cancel.is_set():
                break
            review_started = time.monotonic()
            review, late_review = await _review_phase(
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
            if review is None or not review.wants_retry or _auto_retries(meta) >= 1 or cancel.is_set():
                break
            meta = await _retry_after_review(
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
            meta = {**meta, "cancel": (await db.run(_current_meta, turn_id=turn_id)).get("cancel")}
            data["by"] = (meta.get("cancel") or {}).get("by")
        if result.stop_reason == "approval_rejected" and result.pending_call is not None:
            status = await db.run(_approval_status_of, turn_id=turn_id, call_id=result.pending_call.id)
            if status == ApprovalStatus.EXPIRED:
                data["reason"] = "the approval expired"
        await db.run(
            _finish,
            turn_id=turn_id,
            event_type=event_type,
            data=data,
            fields={**current.recorder.pending_fields, **fields},
            timings={**(turn.timings or {}), **timings},
            meta=meta,
            pending=current.recorder.pending,
            policy=policy,
            holder=holder,
        )
        if late_review is not None:
            await _record_late_review(turn_id=turn_id, attempt=current.number, task=late_review, db=db)
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
                _fail_unexpected,
                turn_id=turn_id,
                error=error,
                usage=recorder.usage.to_dict(),
                steps=recorder.steps,
                timings={**(turn.timings or {}), **timings},
                meta=meta,
                pending=recorder.pending,
                pending_fields=recorder.pending_fields,
                policy=policy,
                holder=holder,
            )
        except Exception:
            logger.exception("turn %s: could not record the failure", turn_id)
        return DriveResult(
            turn_id=turn_id,
            status=TurnStatus.FAILED,
            outcome=TurnOutcome.FAILED,
            stop_reason="error",
            answer="",
            evidence="",
            reasoning="",
            steps=recorder.steps,
            usage=recorder.usage.to_dict(),
            error=error,
            latency_ms=timings["total_ms"],
        )
    finally:
        cancel.set()
        watch.discard(turn_id, holder)
        if late_review is not None and not late_review.done():
            late_review.cancel()


async def _review_phase(
    *,
    turn_id: int,
    holder: str,
    attempt: _Attempt,
    provider: LLMProvider,
    policy: TurnPolicy,
    question: str,
    result: LoopResult,
    cancel: asyncio.Event,
    db: DatabaseThreads,
    meta: dict[str, Any],
) -> tuple[Review | None, asyncio.Task[tuple[Review, Completion | None]] | None]:
    """Review an answered attempt; returns ``(review, None)`` when it came in
    time (its ``review`` event written, its usage added to the attempt's),
    ``(None, task)`` when the policy's wait ran out first (the caller records
    the task's result after finishing), ``(None, None)`` when the turn was
    cancelled meanwhile (the review is abandoned; the answer stands).

    The held-back final step (``final_answer``'s completion and result) is
    written with the ``phase: review`` event, so the log shows the answer
    before its review.
    """
    recorder = attempt.recorder
    await db.run(
        event_append_many,
        turn_id=turn_id,
        events=[*recorder.pending, NewEvent(EventType.PHASE, {"phase": TurnPhase.REVIEW})],
        turn_fields={**recorder.pending_fields, "phase": TurnPhase.REVIEW},
        holder=holder,
    )
    recorder.pending, recorder.pending_fields = [], {}
    task = asyncio.create_task(_run_review(provider, question=question, result=result))
    stop = asyncio.ensure_future(cancel.wait())
    try:
        done, _ = await asyncio.wait(
            {task, stop}, timeout=policy.review_wait_s(), return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stop.cancel()
    if task not in done:
        if cancel.is_set():
            task.cancel()
            return None, None
        return None, task
    review, completion = task.result()
    if completion is not None:
        recorder.usage.add(completion)
    data = _review_data(attempt=attempt.number, review=review, completion=completion, late=False)
    meta["review"] = data
    await db.run(
        event_append_many,
        turn_id=turn_id,
        events=[NewEvent(EventType.REVIEW, data)],
        turn_fields={"usage": recorder.usage.to_dict()},
        holder=holder,
    )
    return review, None


async def _retry_after_review(
    *,
    turn_id: int,
    holder: str,
    attempt: _Attempt,
    result: LoopResult,
    review: Review,
    db: DatabaseThreads,
    meta: dict[str, Any],
) -> dict[str, Any]:
    """Archive the reviewed attempt and start the next one (one transaction,
    holder-guarded): ``attempt.retry`` ``{"attempt": next, "reason": "review",
    "instruction", "previous": {…}}`` then ``phase: act``. Returns the new meta."""
    number = attempt.number
    own = [s for s in result.steps]
    archived = {
        "attempt": number,
        "reason": "review",
        "status": TurnStatus.SUCCEEDED,
        "outcome": TurnOutcome.ANSWERED,
        "stop_reason": result.stop_reason,
        "answer": result.answer,
        "evidence": result.evidence,
        "reasoning": result.reasoning,
        "question": attempt.question,
        "steps": result.steps_used,
        "usage": attempt.recorder.usage.to_dict(),
        "review": meta.get("review"),
        "trace": [s.to_dict() for s in own],
        "finished_at": timezone.now().isoformat(),
    }
    current = await db.run(_current_meta, turn_id=turn_id)
    new_meta = {**current, **{k: v for k, v in meta.items() if k not in current}}
    new_meta.pop("review", None)
    new_meta["attempts"] = [*current.get("attempts", []), json_safe(archived)]
    new_meta["retry_context"] = {"previous_answer": result.answer, "instruction": review.retry_instruction}
    await db.run(
        event_append_many,
        turn_id=turn_id,
        events=[
            NewEvent(
                EventType.ATTEMPT_RETRY,
                {
                    "attempt": number + 1,
                    "reason": "review",
                    "instruction": review.retry_instruction,
                    "previous": {
                        "attempt": number,
                        "status": TurnStatus.SUCCEEDED,
                        "outcome": TurnOutcome.ANSWERED,
                        "stop_reason": result.stop_reason,
                        "answer": result.answer,
                    },
                },
            ),
            NewEvent(EventType.PHASE, {"phase": TurnPhase.ACT}),
        ],
        turn_fields={
            "attempts": number + 1,
            "meta": new_meta,
            "usage": {},
            "steps": 0,
            "phase": TurnPhase.ACT,
        },
        holder=holder,
    )
    return new_meta


async def _record_late_review(
    *, turn_id: int, attempt: int, task: asyncio.Task[tuple[Review, Completion | None]], db: DatabaseThreads
) -> None:
    """Wait for a review that missed the chat wait and append it (``late: true``)."""
    try:
        review, completion = await task
        data = _review_data(attempt=attempt, review=review, completion=completion, late=True)
        await db.run(review_append_late, turn_id=turn_id, attempt=attempt, data=data, completion=completion)
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("turn %s: could not record the late review", turn_id)

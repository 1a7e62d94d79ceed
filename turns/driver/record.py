"""Recording a drive as events (docs/architecture.md#the-driver): the agent
loop's reports persisted before its next step (``Recorder``), a streaming
completion's text coalesced into ``llm.delta`` events (``DeltaCoalescer``),
and the ``load`` phase while the model is loaded before the first step
(``model_load``).

**Deltas** (docs/architecture.md#the-event-log). The agent loop hands the
visible text of a streaming reply over in small pieces
(``agentlab.agent.streaming.TextDelta``, often one token each). Each event
is a transaction and a doorbell, so the driver writes the text that arrived
since the last write at most every ``DELTA_INTERVAL_S`` per turn — about 10
events a second — and at most ``DELTA_MAX_EVENTS`` times per completion:
past ``DELTA_SLOW_AFTER`` events the interval grows to
``DELTA_SLOW_INTERVAL_S``, and once the bound is reached what remains waits
for the completion's own write. What is still buffered when the completion
arrives is written in the same transaction as the step's events
(``Recorder``), before them, so the log reads text-then-record and a
reconnecting client resumes mid-answer exactly where it left off.

Only the chat policy streams (``TurnPolicy.streams``): an evaluation turn has
nobody watching, and its throughput is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.agent.reports import (
    CompletionReport,
    DivergenceReport,
    LLMRequest,
    Report,
    ToolResultReport,
    ToolStartReport,
)
from agentlab.agent.streaming import TextDelta
from agentlab.agent.text import SafeJson, json_safe
from agentlab.agent.tools import ToolRegistry
from agentlab.agent.types import ToolCall
from agentlab.agent.usage import UsageTotals
from agentlab.telemetry import attempt_begins, tool_report
from turns.driver.context import DriveContext
from turns.driver.writer import events_write
from turns.event_types import (
    LLMDeltaData,
    LLMRequestData,
    LLMUsageData,
    PhaseData,
    ReplayDivergenceData,
    ThinkingData,
    ToolCallEventData,
    ToolResultEventData,
    ToolStartedData,
)
from turns.events import NewEvent
from turns.models import EventType, TurnPhase

logger = logging.getLogger(__name__)

#: Seconds between two ``llm.delta`` writes of one turn (about 10 a second).
DELTA_INTERVAL_S = 0.1
#: After this many events of one completion, write every ``DELTA_SLOW_INTERVAL_S``.
DELTA_SLOW_AFTER = 100
DELTA_SLOW_INTERVAL_S = 0.5
#: The most ``llm.delta`` events one completion writes, its last write included.
DELTA_MAX_EVENTS = 200

Write = Callable[[Sequence[NewEvent]], Awaitable[None]]


class DeltaCoalescer:
    """Buffers one attempt's streamed text and writes it as ``llm.delta`` events.

    Call it (synchronously, on the driver's event loop) with each
    ``TextDelta``; a timer task writes the buffer through ``write`` (an async
    callable taking the events) when ``interval_s`` has passed since the
    last write. ``drain()`` — awaited by the recorder before it writes a
    step's completion — stops the timer, waits for a write in flight, and
    returns the unwritten rest as events for the recorder's own transaction.

    A write that fails (the turn was taken over, the database went away) is
    logged and ends streaming for this attempt: the completion is the record,
    the deltas only show it growing. ``events`` counts the events made.
    """

    def __init__(
        self,
        *,
        attempt: int,
        write: Write,
        interval_s: float = DELTA_INTERVAL_S,
        slow_after: int = DELTA_SLOW_AFTER,
        slow_interval_s: float = DELTA_SLOW_INTERVAL_S,
        max_events: int = DELTA_MAX_EVENTS,
    ) -> None:
        self.attempt = attempt
        self._write = write
        self.interval_s = interval_s
        self.slow_after = slow_after
        self.slow_interval_s = slow_interval_s
        self.max_events = max(1, max_events)
        self.events = 0
        self._key: tuple[int, int] | None = None  # (step, completion) being streamed
        self._written = 0  # characters of the key's text already in events
        self._count = 0  # events of the key so far
        self._buffer: list[str] = []
        self._last_write = 0.0
        self._timer: asyncio.Task[None] | None = None
        self._writing = False
        self._lock = asyncio.Lock()
        self._broken = False

    def __call__(self, delta: TextDelta) -> None:
        if self._broken or not delta.text:
            return
        key = (delta.step, delta.completion)
        if key != self._key:
            # a new completion (the next step, or a retry after a cut
            # stream): an earlier try's unwritten text is of no use any more
            self._key, self._written, self._count, self._buffer = key, 0, 0, []
        self._buffer.append(delta.text)
        if self._timer is None and self._count < self.max_events - 1:
            loop = asyncio.get_running_loop()
            interval = self.slow_interval_s if self._count >= self.slow_after else self.interval_s
            wait = max(0.0, self._last_write + interval - loop.time())
            self._timer = loop.create_task(self._flush_after(wait), name="turn-delta-flush")

    def _take(self) -> list[NewEvent]:
        if not self._buffer or self._key is None:
            return []
        text = "".join(self._buffer)
        self._buffer = []
        step, completion = self._key
        data = LLMDeltaData(
            attempt=self.attempt, step=step, completion=completion, offset=self._written, text=text
        )
        self._written += len(text)
        self._count += 1
        self.events += 1
        return [NewEvent(EventType.LLM_DELTA, data)]

    async def _flush_after(self, wait: float) -> None:
        await asyncio.sleep(wait)
        async with self._lock:
            self._writing = True
            try:
                events = self._take()
                if events:
                    await self._write(events)
            except Exception:
                logger.warning(
                    "attempt %s: writing streamed text failed; not streaming further",
                    self.attempt,
                    exc_info=True,
                )
                self._broken = True
            finally:
                self._writing = False
                self._timer = None
                self._last_write = asyncio.get_running_loop().time()

    async def drain(self) -> list[NewEvent]:
        """The unwritten text as events (``[]`` for none), after any write in
        flight; no timer is left running."""
        timer = self._timer
        if timer is not None and not self._writing:
            timer.cancel()
            self._timer = None
        async with self._lock:
            if self._broken:
                return []
            return self._take()

    async def close(self) -> None:
        """Stop the timer without writing (the attempt is over)."""
        self._broken = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            # its failure was logged; being cancelled is expected
            with contextlib.suppress(BaseException):
                await timer


class Recorder:
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

    ``deltas``: the attempt's streamed text (``DeltaCoalescer``, chat turns);
    what it has not written yet goes first in its completion's write.
    """

    def __init__(
        self,
        ctx: DriveContext,
        *,
        attempt: int,
        usage: UsageTotals,
        steps: int,
        tools: ToolRegistry,
    ) -> None:
        self.ctx = ctx
        self.tools = tools
        #: step events held back for the finishing transaction (see above)
        self.pending: list[NewEvent] = []
        #: turn fields that go with ``pending``
        self.pending_fields: dict[str, Any] = {}
        self.attempt = attempt
        self.usage = usage
        self.steps = steps
        self.deltas: DeltaCoalescer | None = None
        #: the messages of the last request recorded (``request_data``)
        self.last_messages: list[dict[str, Any]] = []
        attempt_begins(attempt)  # the attempt's span (agentlab.telemetry)

    def stream_deltas(self) -> DeltaCoalescer:
        """Start streaming this attempt's text as ``llm.delta`` events."""
        self.deltas = DeltaCoalescer(attempt=self.attempt, write=self.write_deltas)
        return self.deltas

    async def write_deltas(self, events: Sequence[NewEvent]) -> None:
        """Append ``llm.delta`` events (with anything pending before them)."""
        await events_write(
            self.ctx.db,
            turn_id=self.ctx.turn_id,
            events=[*self.pending, *events],
            turn_fields=dict(self.pending_fields),
            holder=self.ctx.holder,
        )
        self.pending, self.pending_fields = [], {}

    def _ends_turn(self, call: ToolCall) -> bool:
        tool = self.tools.get(call.name)
        return tool is not None and tool.ends_turn is not None and call.error is None

    async def __call__(self, report: Report) -> None:
        """Record ``report``: its events appended with the turn's fields, or
        held back (``pending``) when it belongs to a tool call that ends the
        turn, to be written with the terminal event."""
        tool_report(report)  # a tool call's span and counts (agentlab.telemetry)
        if isinstance(report, CompletionReport):
            events, fields, hold = await self._completion(report)
        elif isinstance(report, ToolStartReport):
            events, fields, hold = self._tool_started(report), {}, False
        elif isinstance(report, DivergenceReport):
            events, fields, hold = self._divergence(report), {}, False
        else:
            assert isinstance(report, ToolResultReport)
            events, fields = self._tool_result(report), {}
            hold = self._ends_turn(report.call) and not report.result.is_error
        if hold:
            self.pending.extend(events)
            self.pending_fields.update(fields)
            return
        await events_write(
            self.ctx.db,
            turn_id=self.ctx.turn_id,
            events=[*self.pending, *events],
            turn_fields={**self.pending_fields, **fields},
            holder=self.ctx.holder,
        )
        self.pending, self.pending_fields = [], {}

    async def _completion(self, report: CompletionReport) -> tuple[list[NewEvent], dict[str, Any], bool]:
        """A completion's events (the streamed deltas not yet written, its
        thinking, its usage, its tool calls), the turn's fields it updates,
        and whether to hold them (every call it makes ends the turn)."""
        c = report.completion
        self.usage.add(c, role="agent")
        self.steps = max(self.steps, report.step)
        attempt, step = self.attempt, report.step
        events = await self.deltas.drain() if self.deltas is not None else []
        if c.text:
            events.append(NewEvent(EventType.THINKING, ThinkingData(attempt=attempt, step=step, text=c.text)))
        usage = LLMUsageData(
            attempt=attempt,
            step=step,
            model=c.model,
            input_tokens=c.usage.input_tokens,
            output_tokens=c.usage.output_tokens,
            cost=c.cost,
            finish_reason=c.finish_reason,
            decoding=c.decoding,
        )
        if c.cached:
            usage["cached"] = True
        if report.request is not None:
            usage["request"] = self.request_data(report.request)
        events.append(NewEvent(EventType.LLM_USAGE, usage))
        events.extend(
            NewEvent(
                EventType.TOOL_CALL,
                ToolCallEventData(attempt=attempt, step=step, call=call.to_dict()),  # type: ignore[typeddict-item]
            )
            for call in c.tool_calls
        )
        fields = {"usage": self.usage.to_dict(), "steps": self.steps, "model": c.model}
        hold = bool(c.tool_calls) and all(self._ends_turn(call) for call in c.tool_calls)
        return events, fields, hold

    def request_data(self, request: LLMRequest) -> LLMRequestData:
        """``request`` as the ``llm.usage`` event keeps it: the messages it
        shares with the attempt's previous recorded request left out
        (``LLMRequestData``), JSON-safe."""
        messages = json_safe(request.messages)
        shared = 0
        for before, now in zip(self.last_messages, messages, strict=False):
            if before != now:
                break
            shared += 1
        self.last_messages = messages
        data = LLMRequestData(
            shared=shared,
            messages=messages[shared:],
            tools=json_safe(request.tools),
            max_tokens=request.max_tokens,
            temperature=json_safe(request.temperature),
            response_schema=json_safe(request.response_schema),
        )
        # made safe here: the event's payload is not walked again (SafeJson)
        return SafeJson(data)  # type: ignore[return-value]

    def _tool_started(self, report: ToolStartReport) -> list[NewEvent]:
        started = ToolStartedData(
            attempt=self.attempt,
            step=report.step,
            call_id=report.call.id,
            name=report.call.name,
            idempotency_key=report.key,
            repeat=report.repeat,
        )
        return [NewEvent(EventType.TOOL_STARTED, started)]

    def _tool_result(self, report: ToolResultReport) -> list[NewEvent]:
        data = ToolResultEventData(
            attempt=self.attempt,
            step=report.step,
            result=report.result.to_dict(),  # type: ignore[typeddict-item]
        )
        if report.replayed:
            data["replayed"] = True
        return [NewEvent(EventType.TOOL_RESULT, data)]

    def _divergence(self, report: DivergenceReport) -> list[NewEvent]:
        data = ReplayDivergenceData(
            attempt=self.attempt,
            step=report.step,
            position=report.position,
            recorded=report.recorded,
            call=report.call.to_dict(),  # type: ignore[typeddict-item]
        )
        return [NewEvent(EventType.REPLAY_DIVERGENCE, data)]


@dataclass
class Attempt:
    """The driver's running state of the current attempt: its number, the
    question it is asked and the recorder of its steps."""

    number: int
    question: str
    recorder: Recorder
    act_ms: int = 0
    #: the output-token limit of each call (the turn's, else the setting)
    max_output_tokens: int | None = None


async def model_load(ctx: DriveContext) -> None:
    """Load the drive's provider's model when it is not in memory yet (its ``ready``
    is false: the embedded model, on its first turn in this process, before
    the start-up preload is done), with phase ``load`` in the turn's log
    meanwhile — a turn shows that it is loading, not a silent ``act`` — then
    phase ``act`` again. A provider without ``ready`` (an endpoint) does
    nothing. A model that cannot load is left to the first LLM call to report."""
    provider = ctx.provider
    if getattr(provider, "ready", True):
        return
    await _phase(ctx, TurnPhase.LOAD)
    try:
        await asyncio.to_thread(provider.load)  # type: ignore[attr-defined]
    except Exception:
        logger.warning("turn %s: the model could not be loaded", ctx.turn_id, exc_info=True)
    await _phase(ctx, TurnPhase.ACT)


async def _phase(ctx: DriveContext, phase: str) -> None:
    await events_write(
        ctx.db,
        turn_id=ctx.turn_id,
        events=[NewEvent(EventType.PHASE, PhaseData(phase=phase))],
        turn_fields={"phase": phase},
        holder=ctx.holder,
    )

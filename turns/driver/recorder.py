"""Persisting the agent loop's reports as events, before its next step (docs/architecture.md#the-driver)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.agent.loop import CompletionReport, Report, ToolResultReport, ToolStartReport
from agentlab.agent.reports import LLMRequest
from agentlab.agent.text import json_safe
from agentlab.agent.tools import ToolRegistry
from agentlab.agent.types import ToolCall
from agentlab.agent.usage import UsageTotals
from agentlab.telemetry import attempt_begins, tool_report
from common.db import DatabaseThreads

# called through the module, so that a test can break every write of the driver at once
from turns import events as event_log
from turns.driver.deltas import DeltaCoalescer
from turns.event_types import (
    LLMRequestData,
    LLMUsageData,
    ThinkingData,
    ToolCallEventData,
    ToolResultEventData,
    ToolStartedData,
)
from turns.events import NewEvent
from turns.models import EventType


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
        await self.db.run(
            event_log.event_append_many,
            turn_id=self.turn_id,
            events=[*self.pending, *events],
            turn_fields=dict(self.pending_fields),
            holder=self.holder,
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
        else:
            assert isinstance(report, ToolResultReport)
            events, fields = self._tool_result(report), {}
            hold = self._ends_turn(report.call) and not report.result.is_error
        if hold:
            self.pending.extend(events)
            self.pending_fields.update(fields)
            return
        await self.db.run(
            event_log.event_append_many,
            turn_id=self.turn_id,
            events=[*self.pending, *events],
            turn_fields={**self.pending_fields, **fields},
            holder=self.holder,
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
        return LLMRequestData(
            shared=shared,
            messages=messages[shared:],
            tools=json_safe(request.tools),
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            response_schema=json_safe(request.response_schema),
        )

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
        return [NewEvent(EventType.TOOL_RESULT, data)]


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

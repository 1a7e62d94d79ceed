"""What the model saw: a turn's LLM calls rebuilt from its event log.

Each agent step's ``llm.usage`` event keeps its request (``LLMRequestData``:
the messages after those it shares with the attempt's previous request, the
tool specs, the sampling options, the response schema); the step's
``thinking`` and ``tool.call`` events are its reply. ``llm_calls_of`` walks
a turn's events in seq order and gives every call whole — the turn page's
"What the model saw" (docs/architecture.md#the-event-log). Pure functions
over the events; ``turn_llm_calls`` reads them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from turns.models import EventType, TurnEvent

#: The event types a turn's calls are rebuilt from.
CALL_EVENT_TYPES = (EventType.LLM_USAGE, EventType.THINKING, EventType.TOOL_CALL)


@dataclass
class LLMCall:
    """One agent step's LLM call: ``attempt`` and ``step``, the ``seq`` of its
    ``llm.usage`` event, the ``model``, tokens in and out (``None``:
    unknown), ``finish_reason``; ``request`` with the full ``messages`` (or
    ``None`` in a log written before requests were recorded); the reply's
    text and tool calls (``ToolCall.to_dict()`` shapes)."""

    attempt: int
    step: int
    seq: int
    model: str
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    request: dict[str, Any] | None
    reply_text: str = ""
    reply_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tool_names(self) -> list[str]:
        """The tools the call offered: the names of its native tool specs,
        else of the tools a constrained model's schema allows, else ``[]``."""
        request = self.request or {}
        specs = request.get("tools") or []
        names = [
            str((spec.get("function") or spec).get("name", "")) for spec in specs if isinstance(spec, dict)
        ]
        return names or schema_tool_names(request.get("response_schema"))


def schema_tool_names(schema: Any) -> list[str]:
    """The tool names a step schema (``agentlab.agent.protocol.step_schema``:
    one object ``{"tool": {"const": name}, "arguments": …}`` or an ``anyOf``
    of them) allows, in order; ``[]`` for no schema or another shape."""
    if not isinstance(schema, dict):
        return []
    any_of = schema.get("anyOf")
    alternatives: list[Any] = any_of if isinstance(any_of, list) else [schema]
    names = []
    for alternative in alternatives:
        tool = (
            ((alternative or {}).get("properties") or {}).get("tool")
            if isinstance(alternative, dict)
            else None
        )
        if isinstance(tool, dict) and "const" in tool:
            names.append(str(tool["const"]))
    return names


def llm_calls_of(events: Iterable[TurnEvent]) -> list[LLMCall]:
    """The LLM calls of ``events`` (a turn's, in seq order; other types are
    skipped), each with its request made whole (``LLMRequestData.shared``)
    and its reply. A ``thinking`` or ``tool.call`` event belongs to the call
    of its attempt and step written just before it."""
    calls: list[LLMCall] = []
    by_step: dict[tuple[int, int], LLMCall] = {}
    last_messages: dict[int, list[dict[str, Any]]] = {}
    replies: list[TurnEvent] = []
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type != EventType.LLM_USAGE:
            replies.append(event)
            continue
        attempt, step = int(data.get("attempt") or 0), int(data.get("step") or 0)
        request = _whole(data.get("request"), last_messages.get(attempt, []))
        if request is not None:
            last_messages[attempt] = request["messages"]
        call = LLMCall(
            attempt=attempt,
            step=step,
            seq=event.seq,
            model=str(data.get("model") or ""),
            input_tokens=data.get("input_tokens"),
            output_tokens=data.get("output_tokens"),
            finish_reason=data.get("finish_reason"),
            request=request,
        )
        calls.append(call)
        by_step[(attempt, step)] = call
    for event in replies:
        _add_reply(by_step, event)
    return calls


def _whole(stored: Any, before: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A stored ``LLMRequestData`` with its shared messages put back."""
    if not isinstance(stored, dict):
        return None
    shared = int(stored.get("shared") or 0)
    return {**stored, "messages": [*before[:shared], *(stored.get("messages") or [])]}


def _add_reply(by_step: dict[tuple[int, int], LLMCall], event: TurnEvent) -> None:
    data = event.data if isinstance(event.data, dict) else {}
    call = by_step.get((int(data.get("attempt") or 0), int(data.get("step") or 0)))
    if call is None:
        return
    if event.type == EventType.THINKING:
        call.reply_text = str(data.get("text") or "")
    elif event.type == EventType.TOOL_CALL and isinstance(data.get("call"), dict):
        call.reply_calls.append(data["call"])


#: Tool calls looked for after a call's ``llm.usage`` event.
MAX_CALLS_PER_STEP = 16


def turn_llm_calls(turn_id: int) -> list[LLMCall]:
    """The LLM calls of turn ``turn_id`` (``llm_calls_of``), in two reads
    whatever the log's length: its ``llm.usage`` events, then the events
    beside them — the recorder writes a step's ``thinking`` just before its
    ``llm.usage`` and its ``tool.call`` events just after, in one append."""
    usage = list(
        TurnEvent.objects.filter(turn_id=turn_id, type=EventType.LLM_USAGE)
        .order_by("seq")
        .only("seq", "type", "data")
    )
    if not usage:
        return []
    near = {seq for event in usage for seq in range(event.seq - 1, event.seq + MAX_CALLS_PER_STEP + 1)}
    replies = TurnEvent.objects.filter(
        turn_id=turn_id, seq__in=sorted(near - {e.seq for e in usage}), type__in=CALL_EVENT_TYPES
    ).only("seq", "type", "data")
    return llm_calls_of(sorted([*usage, *replies], key=lambda e: e.seq))

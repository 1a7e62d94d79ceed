"""Rebuilding an attempt's recorded steps from the event log (docs/architecture.md#the-driver, resume).

A resumed turn reuses the LLM replies and tool results its log already holds
instead of requesting or running them again; a continued attempt
(``turn_continue``) is rebuilt on top of the steps of the attempts it
continues.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from agentlab.agent.types import DECODINGS, Completion, Step, ToolCall, ToolResult, Usage
from turns.attempts import continued_attempts
from turns.models import EventType, TurnEvent


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
            decoding=usage.get("decoding") if usage.get("decoding") in DECODINGS else None,
            cached=bool(usage.get("cached")),
        )
        steps.append(Step(index=index, completion=completion, results=slot["results"]))
    return steps


def attempt_steps(*, turn_id: int, attempt: int) -> tuple[list[Step], list[Step]]:
    """``(inherited, own)`` recorded steps of ``attempt``: steps of the attempts
    it continues (not re-run, not counted in its usage) and its own."""
    inherited: list[Step] = []
    for earlier in continued_attempts(turn_id=turn_id, attempt=attempt):
        inherited.extend(recorded_steps(turn_id=turn_id, attempt=earlier))
    return inherited, recorded_steps(turn_id=turn_id, attempt=attempt)


def calls_started(*, turn_id: int, attempt: int) -> frozenset[str]:
    """The tool call ids of ``attempt`` whose ``tool.started`` is in the log
    without a ``tool.result``: the process died while they ran, or before
    their result was committed, so they may have run (one query)."""
    started: set[str] = set()
    finished: set[str] = set()
    rows = TurnEvent.objects.filter(
        turn_id=turn_id, type__in=[EventType.TOOL_STARTED, EventType.TOOL_RESULT]
    ).values_list("type", "data")
    for etype, data in rows:
        if data.get("attempt", 1) != attempt:
            continue
        if etype == EventType.TOOL_STARTED:
            started.add(str(data.get("call_id")))
        else:
            finished.add(str((data.get("result") or {}).get("call_id")))
    return frozenset(started - finished)

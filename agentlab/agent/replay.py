"""Counterfactual replay of a recorded turn: the recorded tool results served
to a new agent while it asks for what the recorded agent asked for
(docs/evaluating.md#replaying-recorded-turns).

A ``ReplayScript`` holds the recorded turn's path — its tool calls, in order,
with their results, the protocol's own (``final_answer``, ``ask_user``) left
out — and a cursor on it. The agent loop asks it about every tool call of the
new agent before running anything (``ReplayScript.decide``):

- while the call matches the recorded path's next call (``matches``: the same
  tool, the arguments by the trajectory scorers' argument rule, default
  ``exact``), the recorded result is served and the tool is **not** run;
- the first call that does not match is *the divergence*
  (``Divergence``: the loop step, the position in the path, the recorded call
  and the new one); then the turn ends there (stop reason
  ``replay_diverged``) unless the script is ``live``, in which case it goes on
  with live tools — but only tools marked ``read_only``
  (``agentlab.agent.tools.Tool``) or calls no tool runs for (an unknown tool,
  malformed arguments: they come back as error results); any other tool ends
  the turn as ``replay_unsafe`` and is never run;
- a turn-ending call (``final_answer``, ``ask_user``) always runs — it is the
  new answer, with no side effect; asked for while recorded calls remain, it
  is a divergence too (the new agent stopped earlier), reported and not
  stopped.

A resumed replay (the process was killed) rebuilds the cursor from the steps
its own log recorded (``resume``): the calls with a result advance it exactly
as they did the first time, so a served call is never run and a divergence is
found at the same place. No Django here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentlab.agent.reports import DivergenceReport
from agentlab.agent.stops import LoopStop
from agentlab.agent.tools.registry import Tool
from agentlab.agent.types import Step, StopReason, ToolCall, ToolResult


@dataclass(frozen=True)
class RecordedCall:
    """One tool call of the recorded path: the tool's ``name``, its
    ``arguments`` (a JSON object), the result it produced (``output``,
    ``is_error``) and its loop ``step`` in the recorded turn (``None``: not known)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    output: str = ""
    is_error: bool = False
    step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"name", "arguments"}``: the call as a divergence event shows it."""
        return {"name": self.name, "arguments": self.arguments}


#: ``matches(recorded, new_call)``: whether the new agent's call asks for what ``recorded`` did
ArgsMatch = Callable[[RecordedCall, ToolCall], bool]


def exact_match(recorded: RecordedCall, call: ToolCall) -> bool:
    """The default rule: the same tool with equal arguments."""
    return recorded.name == call.name and recorded.arguments == call.arguments


@dataclass(frozen=True)
class Divergence:
    """Where the new agent first left the recorded path: loop ``step``, the
    1-based ``position`` in the recorded path, the ``recorded`` call expected
    there (``None``: the recorded path had ended) and the new ``call``."""

    step: int
    position: int
    recorded: RecordedCall | None
    call: ToolCall


@dataclass(frozen=True)
class ReplayDecision:
    """What the loop does with one tool call: ``serve`` the recorded
    ``result`` (the tool is not run), run it ``live``, or ``stop`` the turn
    with ``stop_reason`` and ``error``. ``divergence``: set on the call that
    diverged, for the loop to report before it acts."""

    action: Literal["serve", "live", "stop"]
    result: ToolResult | None = None
    stop_reason: StopReason | None = None
    error: str | None = None
    divergence: Divergence | None = None


class ReplayScript:
    """The recorded path of one turn and the new agent's place on it (see the
    module docstring). ``calls``: the recorded path; ``matches``: the
    argument rule; ``live``: go on after the divergence with read-only tools
    (``False``: end the turn there); ``history``: the recorded turn's
    conversation as it was given to it. Not thread-safe: one per drive."""

    def __init__(
        self,
        calls: Sequence[RecordedCall],
        *,
        matches: ArgsMatch = exact_match,
        live: bool = False,
        history: dict[str, Any] | None = None,
    ):
        self.calls = tuple(calls)
        self.matches = matches
        self.live = live
        #: what the recorded turn was given of its conversation (the payload of
        #: its ``history`` event), given to the replay turn as it was: a
        #: follow-up ("double it") replayed without it would answer another
        #: question; ``None``: it had none
        self.history = history
        #: recorded calls served (or matched on resume) so far
        self.position = 0
        self.divergence: Divergence | None = None

    def resume(
        self, steps: Sequence[Step], *, calls_of: Callable[[Step], list[ToolCall]], tools: Any
    ) -> None:
        """Advance past the calls ``steps`` (the new turn's own recorded
        steps) already made: each call with a result, in order, as ``decide``
        would have taken it. ``tools`` (a ``ToolRegistry``) tells the
        turn-ending calls apart."""
        for step in steps:
            done = {result.call_id for result in step.results}
            for call in calls_of(step):
                if call.id in done:
                    self.decide(call, tools.get(call.name), step=step.index)

    def decide(self, call: ToolCall, tool: Tool | None, *, step: int) -> ReplayDecision:
        """What to do with ``call`` (of ``tool``, ``None`` when no tool of the
        turn has its name) asked for at loop ``step``; advances the script."""
        if tool is not None and tool.ends_turn is not None:
            return ReplayDecision("live", divergence=self._diverge(call, step) if self._ahead() else None)
        if self.divergence is None:
            if self._ahead() and self.matches(self.calls[self.position], call):
                recorded = self.calls[self.position]
                self.position += 1
                served = ToolResult(
                    call_id=call.id, name=call.name, output=recorded.output, is_error=recorded.is_error
                )
                return ReplayDecision("serve", result=served)
            divergence = self._diverge(call, step)
            if not self.live:
                expected = divergence.recorded
                where = _label(expected.name, expected.arguments) if expected is not None else "nothing more"
                error = (
                    f"diverged at step {divergence.position}: asked for {_label(call.name, call.arguments)}, "
                    f"the recorded turn called {where}"
                )
                return ReplayDecision(
                    "stop", stop_reason="replay_diverged", error=error, divergence=divergence
                )
            return self._live(call, tool, divergence)
        return self._live(call, tool, None)

    def _ahead(self) -> bool:
        """Whether recorded calls remain and no divergence was found yet."""
        return self.divergence is None and self.position < len(self.calls)

    def _diverge(self, call: ToolCall, step: int) -> Divergence:
        recorded = self.calls[self.position] if self.position < len(self.calls) else None
        self.divergence = Divergence(step=step, position=self.position + 1, recorded=recorded, call=call)
        return self.divergence

    @staticmethod
    def _live(call: ToolCall, tool: Tool | None, divergence: Divergence | None) -> ReplayDecision:
        """After the divergence: a read-only tool runs; a call no tool runs
        for (unknown, malformed) is answered with its error; any other stops."""
        if tool is None or tool.read_only or call.error is not None:
            return ReplayDecision("live", divergence=divergence)
        error = f"{call.name} is not marked read-only: a replay never runs it"
        return ReplayDecision("stop", stop_reason="replay_unsafe", error=error, divergence=divergence)


def _label(name: str, arguments: dict[str, Any]) -> str:
    """``count({"label": "a"})``: a call for a sentence."""
    return f"{name}({json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)})"


async def replay_call(
    script: ReplayScript,
    call: ToolCall,
    tool: Tool | None,
    step: Step,
    report: Callable[[DivergenceReport], Awaitable[None]],
) -> ToolResult | None:
    """The replay's answer to ``call`` of ``tool`` at ``step`` (the agent
    loop's, before any approval or run): the recorded result (the tool is
    not run), ``None`` to run it, or ``LoopStop`` with ``replay_diverged`` /
    ``replay_unsafe``. A divergence is given to ``report`` first."""
    decision = script.decide(call, tool, step=step.index)
    if (d := decision.divergence) is not None:
        recorded = d.recorded.to_dict() if d.recorded is not None else None
        await report(DivergenceReport(step=d.step, position=d.position, recorded=recorded, call=call))
    if decision.action == "stop":
        raise LoopStop(decision.stop_reason or "replay_unsafe", decision.error, pending_call=call)
    return decision.result

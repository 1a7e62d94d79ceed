"""How an agent loop run ended: ``LoopResult`` (``agentlab.agent.loop``
returns it; the driver maps it to a terminal event, docs/architecture.md#the-turn-lifecycle)."""

from __future__ import annotations

from dataclasses import dataclass

from agentlab.agent.truncation import json_type
from agentlab.agent.types import Completion, Step, StopReason, ToolCall, ToolResult, as_text
from agentlab.agent.usage import UsageTotals

#: The error of stop reason ``empty_answer``: a final answer that is empty or
#: whitespace is not an answer (the turn fails; in evaluation it is wrong).
EMPTY_ANSWER_ERROR = "the model gave an empty answer"


@dataclass
class Outcome:
    """How the loop's steps ended, before ``AgentLoop.run`` makes it a
    ``LoopResult`` (the stop reason and what the answer or question was)."""

    stop_reason: StopReason
    answer: str = ""
    evidence: str = ""
    reasoning: str = ""
    question: str | None = None
    answer_type: str | None = None
    partial_answer: str = ""


@dataclass
class LoopResult:
    """How a run ended.

    ``answer``/``evidence``/``reasoning`` are text (``as_text``) when
    ``stop_reason == "final"``, else ``""``. ``question`` is the clarifying
    question when ``"asked"``. ``steps`` are all steps, recorded ones first;
    ``steps_used == len(steps)`` (LLM calls that returned). ``usage`` covers
    every completion in ``steps``. ``error`` is a human-readable cause for the
    failing stop reasons. ``pending_call`` is the tool call that waited for an
    approval (``approval_rejected`` / ``approval_required``).
    """

    stop_reason: StopReason
    answer: str
    evidence: str
    reasoning: str
    question: str | None
    steps: list[Step]
    steps_used: int
    usage: UsageTotals
    error: str | None = None
    pending_call: ToolCall | None = None
    #: the JSON type the final answer was given in (``string``, ``number``,
    #: ``array``, ``object``, ``boolean``, ``null``), ``None`` when not final
    answer_type: str | None = None
    #: ``length``: the final answer as far as the model wrote it before the
    #: output-token limit cut it (it is not an answer: ``answer`` is ``""``)
    partial_answer: str = ""


def text_outcome(completion: Completion) -> Outcome:
    """A reply without a tool call: the final answer — unless the token
    limit cut it, which is stop reason ``length``, not an answer, or it
    is empty (``empty_answer``)."""
    text = (completion.text or "").strip()
    if completion.truncated:
        return Outcome("length", partial_answer=text)
    if not text:
        return Outcome("empty_answer")
    return Outcome("final", answer=text, answer_type="string")


def ending_outcome(ends: str | None, call: ToolCall, result: ToolResult) -> Outcome | None:
    """The outcome when ``call`` of a tool whose ``ends_turn`` is ``ends``
    (``"final"``, ``"ask"`` or ``None``) produced ``result``; ``None`` when
    it does not end the attempt (another tool, or an error result)."""
    if result.is_error:
        return None
    if ends == "final":
        args = call.arguments
        answer = as_text(args.get("answer"))  # stored as given (a leading tab is the model's)
        if not answer.strip():  # "" or whitespace (or null) is no answer
            return Outcome("empty_answer")
        return Outcome(
            "final",
            answer=answer,
            evidence=as_text(args.get("evidence")),
            reasoning=as_text(args.get("reasoning")),
            answer_type=json_type(args.get("answer")),
        )
    if ends == "ask":
        return Outcome("asked", question=as_text(call.arguments.get("question")))
    return None

"""How an agent loop run ended: ``LoopResult`` (``agentlab.agent.loop``
returns it; the driver maps it to a terminal event, docs/architecture.md#the-turn-lifecycle)."""

from __future__ import annotations

from dataclasses import dataclass

from agentlab.agent.types import Step, StopReason, ToolCall
from agentlab.agent.usage import UsageTotals

#: The error of stop reason ``empty_answer``: a final answer that is empty or
#: whitespace is not an answer (the turn fails; in evaluation it is wrong).
EMPTY_ANSWER_ERROR = "the model gave an empty answer"


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


@dataclass
class Outcome:
    """How the loop's last step ended an attempt, before the loop makes it a
    ``LoopResult`` with the run's steps, usage and error (the fields as there)."""

    stop_reason: StopReason
    answer: str = ""
    evidence: str = ""
    reasoning: str = ""
    question: str | None = None
    answer_type: str | None = None
    partial_answer: str = ""

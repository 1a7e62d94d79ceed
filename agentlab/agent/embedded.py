"""The policy of a constrained model: a provider that decodes every step
under a JSON schema (``constrained_decoding``, no native tools) — the
embedded SmolLM2-135M model. What it is offered and what its grammar admits
step by step; an endpoint model is left free (docs/architecture.md#the-agent-core,
the figures in docs/benchmarks.md#the-embedded-model).

A 135M model left to choose copied the prompt's worked answer, called the
calculator on multiple-choice questions, never searched its documents, fed
each calculator result into the next call and answered empty strings. So:

- tools: ``search_documents`` only with documents (and first), no
  ``calculator`` on a multiple-choice question without a digit, no
  ``ask_user`` on an evaluation example (nobody answers it) — ``arrange_tools``;
- the first step must call ``search_documents`` (documents) or the
  ``calculator`` (a math example, or arithmetic in the question) —
  ``first_tool``;
- arguments under ``protocol.constrained_fields``: the answer is one of the
  offered letters, a number, or a short text that is not a placeholder; the
  calculator's expression is arithmetic;
- the final answer alone on the last step, after a good calculator or search
  result, and after a call that repeats an earlier one — ``schema_for_step``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.agent.protocol import constrained_fields, step_schema
from agentlab.agent.tools import ToolContext, ToolRegistry
from agentlab.agent.types import Step, ToolCall

#: The tools whose one good result is what the answer is read from: after
#: one, the next step must answer. Other tools (``sql_query``, a plugin's, an
#: MCP server's) may need several calls — reading a schema, then querying.
ANSWER_AFTER = frozenset({"calculator", "search_documents"})

#: A question that holds arithmetic: two numbers joined by an operator.
ARITHMETIC_RE = re.compile(r"\d\s*[-+*/×÷^]\s*\(?\s*\d")


def arrange_tools(tools: ToolRegistry, *, question: str, context: ToolContext) -> ToolRegistry:
    """``tools`` (those available in ``context``) as a constrained model is
    offered them for ``question`` (see the module docstring)."""
    names = [tool.name for tool in tools]
    if context.metadata.get("choices") and not any(ch.isdigit() for ch in question):
        names = [name for name in names if name != "calculator"]
    if not context.documents:  # it could only answer that there are none
        names = [name for name in names if name != "search_documents"]
    if context.metadata.get("task_type"):  # an evaluation example: nobody answers a question
        names = [name for name in names if name != "ask_user"]
    if context.documents and "search_documents" in names:
        names = ["search_documents", *(name for name in names if name != "search_documents")]
    return tools.arranged(names)


def first_tool(tools: ToolRegistry, *, question: str, context: ToolContext) -> str | None:
    """The tool the first step must call, or ``None``: ``search_documents``
    when the turn has documents, the ``calculator`` for a ``math`` example or
    a question that holds arithmetic (``17 * 23``) without choices."""
    if context.documents and "search_documents" in tools:
        return "search_documents"
    arithmetic = context.metadata.get("task_type") == "math" or ARITHMETIC_RE.search(question)
    if arithmetic and not context.metadata.get("choices") and "calculator" in tools:
        return "calculator"
    return None


@dataclass(frozen=True)
class StepSchemas:
    """The schemas a constrained model's steps decode under: ``step`` (any
    offered tool), ``final`` (``final_answer`` alone, ``None`` when it is not
    offered) and ``first`` (the one tool the first step must call, or ``None``)."""

    step: dict[str, Any]
    final: dict[str, Any] | None
    first: dict[str, Any] | None


def step_schemas(tools: ToolRegistry, *, question: str, context: ToolContext, max_steps: int) -> StepSchemas:
    """The ``StepSchemas`` of a turn offered ``tools`` (not empty)."""
    first = first_tool(tools, question=question, context=context)
    # a question the calculator must answer first is answered with a number
    fields = constrained_fields(context.metadata, number=first == "calculator")
    final_tool = tools.get("final_answer")
    return StepSchemas(
        step=step_schema(tools, fields=fields),
        final=step_schema(ToolRegistry([final_tool]), fields=fields) if final_tool is not None else None,
        first=step_schema(tools.arranged([first]), fields=fields) if first and max_steps > 1 else None,
    )


def schema_for_step(
    schemas: StepSchemas,
    *,
    index: int,
    steps: Sequence[Step],
    max_steps: int,
    calls_of: Callable[[Step], list[ToolCall]],
) -> dict[str, Any]:
    """The schema step ``index`` (from 1) decodes under after ``steps``: the
    first step's when it must call one tool; the final answer's alone on the
    last step, after a good result of an ``ANSWER_AFTER`` tool (left free, a
    135M model fed each result into the next call: 12 → 72 → 432 …) and after a
    call that repeats an earlier one with the same arguments (a greedy model
    repeats it to ``max_steps``); else any offered tool."""
    if index == 1 and schemas.first is not None:
        return schemas.first
    if schemas.final is None:
        return schemas.step
    if index >= max_steps:
        return schemas.final
    if steps and any(not r.is_error and r.name in ANSWER_AFTER for r in steps[-1].results):
        return schemas.final
    seen: set[tuple[str, str]] = set()
    for step in steps:
        for call in calls_of(step):
            key = (call.name, repr(sorted(call.arguments.items())))
            if call.error is None and key in seen:
                return schemas.final
            seen.add(key)
    return schemas.step

"""The embedded (constrained, schema-decoded) agent's policy: what it is
offered and what its grammar admits. An endpoint model is offered every
available tool and decodes freely (the last test)."""

from __future__ import annotations

import re

import pytest

from agentlab.agent.loop import AgentLoop
from agentlab.agent.protocol import (
    ARITHMETIC_PATTERN,
    NUMBER_ANSWER_PATTERN,
    TEXT_ANSWER_PATTERN,
    answer_schema,
    system_prompt,
)
from agentlab.agent.providers.scripted import ScriptedProvider, text
from agentlab.agent.tools import ToolContext, default_registry

DOCS = [{"title": "Bella", "text": "Bella lives in the blue house."}]


def constrained(*replies: str) -> ScriptedProvider:
    return ScriptedProvider([text(r) for r in replies], native_tools=False, constrained_decoding=True)


def offered(schema: dict) -> list[str]:
    alternatives = schema.get("anyOf") or [schema]
    return [alt["properties"]["tool"]["const"] for alt in alternatives]


def answer_of(schema: dict) -> dict:
    [final] = [
        a for a in schema.get("anyOf") or [schema] if a["properties"]["tool"]["const"] == "final_answer"
    ]
    return final["properties"]["arguments"]["properties"]["answer"]


def test_the_answer_schema_by_task() -> None:
    assert answer_schema({"choices": ["x", "y", "z"], "task_type": "multiple_choice"}) == {
        "enum": ["A", "B", "C"]
    }
    assert answer_schema({"task_type": "math"}) == {"type": "string", "pattern": NUMBER_ANSWER_PATTERN}
    assert answer_schema({}) == {"type": "string", "pattern": TEXT_ANSWER_PATTERN}


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (NUMBER_ANSWER_PATTERN, ["7", "-18", "1,000", "3.25"], ["", "seven", "7 apples", "<n>"]),
        (TEXT_ANSWER_PATTERN, ["blue", "1952", "New York"], ["", " blue", "<your short answer>", 'a"b']),
        (ARITHMETIC_PATTERN, ["3 + 4", "(16 - 3) * 2", "17*23"], ["7", "2 boxes", "10 + 4 = 14", ""]),
    ],
)
def test_the_patterns_admit_answers_and_refuse_placeholders_and_prose(pattern, good, bad) -> None:
    regex = re.compile(pattern)
    assert all(regex.match(value) for value in good)
    assert not any(regex.match(value) for value in bad)


async def test_a_multiple_choice_example_without_numbers_gets_no_calculator_and_only_its_letters() -> None:
    provider = constrained('{"tool": "final_answer", "arguments": {"answer": "B"}}')
    context = ToolContext(
        metadata={"task_type": "multiple_choice", "choices": ["Sun", "Sand", "Salt", "Snow"]}
    )
    question = "What do plants need from the Sun?\n\nA. Sun\nB. Sand\nC. Salt\nD. Snow"
    result = await AgentLoop(provider, default_registry()).run(question, context=context)
    assert (result.stop_reason, result.answer) == ("final", "B")
    schema = provider.kwargs_seen[0]["response_schema"]
    assert offered(schema) == ["final_answer"]  # no calculator, no search, no ask_user in evaluation
    assert answer_of(schema) == {"enum": ["A", "B", "C", "D"]}


async def test_a_document_question_must_search_first_then_answers_from_the_result() -> None:
    provider = constrained(
        '{"tool": "search_documents", "arguments": {"query": "Bella house"}}',
        '{"tool": "final_answer", "arguments": {"answer": "blue"}}',
    )
    context = ToolContext(documents=DOCS, metadata={"task_type": "document_qa", "documents": DOCS})
    result = await AgentLoop(provider, default_registry()).run(
        "What colour is Bella's house?", context=context
    )
    assert (result.stop_reason, result.answer) == ("final", "blue")
    first, second = (kwargs["response_schema"] for kwargs in provider.kwargs_seen)
    assert offered(first) == ["search_documents"]
    assert offered(second) == ["final_answer"]  # a result is in view: answer it
    prompt = provider.calls[0][0]["content"]
    assert prompt.index("- search_documents:") < prompt.index("- calculator:")


async def test_a_math_example_must_calculate_first_and_answers_a_number() -> None:
    provider = constrained(
        '{"tool": "calculator", "arguments": {"expression": "3 + 4"}}',
        '{"tool": "final_answer", "arguments": {"answer": "7"}}',
    )
    context = ToolContext(metadata={"task_type": "math"})
    result = await AgentLoop(provider, default_registry()).run(
        "Tom has 3 apples and gets 4 more.", context=context
    )
    assert (result.stop_reason, result.answer) == ("final", "7")
    first, second = (kwargs["response_schema"] for kwargs in provider.kwargs_seen)
    assert offered(first) == ["calculator"]
    expression = first["properties"]["arguments"]["properties"]["expression"]
    assert expression == {"type": "string", "pattern": ARITHMETIC_PATTERN}
    assert answer_of(second) == {"type": "string", "pattern": NUMBER_ANSWER_PATTERN}


async def test_after_a_calculator_error_the_model_may_call_again() -> None:
    provider = constrained(
        '{"tool": "calculator", "arguments": {"expression": "1 / 0"}}',
        '{"tool": "calculator", "arguments": {"expression": "17 * 23"}}',
        '{"tool": "final_answer", "arguments": {"answer": "391"}}',
    )
    result = await AgentLoop(provider, default_registry()).run("What is 17 * 23? Use the calculator.")
    assert (result.stop_reason, result.answer, result.steps_used) == ("final", "391", 3)
    schemas = [kwargs["response_schema"] for kwargs in provider.kwargs_seen]
    assert offered(schemas[0]) == ["calculator"]  # arithmetic in a chat question
    assert "calculator" in offered(schemas[1])  # the error is not a result to answer from
    assert offered(schemas[2]) == ["final_answer"]


def test_the_compact_prompt_lists_names_not_schemas_and_has_no_worked_answer() -> None:
    tools = default_registry().offered(ToolContext())
    compact = system_prompt(tools, native_tools=False, compact=True)
    full = system_prompt(tools, native_tools=False)
    assert "JSON schema" not in compact and "JSON schema" in full
    assert len(compact) < len(full) * 0.6
    for prompt in (compact, full):
        assert '"answer": "26"' not in prompt and "(16 - 3) * 2" not in prompt.split("## Tools")[0]


async def test_an_endpoint_model_is_offered_every_tool_and_decodes_freely() -> None:
    provider = ScriptedProvider(
        [text('{"tool": "final_answer", "arguments": {"answer": "B"}}')], native_tools=False
    )
    context = ToolContext(metadata={"task_type": "multiple_choice", "choices": ["a", "b"]})
    await AgentLoop(provider, default_registry()).run("Pick one.\n\nA. a\nB. b", context=context)
    assert provider.kwargs_seen[0]["response_schema"] is None
    prompt = provider.calls[0][0]["content"]
    for name in ("calculator", "search_documents", "ask_user", "final_answer"):
        assert f"- {name}:" in prompt


async def test_a_tool_that_may_need_several_calls_leaves_the_next_step_free() -> None:
    from pydantic import BaseModel

    from agentlab.agent.tools import Tool

    class Args(BaseModel):
        key: str

    lookup = Tool(
        name="lookup", description="Look a key up.", parameters=Args, fn=lambda args, ctx: "schema: t(a)"
    )
    provider = constrained(
        '{"tool": "lookup", "arguments": {"key": "schema"}}',
        '{"tool": "lookup", "arguments": {"key": "rows"}}',
        '{"tool": "final_answer", "arguments": {"answer": "4"}}',
    )
    registry = default_registry().with_tools([lookup])
    result = await AgentLoop(provider, registry).run("How many rows has t?")
    assert (result.stop_reason, result.answer) == ("final", "4")
    second = provider.kwargs_seen[1]["response_schema"]
    assert "lookup" in offered(second)  # a plugin's result does not force the answer

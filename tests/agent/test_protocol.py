from __future__ import annotations

from agentlab.agent.protocol import observation_message, parse_tool_calls, system_prompt
from agentlab.agent.tools import default_registry
from agentlab.agent.types import ToolCall, ToolResult


def test_a_bare_json_object_is_one_call() -> None:
    calls = parse_tool_calls('{"tool": "calculator", "arguments": {"expression": "2+2"}}', step=3)
    assert calls == [
        ToolCall(
            id="call_3_0",
            name="calculator",
            arguments={"expression": "2+2"},
            raw_arguments='{"expression": "2+2"}',
        )
    ]


def test_code_fences_and_prose_around_the_json_are_ignored() -> None:
    reply = (
        "Sure! First I compute the eggs left.\n```json\n"
        '{"tool": "calculator", "arguments": {"expression": "16 - 3 - 4"}}\n'
        "```\nThen I will multiply by 2."
    )
    assert parse_tool_calls(reply, step=1) == [
        ToolCall(
            id="call_1_0",
            name="calculator",
            arguments={"expression": "16 - 3 - 4"},
            raw_arguments='{"expression": "16 - 3 - 4"}',
        )
    ]


def test_prose_then_json_without_fences() -> None:
    reply = (
        'I know it now. {"tool": "final_answer", "arguments": {"answer": 18, "evidence": ["9 eggs"]}} Done.'
    )
    [call] = parse_tool_calls(reply, step=2)
    assert call.name == "final_answer"
    assert call.arguments == {"answer": 18, "evidence": ["9 eggs"]}


def test_several_objects_are_several_calls_with_deterministic_ids() -> None:
    reply = '{"tool": "count", "arguments": {}}\n{"tool": "count", "arguments": {"label": "b"}}'
    assert [(c.id, c.name, c.arguments) for c in parse_tool_calls(reply, step=4)] == [
        ("call_4_0", "count", {}),
        ("call_4_1", "count", {"label": "b"}),
    ]
    assert parse_tool_calls(reply, step=4) == parse_tool_calls(reply, step=4)


def test_inline_and_double_encoded_arguments_are_accepted() -> None:
    [inline] = parse_tool_calls('{"tool": "calculator", "expression": "1+1"}', step=1)
    assert inline.arguments == {"expression": "1+1"}
    [encoded] = parse_tool_calls(
        '{"name": "calculator", "arguments": "{\\"expression\\": \\"3*3\\"}"}', step=1
    )
    assert (encoded.name, encoded.arguments) == ("calculator", {"expression": "3*3"})


def test_arguments_that_are_not_an_object_are_an_error_call() -> None:
    [call] = parse_tool_calls('{"tool": "calculator", "arguments": ["2+2"]}', step=1)
    assert call.arguments == {}
    assert call.error == 'arguments must be a JSON object, got list: ["2+2"]'


def test_broken_json_that_looks_like_a_call_is_an_error_call() -> None:
    reply = '{"tool": "calculator", "arguments": {"expression": "2+2"'
    [call] = parse_tool_calls(reply, step=5)
    assert call.id == "call_5_0"
    assert call.name == ""
    assert call.raw_arguments == reply
    assert call.error is not None
    assert call.error.startswith("your reply looks like a tool call but is not valid JSON.")


def test_plain_text_and_data_json_are_not_calls() -> None:
    assert parse_tool_calls("The answer is 18.", step=1) == []
    assert parse_tool_calls('The record is {"name": "Ada", "born": 1815}.', step=1) == []
    assert parse_tool_calls("", step=1) == []
    assert parse_tool_calls(None, step=1) == []


def test_system_prompt_describes_the_protocol_only_without_native_tools() -> None:
    tools = default_registry()
    native = system_prompt(tools, native_tools=True)
    text = system_prompt(tools, native_tools=False)
    assert "final_answer" in native and "## How to call a tool" not in native
    assert text.startswith(native)
    assert '{"tool": "<tool name>", "arguments": {<arguments>}}' in text
    assert "- calculator: Evaluate an arithmetic expression" in text
    assert '"required":["expression"]' in text
    custom = system_prompt(tools, native_tools=False, base="Answer in French.")
    assert custom.startswith("Answer in French.\n\n## Tools\n")


def test_observation_message_labels_errors() -> None:
    results = [
        ToolResult(call_id="a", name="calculator", output="9"),
        ToolResult(call_id="b", name="web", output="Unknown tool 'web'.", is_error=True),
    ]
    assert observation_message(results) == (
        "Observation from calculator: 9\n\nObservation from web (error): Unknown tool 'web'."
    )


def test_a_bare_answer_object_is_a_final_answer_call() -> None:
    [call] = parse_tool_calls('```json\n{"answer": "B", "reasoning": "option B fits"}\n```', step=2)
    assert call == ToolCall(
        id="call_2_0",
        name="final_answer",
        arguments={"answer": "B", "reasoning": "option B fits"},
        raw_arguments='{"answer": "B", "reasoning": "option B fits"}',
    )

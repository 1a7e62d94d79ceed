"""A reply cut by the output-token limit (``agentlab.agent.truncation`` and
the loop): a cut final answer is stop reason ``length``, a cut tool call an
observation — against the scripted provider and, over real HTTP, the stub
OpenAI-compatible server (the local model's case is in test_local_provider)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentlab.agent.loop import AgentLoop
from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.agent.providers.scripted import ScriptedProvider, final, text
from agentlab.agent.tools import ToolRegistry, default_registry
from agentlab.agent.truncation import json_type
from agentlab.agent.types import Completion, Usage
from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, text_reply, tool_calls_reply

QUESTION = "What is 17 * 23?"


def cut(content: str, *, decoding: str | None = None) -> Completion:
    return Completion(text=content, usage=Usage(10, 8), model="m", finish_reason="length", decoding=decoding)  # type: ignore[arg-type]


async def test_a_cut_final_answer_is_stop_reason_length_with_the_partial_text_kept() -> None:
    provider = ScriptedProvider([cut("The answer is three hundred and ni")], native_tools=False)
    result = await AgentLoop(provider, default_registry(), max_tokens=8).run(QUESTION)
    assert (result.stop_reason, result.answer, result.answer_type) == ("length", "", None)
    assert result.partial_answer == "The answer is three hundred and ni"
    assert result.error == (
        "the final answer was cut off by the output-token limit (8 tokens) before it was complete"
    )
    assert result.steps_used == 1


async def test_a_cut_json_in_text_call_goes_back_as_an_observation_and_the_next_step_answers() -> None:
    provider = ScriptedProvider(
        [cut('{"tool": "calculator", "arguments": {"expression": "17 *'), text("391")], native_tools=False
    )
    result = await AgentLoop(provider, default_registry(), max_tokens=12).run(QUESTION)
    assert (result.stop_reason, result.answer) == ("final", "391")
    first = result.steps[0]
    [call] = first.completion.tool_calls
    assert call.name == "" and call.error is not None
    assert call.error.startswith(
        "your reply was cut off by the output-token limit (12 tokens) before it was complete; "
        "send a shorter call."
    )
    assert first.results[0].is_error and "cut off" in first.results[0].output
    # the model was shown the observation
    assert "cut off by the output-token limit" in provider.calls[1][-1]["content"]


async def test_a_schema_decoded_reply_cut_before_its_call_parsed_is_a_malformed_call() -> None:
    provider = ScriptedProvider(
        [cut('{ "to', decoding="schema"), text('{"tool": "final_answer", "arguments": {"answer": "391"}}')],
        native_tools=False,
        constrained_decoding=True,
    )
    result = await AgentLoop(provider, default_registry(), max_tokens=3).run(QUESTION)
    assert result.stop_reason == "final" and result.answer == "391"
    [call] = result.steps[0].completion.tool_calls
    assert call.error == (
        "your reply was cut off by the output-token limit (3 tokens) before it was complete; "
        "reply with one complete, shorter JSON tool call"
    )


async def test_constrained_providers_get_the_step_schema_and_others_do_not() -> None:
    constrained = ScriptedProvider(
        [text('{"tool": "final_answer", "arguments": {"answer": "391"}}')],
        native_tools=False,
        constrained_decoding=True,
    )
    # a question without arithmetic: the first step may call any offered tool
    result = await AgentLoop(constrained, default_registry()).run("How many legs has a spider?")
    assert (result.stop_reason, result.answer, result.answer_type) == ("final", "391", "string")
    schema = constrained.kwargs_seen[0]["response_schema"]
    names = [alt["properties"]["tool"]["const"] for alt in schema["anyOf"]]
    assert names == ["calculator", "ask_user", "final_answer"]  # no documents: no search
    assert result.steps[0].completion.decoding == "schema"

    free = ScriptedProvider([text("391")], native_tools=False)
    result = await AgentLoop(free, default_registry()).run(QUESTION)
    assert free.kwargs_seen[0]["response_schema"] is None
    assert result.steps[0].completion.decoding == "free"


def test_json_type_names() -> None:
    assert [json_type(v) for v in ("a", 1, 1.5, True, None, [1], {"a": 1})] == [
        "string",
        "number",
        "number",
        "boolean",
        "null",
        "array",
        "object",
    ]


async def test_an_answer_given_as_an_object_is_text_with_its_type_kept() -> None:
    provider = ScriptedProvider([final({"value": 391})])
    result = await AgentLoop(provider, default_registry()).run(QUESTION)
    assert (result.answer, result.answer_type) == ('{"value": 391}', "object")


# --------------------------------------------------------------------------- over HTTP


@pytest.fixture
async def endpoint(stub_server: Any) -> AsyncIterator[Callable[[list[Any]], OpenAICompatibleProvider]]:
    providers: list[OpenAICompatibleProvider] = []

    def make(replies: list[Any]) -> OpenAICompatibleProvider:
        server: StubLLMServer = stub_server(replies)
        provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="stub-model")
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        await provider.aclose()


async def test_openai_finish_reason_length_on_a_text_reply_is_stop_reason_length(endpoint: Any) -> None:
    provider = endpoint([text_reply("It is three hundred", finish_reason="length")])
    result = await AgentLoop(provider, default_registry(), max_tokens=5, retry_base_delay=0.001).run(QUESTION)
    assert (result.stop_reason, result.partial_answer) == ("length", "It is three hundred")
    assert result.steps[0].completion.finish_reason == "length"
    # the request offered native tools: the endpoint decided, not a grammar
    assert result.steps[0].completion.decoding == "native"


async def test_openai_tool_call_cut_by_the_limit_is_an_observation_saying_so(
    endpoint: Any, registry: ToolRegistry
) -> None:
    provider = endpoint(
        [
            tool_calls_reply([("calculator", '{"expression": "17 *')], finish_reason="length"),
            final_answer_reply("391"),
        ]
    )
    result = await AgentLoop(provider, registry, max_tokens=9, retry_base_delay=0.001).run(QUESTION)
    assert (result.stop_reason, result.answer) == ("final", "391")
    first = result.steps[0]
    assert first.completion.decoding == "native"
    assert first.results[0].is_error
    assert first.results[0].output.startswith("Invalid arguments for calculator: your reply was cut off by")
    assert "the output-token limit (9 tokens) before it was complete" in first.results[0].output


async def test_the_last_step_and_the_step_after_a_repeated_call_may_only_answer() -> None:
    # a call that fails (an error is not a result to answer from), then its repeat
    calc = '{"tool": "calculator", "arguments": {"expression": "1 / 0"}}'
    answer = '{"tool": "final_answer", "arguments": {"answer": "8"}}'
    provider = ScriptedProvider(
        [text(calc), text(calc), text(answer)], native_tools=False, constrained_decoding=True
    )
    result = await AgentLoop(provider, default_registry(), max_steps=5).run("How many legs has a spider?")
    assert (result.stop_reason, result.answer, result.steps_used) == ("final", "8", 3)
    schemas = [kw["response_schema"] for kw in provider.kwargs_seen]
    assert "anyOf" in schemas[0] and "anyOf" in schemas[1]  # any offered tool
    assert schemas[2]["properties"]["tool"] == {"const": "final_answer"}  # the repeat: answer now

    last = ScriptedProvider([text(calc), text(answer)], native_tools=False, constrained_decoding=True)
    await AgentLoop(last, default_registry(), max_steps=2).run(QUESTION)
    assert last.kwargs_seen[1]["response_schema"]["properties"]["tool"] == {"const": "final_answer"}

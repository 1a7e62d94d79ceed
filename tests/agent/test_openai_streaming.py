"""The OpenAI-compatible provider streaming (``stream=True``) over real HTTP:
the official SDK against the stub server's streamed replies."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentlab.agent.loop import AgentLoop
from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.agent.retry import complete_with_retries
from agentlab.agent.streaming import CompletionDelta, TextDelta
from agentlab.agent.tools import default_registry
from agentlab.agent.types import ProviderError, Usage
from agentlab.testing.stub_llm import (
    StubLLMServer,
    StubReply,
    final_answer_reply,
    text_reply,
    tool_call_reply,
    tool_calls_reply,
)
from agentlab.testing.stub_stream import stream_chunks

Start = Callable[[Any], StubLLMServer]
MESSAGES = [{"role": "user", "content": "What is 6*7?"}]


@pytest.fixture
async def connect() -> AsyncIterator[Callable[[StubLLMServer], OpenAICompatibleProvider]]:
    providers: list[OpenAICompatibleProvider] = []

    def make(server: StubLLMServer) -> OpenAICompatibleProvider:
        provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="sk-test", model="stub-model")
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        await provider.aclose()


def streamed(reply: StubReply, **kwargs: Any) -> StubReply:
    for name, value in kwargs.items():
        setattr(reply, name, value)
    return reply


async def test_text_arrives_in_deltas_and_the_usage_only_last_chunk_is_read(stub_server: Start, connect):
    server = stub_server([streamed(text_reply("The answer is 42.", usage=(31, 7)), stream_chars=5)])
    deltas: list[CompletionDelta] = []
    completion = await connect(server).complete(MESSAGES, on_delta=deltas.append)

    assert [d.text for d in deltas] == ["The a", "nswer", " is 4", "2."]
    assert completion.text == "The answer is 42."
    assert completion.usage == Usage(31, 7)  # from the chunk with empty choices
    assert completion.finish_reason == "stop"
    request = server.requests[0]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}


async def test_tool_call_argument_fragments_are_joined_and_handed_on(stub_server: Start, connect):
    args = {"answer": "forty-two", "evidence": "6*7", "reasoning": "multiplied"}
    server = stub_server(
        [
            streamed(
                tool_calls_reply(
                    [("calculator", '{"expression": "6*7"}', "c1"), ("final_answer", json.dumps(args), "c2")]
                ),
                stream_chars=4,
            )
        ]
    )
    deltas: list[CompletionDelta] = []
    completion = await connect(server).complete(MESSAGES, tools=None, on_delta=deltas.append)

    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == [
        ("c1", "calculator", {"expression": "6*7"}),
        ("c2", "final_answer", args),
    ]
    assert completion.finish_reason == "tool_calls"
    fragments = [d for d in deltas if d.call_index == 1 and d.arguments]
    assert len(fragments) > 5 and all(len(d.arguments) <= 4 for d in fragments)
    assert "".join(d.arguments for d in fragments) == json.dumps(args)
    assert {d.call_name for d in deltas if d.call_index == 1} == {"final_answer"}


async def test_a_stream_without_usage_is_unknown_usage_not_zero(stub_server: Start, connect):
    server = stub_server([text_reply("hi", usage=None)])
    completion = await connect(server).complete(MESSAGES, on_delta=lambda d: None)
    assert completion.usage == Usage(None, None) and not completion.usage.known
    assert completion.text == "hi" and completion.cost is None


@pytest.mark.parametrize("clean", [False, True], ids=["connection-dropped", "body-ended-early"])
async def test_a_cut_stream_is_a_transient_error(stub_server: Start, connect, clean):
    server = stub_server(
        [streamed(text_reply("The answer is 42."), stream_chars=2, cut_after=4, cut_clean=clean)]
    )
    deltas: list[CompletionDelta] = []
    with pytest.raises(ProviderError) as info:
        await connect(server).complete(MESSAGES, on_delta=deltas.append)
    assert info.value.transient and info.value.kind == "stream_cut"
    assert "".join(d.text for d in deltas) == "The an"  # 3 content chunks after the role chunk


async def test_a_cut_stream_is_retried_and_the_retry_starts_its_text_again(stub_server: Start, connect):
    server = stub_server(
        [
            streamed(text_reply("The answer is 42."), stream_chars=3, cut_after=3),
            text_reply("The answer is 42."),
        ]
    )
    seen: list[tuple[int, str]] = []
    completion = await complete_with_retries(
        connect(server),
        MESSAGES,
        None,
        base_delay=0.001,
        stream=lambda attempt, d: seen.append((attempt, d.text)),
    )
    assert completion.text == "The answer is 42." and server.request_count == 2
    assert "".join(t for a, t in seen if a == 1) == "The an"
    assert "".join(t for a, t in seen if a == 2) == "The answer is 42."


async def test_the_loop_streams_the_answer_field_of_a_native_final_answer(stub_server: Start, connect):
    server = stub_server(
        [
            streamed(
                tool_call_reply("calculator", {"expression": "6*7"}, content="Multiplying."), stream_chars=3
            ),
            streamed(final_answer_reply("**42**", "calculator", "6*7"), stream_chars=3),
        ]
    )
    seen: list[TextDelta] = []
    result = await AgentLoop(connect(server), default_registry()).run("What is 6*7?", on_text=seen.append)
    assert result.answer == "**42**" and result.usage.input_tokens == 20
    step2 = "".join(d.text for d in seen if d.step == 2)
    assert step2 == "**42**"  # the answer only: no JSON, no evidence
    assert "".join(d.text for d in seen if d.step == 1) == "Multiplying."


def test_the_stub_streams_as_openai_does():
    body = text_reply("abcdef", usage=(3, 2)).body
    assert isinstance(body, dict)
    chunks = stream_chunks(body, chars=4, include_usage=True)
    assert [c["choices"][0]["delta"] for c in chunks[:3]] == [
        {"role": "assistant", "content": ""},
        {"content": "abcd"},
        {"content": "ef"},
    ]
    assert chunks[3]["choices"][0]["finish_reason"] == "stop"
    assert chunks[4]["choices"] == [] and chunks[4]["usage"]["prompt_tokens"] == 3
    assert len(stream_chunks(body, include_usage=False)) == 4

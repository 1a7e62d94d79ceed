"""Requests in the form the OpenAI API specifies, which every compatible
server accepts (issue 46): ``tool_choice`` with tools, assistant content a
string, a validation error not retried, ``response_format`` for a schema
(with the fallback when a server refuses it), and a stream's usage counted
with the model's tokenizer when the server sends none."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentlab.agent.loop import AgentLoop
from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.agent.providers.openai_request import bounded_strings, request_body, request_messages
from agentlab.agent.retry import complete_with_retries
from agentlab.agent.review import REVIEW_SCHEMA, review_answer
from agentlab.agent.tools import ToolRegistry
from agentlab.agent.types import ProviderError, Usage
from agentlab.testing.stub_llm import (
    StubLLMServer,
    StubReply,
    error_reply,
    final_answer_reply,
    text_reply,
    tool_call_reply,
    tool_calls_reply,
)

Start = Callable[[Any], StubLLMServer]
QUESTION = "What is (16 - 3 - 4) * 2?"

#: What llama-cpp-python 0.3.36's server answered an assistant message with
#: ``"content": null`` (issue 46), abridged.
LLAMA_CPP_VALIDATION_500 = (
    "7 validation errors for ChatCompletionRequestAssistantMessage\ncontent\n"
    "  Input should be a valid string [type=string_type, input_value=None, input_type=NoneType]"
)


@pytest.fixture
async def connect() -> AsyncIterator[Callable[..., OpenAICompatibleProvider]]:
    providers: list[OpenAICompatibleProvider] = []

    def make(server: StubLLMServer, **kwargs: Any) -> OpenAICompatibleProvider:
        provider = OpenAICompatibleProvider(
            base_url=server.base_url, api_key="k", model="stub-model", **kwargs
        )
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        await provider.aclose()


def _streamed(reply: StubReply) -> StubReply:
    reply.stream_chars = 3
    return reply


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_every_request_with_tools_states_tool_choice_and_sends_content_as_a_string(
    stub_server: Start, connect: Any, registry: ToolRegistry, stream: bool
) -> None:
    replies = [
        tool_calls_reply([("calculator", '{"expression": "16 - 3 - 4"}', "c1")], content=None),
        tool_call_reply("calculator", '{"expression": "9 * 2"}', id="c2", content="Now times two."),
        final_answer_reply("18"),
    ]
    server = stub_server([_streamed(r) for r in replies] if stream else replies)
    on_text = (lambda _delta: None) if stream else None
    result = await AgentLoop(connect(server), registry, retry_base_delay=0.001).run(QUESTION, on_text=on_text)

    assert (result.stop_reason, result.answer) == ("final", "18")
    assert server.request_count == 3
    assert [r.get("tool_choice") for r in server.requests] == ["auto", "auto", "auto"]
    assert [bool(r.get("stream")) for r in server.requests] == [stream] * 3
    assistant = [m for m in server.requests[2]["messages"] if m["role"] == "assistant"]
    assert [(m["content"], [c["id"] for c in m["tool_calls"]]) for m in assistant] == [
        ("", ["c1"]),
        ("Now times two.", ["c2"]),
    ]


async def test_no_tool_choice_without_tools_and_a_null_content_from_a_caller_is_sent_as_a_string(
    stub_server: Start, connect: Any
) -> None:
    server = stub_server([text_reply("ok")])
    history: list[dict[str, Any]] = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "x", "type": "function"}]},
        {"role": "tool", "tool_call_id": "x", "content": "9"},
    ]
    await connect(server).complete(history, None)
    sent = server.requests[0]
    assert "tool_choice" not in sent and "tools" not in sent
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "x", "type": "function"}],
    }
    assert history[1]["content"] is None  # the caller's list is not changed


def test_request_body_and_messages() -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert request_messages(messages) is messages  # nothing to change: no copy
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert request_body("m", messages, tools, tool_choice="required", max_tokens=5) == {
        "model": "m",
        "messages": messages,
        "tools": tools,
        "tool_choice": "required",
        "max_tokens": 5,
    }
    assert request_body("m", messages, [], temperature=0.0, response_schema={"type": "object"}) == {
        "model": "m",
        "messages": messages,
        "temperature": 0.0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": {"type": "object"}, "strict": True},
        },
    }
    assert request_body("m", messages, None, response_schema={}, structured_output="off") == {
        "model": "m",
        "messages": messages,
    }


async def test_a_500_that_says_the_request_was_invalid_is_permanent_and_sent_once(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server([error_reply(500, LLAMA_CPP_VALIDATION_500), final_answer_reply("never")])
    with pytest.raises(ProviderError) as info:
        await complete_with_retries(
            connect(server), [{"role": "user", "content": "q"}], None, base_delay=0.001
        )
    error = info.value
    assert (error.kind, error.transient, error.status) == ("bad_request", False, 500)
    assert str(error) == f"HTTP 500: {LLAMA_CPP_VALIDATION_500}"
    assert server.request_count == 1

    # in a turn: ended provider_error at once, with the server's message recorded
    server = stub_server([error_reply(500, LLAMA_CPP_VALIDATION_500), final_answer_reply("never")])
    result = await AgentLoop(connect(server), registry, retry_base_delay=0.001).run(QUESTION)
    assert (result.stop_reason, result.error) == ("provider_error", f"HTTP 500: {LLAMA_CPP_VALIDATION_500}")
    assert server.request_count == 1

    # an invalid_request_error type on a 5xx, too; a plain 500 is still retried
    server = stub_server([error_reply(502, "bad message list", type="invalid_request_error")])
    with pytest.raises(ProviderError) as info:
        await complete_with_retries(connect(server), [], None, base_delay=0.001)
    assert (info.value.kind, server.request_count) == ("bad_request", 1)
    server = stub_server([error_reply(500, "The server had an error"), text_reply("ok")])
    completion = await complete_with_retries(connect(server), [], None, base_delay=0.001)
    assert (completion.text, server.request_count) == ("ok", 2)


# --------------------------------------------------------------------------- structured output


async def test_the_reviewer_asks_for_its_schema_and_reads_the_constrained_verdict(
    stub_server: Start, connect: Any
) -> None:
    verdict = {"verdict": "retry", "note": "9 * 2 is 18, not 19.", "retry_instruction": "Recompute 9 * 2."}
    server = stub_server([text_reply(json.dumps(verdict), usage=(90, 24))])
    review, completion = await review_answer(
        connect(server), question=QUESTION, answer="19", evidence="", reasoning=""
    )
    assert (review.verdict, review.note, review.retry_instruction) == (
        "retry",
        verdict["note"],
        "Recompute 9 * 2.",
    )
    assert completion.decoding == "schema" and completion.usage == Usage(90, 24)
    assert server.requests[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": REVIEW_SCHEMA, "strict": True},
    }


async def test_structured_output_off_sends_no_response_format(stub_server: Start, connect: Any) -> None:
    server = stub_server([text_reply('Sure. {"verdict": "accept", "note": "right"}')])
    provider = connect(server, structured_output="off")
    review, completion = await review_answer(
        provider, question=QUESTION, answer="18", evidence="", reasoning=""
    )
    assert review.verdict == "accept" and completion.decoding == "free"
    assert "response_format" not in server.requests[0]


async def test_a_server_that_refuses_json_schema_is_asked_with_json_object_then_without(
    stub_server: Start, connect: Any
) -> None:
    # what llama-cpp-python 0.3.36's server answers a json_schema response_format (abridged)
    refusal = (
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
        "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
    )
    accept = '{"verdict": "accept", "note": "right", "retry_instruction": null}'
    server = stub_server([error_reply(500, refusal), text_reply(accept), text_reply(accept)])
    provider = connect(server)
    review, completion = await review_answer(
        provider, question=QUESTION, answer="18", evidence="", reasoning=""
    )
    assert (review.verdict, review.note, completion.decoding) == ("accept", "right", "schema")
    assert [r["response_format"]["type"] for r in server.requests] == ["json_schema", "json_object"]
    assert server.requests[1]["response_format"] == {
        "type": "json_object",
        "schema": bounded_strings(REVIEW_SCHEMA),
    }
    assert bounded_strings(REVIEW_SCHEMA)["properties"]["retry_instruction"] == {
        "anyOf": [{"type": "string", "maxLength": 200}, {"type": "null"}]
    }
    assert provider.structured_output == "json_object"  # kept: json_schema is not tried again
    await review_answer(provider, question=QUESTION, answer="18", evidence="", reasoning="")
    assert server.requests[2]["response_format"]["type"] == "json_object"

    # a server that refuses both forms is asked without one, from then on
    server = stub_server(
        [
            error_reply(400, "Unsupported parameter: 'response_format'"),
            error_reply(400, "response_format json_object is not supported"),
            text_reply('Verdict: {"verdict": "accept", "note": "fine"}'),
        ]
    )
    provider = connect(server)
    review, completion = await review_answer(
        provider, question=QUESTION, answer="18", evidence="", reasoning=""
    )
    assert (review.verdict, completion.decoding) == ("accept", "free")
    assert ["response_format" in r for r in server.requests] == [True, True, False]
    assert (provider.structured_output, provider.constrained_decoding) == ("off", False)

    # any other bad request is the caller's error, not a refusal of the schema
    server = stub_server([error_reply(400, "Invalid value for 'temperature'")])
    with pytest.raises(ProviderError):
        await connect(server).complete([], None, response_schema=REVIEW_SCHEMA)
    assert server.request_count == 1


@pytest.mark.parametrize("clean", [True, False], ids=["ended", "dropped"])
async def test_an_empty_stream_for_a_request_with_tools_is_sent_again_unstreamed(
    stub_server: Start, connect: Any, registry: ToolRegistry, clean: bool
) -> None:
    """llama-cpp-python's server cannot stream an automatic tool choice: the
    stream ends before its first chunk ("Automatic streaming tool choice is
    not supported" in its log)."""
    empty = final_answer_reply("18")
    empty.cut_after, empty.cut_clean = 0, clean
    server = stub_server([empty, final_answer_reply("18"), final_answer_reply("19")])
    provider = connect(server)
    loop = AgentLoop(provider, registry, retry_base_delay=0.001)
    result = await loop.run(QUESTION, on_text=lambda _d: None)
    assert (result.stop_reason, result.answer) == ("final", "18")
    assert [bool(r.get("stream")) for r in server.requests] == [True, False]
    assert provider.stream_tools is False
    result = await loop.run(QUESTION, on_text=lambda _d: None)  # not streamed again
    assert result.answer == "19" and server.requests[2].get("stream") is None

    # a provider set not to stream tools never tries
    server = stub_server([final_answer_reply("18")])
    result = await AgentLoop(connect(server, stream_tools=False), registry).run(
        QUESTION, on_text=lambda _d: None
    )
    assert result.answer == "18" and "stream" not in server.requests[0]


# --------------------------------------------------------------------------- streamed usage


class _Counter:
    """A token counter that counts words: what the provider does with a
    counter's answer, apart from the tokenizer itself (tested with the real
    one in test_llama_cpp_server.py and test_token_count.py)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def usage(self, body: dict[str, Any], *, text: str | None, calls: Any) -> dict[str, int]:
        self.bodies.append(body)
        words = len((text or "").split()) + sum(len(f"{name} {raw}".split()) for _, name, raw in calls)
        return {
            "prompt_tokens": sum(len(m["content"].split()) for m in body["messages"]),
            "completion_tokens": words,
        }


async def test_a_stream_without_usage_is_counted_by_the_token_counter(
    stub_server: Start, connect: Any
) -> None:
    counter = _Counter()
    server = stub_server(
        [_streamed(text_reply("The answer is 42.", usage=None)), _streamed(text_reply("Yes.", usage=(7, 2)))]
    )
    provider = connect(server, token_counter=counter)
    messages = [{"role": "user", "content": "what is six times seven"}]
    first = await provider.complete(messages, on_delta=lambda _d: None)
    assert first.usage == Usage(5, 4)
    assert counter.bodies[0]["messages"] == messages
    # a server that sends usage is believed: the counter is not asked
    second = await provider.complete(messages, on_delta=lambda _d: None)
    assert second.usage == Usage(7, 2) and len(counter.bodies) == 1

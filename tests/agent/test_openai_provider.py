"""The OpenAI-compatible provider and the loop over real HTTP: the official
SDK against the stub server on loopback."""

from __future__ import annotations

import asyncio
import json
import resource
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentlab.agent.loop import AgentLoop
from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.agent.reports import CompletionReport, Report, ToolStartReport
from agentlab.agent.retry import complete_with_retries
from agentlab.agent.tools import ToolRegistry
from agentlab.agent.types import ProviderError, Step, ToolCall, ToolResult, Usage
from agentlab.testing.stub_llm import (
    StubLLMServer,
    StubReply,
    context_length_exceeded,
    error_reply,
    final_answer_reply,
    insufficient_quota,
    rate_limited,
    server_error,
    text_reply,
    tool_call_reply,
    tool_calls_reply,
)

from .conftest import Counter

QUESTION = "What is (16 - 3 - 4) * 2?"
Start = Callable[[Any], StubLLMServer]


@pytest.fixture
async def connect() -> AsyncIterator[Callable[..., OpenAICompatibleProvider]]:
    providers: list[OpenAICompatibleProvider] = []

    def make(server: StubLLMServer, **kwargs: Any) -> OpenAICompatibleProvider:
        provider = OpenAICompatibleProvider(
            base_url=server.base_url, api_key="sk-test", model="stub-model", **kwargs
        )
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        await provider.aclose()


def _loop(provider: OpenAICompatibleProvider, registry: ToolRegistry, **kwargs: Any) -> AgentLoop:
    return AgentLoop(provider, registry, retry_base_delay=0.001, **kwargs)


# --------------------------------------------------------------------------- mapping replies


async def test_tool_call_with_content_null_and_usage(stub_server: Start, connect: Any) -> None:
    server = stub_server(
        [tool_call_reply("calculator", '{"expression": "9*2"}', id="call_a", content=None, usage=(120, 17))]
    )
    completion = await connect(server).complete([{"role": "user", "content": QUESTION}], None)
    assert completion.text is None
    assert completion.tool_calls == (
        ToolCall(
            id="call_a",
            name="calculator",
            arguments={"expression": "9*2"},
            raw_arguments='{"expression": "9*2"}',
        ),
    )
    assert completion.usage == Usage(120, 17)
    assert (completion.model, completion.finish_reason) == ("stub-model", "tool_calls")
    assert server.requests[0]["model"] == "stub-model"
    assert server.requests[0]["messages"] == [{"role": "user", "content": QUESTION}]
    assert "tools" not in server.requests[0]


async def test_missing_usage_gives_unknown_tokens(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server([text_reply("18", usage=None)])
    result = await _loop(connect(server), registry).run(QUESTION)
    assert result.stop_reason == "final" and result.answer == "18"
    assert result.steps[0].completion.usage == Usage(None, None)
    bucket = {
        "input_tokens": 0,
        "output_tokens": 0,
        "calls": 1,
        "unknown_calls": 1,
        "cost": None,
        "unpriced_calls": 1,
    }
    assert result.usage.to_dict() == {
        **bucket,
        "by_model": {"stub-model": bucket},
        "by_role": {"agent": bucket},
    }


async def test_truncated_arguments_become_an_observation_and_the_next_request_is_valid(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server(
        [
            tool_call_reply("calculator", '{"expression": "(16 - 3', id="call_t"),
            final_answer_reply("18"),
        ]
    )
    result = await _loop(connect(server), registry).run(QUESTION)

    assert result.stop_reason == "final" and result.answer == "18"
    call = result.steps[0].completion.tool_calls[0]
    assert (call.arguments, call.raw_arguments) == ({}, '{"expression": "(16 - 3')
    assert call.error == (
        "the arguments are not valid JSON "
        "(Unterminated string starting at: line 1 column 16 (char 15)); they may "
        'have been cut off. Send a complete JSON object. Received: {"expression": "(16 - 3'
    )
    assert result.steps[0].results == [
        ToolResult(
            call_id="call_t",
            name="calculator",
            is_error=True,
            output="Invalid arguments for calculator: " + call.error,
        )
    ]
    second = server.requests[1]["messages"]
    assert second[2]["tool_calls"] == [
        {"id": "call_t", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
    ]
    assert second[3] == {
        "role": "tool",
        "tool_call_id": "call_t",
        "content": "Invalid arguments for calculator: " + call.error,
    }


async def test_arguments_that_are_not_an_object(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server(
        [
            tool_calls_reply([("calculator", '["2+2"]', "c1"), ("count", "", "c2")]),
            final_answer_reply("4"),
        ]
    )
    result = await _loop(connect(server), registry).run(QUESTION)
    first, second = result.steps[0].results
    assert (
        first.output
        == 'Invalid arguments for calculator: the arguments must be a JSON object, got list: ["2+2"]'
    )
    assert first.is_error is True
    assert (second.output, second.is_error) == ("counted  (1)", False)  # "" means no arguments


async def test_tools_are_sent_as_openai_function_specs(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server([final_answer_reply(18, ["a"], {"k": 1})])
    result = await _loop(connect(server), registry, max_tokens=64, temperature=0.0).run(QUESTION)
    assert (result.answer, result.evidence, result.reasoning) == ("18", '["a"]', '{"k": 1}')
    request = server.requests[0]
    assert [t["function"]["name"] for t in request["tools"]] == [
        "calculator",
        "search_documents",
        "ask_user",
        "final_answer",
        "count",
    ]
    assert request["tools"][0]["type"] == "function"
    assert (request["max_tokens"], request["temperature"]) == (64, 0.0)


async def test_the_request_body_is_what_the_sdks_own_transform_would_send(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    """The provider posts to /chat/completions without ``create``'s body
    transform; that is only right while the transform is an identity for the
    bodies we build. Check it on a real request body with every message kind
    (system, user, assistant with tool calls and text, tool results) and tools."""
    from openai._utils import maybe_transform
    from openai.types.chat import completion_create_params

    server = stub_server(
        [
            tool_calls_reply([("calculator", '{"expression": "16 - 3"}', "c1"), ("count", "", "c2")]),
            final_answer_reply("26"),
        ]
    )
    result = await _loop(connect(server), registry, max_tokens=64, temperature=0.5).run(QUESTION)
    assert result.answer == "26"
    body = server.requests[1]
    assert {m["role"] for m in body["messages"]} >= {"system", "user", "assistant", "tool"}
    assert body["tools"] and body["max_tokens"] == 64
    transformed = maybe_transform(body, completion_create_params.CompletionCreateParamsNonStreaming)
    assert json.dumps(transformed, sort_keys=True) == json.dumps(body, sort_keys=True)


# --------------------------------------------------------------------------- errors and retries


async def test_insufficient_quota_is_permanent_and_sent_once(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server([insufficient_quota(), final_answer_reply("never")])
    result = await _loop(connect(server), registry).run(QUESTION)
    assert result.stop_reason == "provider_error"
    assert result.error == (
        "HTTP 429: You exceeded your current quota, please check your plan and billing details."
    )
    assert server.request_count == 1

    with pytest.raises(ProviderError) as info:
        await connect(stub_server([insufficient_quota()])).complete([], None)
    assert (info.value.kind, info.value.transient, info.value.status) == ("quota", False, 429)


async def test_rate_limit_and_server_errors_are_retried_by_us_only(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server([rate_limited(), server_error(), final_answer_reply("18")])
    result = await _loop(connect(server), registry).run(QUESTION)
    assert (result.stop_reason, result.answer) == ("final", "18")
    assert server.request_count == 3
    assert result.steps_used == 1


async def test_sdk_retries_are_off(stub_server: Start, connect: Any) -> None:
    # One attempt of ours = exactly one HTTP request (the SDK would make 3).
    server = stub_server([rate_limited(), final_answer_reply("never")])
    with pytest.raises(ProviderError) as info:
        await complete_with_retries(connect(server), [], None, attempts=1)
    assert (info.value.kind, info.value.transient) == ("rate_limit", True)
    assert server.request_count == 1

    # Four attempts of ours = exactly four requests, then the last error.
    server = stub_server([server_error()] * 6)
    with pytest.raises(ProviderError) as info:
        await complete_with_retries(connect(server), [], None, attempts=4, base_delay=0.001)
    assert (info.value.kind, info.value.status) == ("server_error", 500)
    assert server.request_count == 4


async def test_context_length_exceeded_is_context_overflow(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server([context_length_exceeded(), final_answer_reply("never")])
    result = await _loop(connect(server), registry).run(QUESTION)
    assert result.stop_reason == "context_overflow"
    assert result.error == (
        "HTTP 400: This model's maximum context length is 8192 tokens. "
        "However, your messages resulted in 9000 "
        "tokens. Please reduce the length of the messages."
    )
    assert server.request_count == 1

    # Servers that only say so in the message (vLLM, llama.cpp) are recognised too.
    for reply in (
        error_reply(
            400, "This model's maximum context length is 2048 tokens and your request has 3000 input tokens"
        ),
        error_reply(500, "the request exceeds the available context size, try increasing it"),
    ):
        with pytest.raises(ProviderError) as info:
            await connect(stub_server([reply])).complete([], None)
        assert (info.value.kind, info.value.transient) == ("context_overflow", False)


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (
            error_reply(
                401, "Incorrect API key provided", type="invalid_request_error", code="invalid_api_key"
            ),
            "auth",
        ),
        (error_reply(404, "The model `nope` does not exist", code="model_not_found"), "not_found"),
        (error_reply(400, "Invalid value for 'temperature'"), "bad_request"),
    ],
)
async def test_other_client_errors_are_permanent(
    stub_server: Start, connect: Any, reply: StubReply, kind: str
) -> None:
    server = stub_server([reply, final_answer_reply("never")])
    with pytest.raises(ProviderError) as info:
        await complete_with_retries(connect(server), [], None, base_delay=0.001)
    assert (info.value.kind, info.value.transient) == (kind, False)
    assert server.request_count == 1


async def test_timeouts_and_refused_connections_are_transient(stub_server: Start, connect: Any) -> None:
    slow = stub_server([text_reply("late", delay=5), text_reply("late", delay=5)])
    with pytest.raises(ProviderError) as info:
        await complete_with_retries(connect(slow, timeout=0.2), [], None, attempts=2, base_delay=0.001)
    assert (info.value.kind, info.value.transient) == ("timeout", True)
    assert slow.request_count == 2

    closed = StubLLMServer(lambda body: text_reply("x"))
    base_url = closed.base_url
    closed.stop()  # the port is now closed
    provider = OpenAICompatibleProvider(base_url=base_url, api_key=None, model="m")
    try:
        with pytest.raises(ProviderError) as info:
            await provider.complete([], None)
        assert (info.value.kind, info.value.transient) == ("connection", True)
    finally:
        await provider.aclose()


async def test_a_body_without_choices_is_a_permanent_error(stub_server: Start, connect: Any) -> None:
    server = stub_server(
        [StubReply({"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": []})]
    )
    with pytest.raises(ProviderError) as info:
        await connect(server).complete([], None)
    assert (info.value.kind, info.value.transient) == ("invalid_response", False)


# --------------------------------------------------------------------------- cancel and resume over HTTP


async def test_cancel_in_the_middle_of_an_http_call(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server([final_answer_reply("late", delay=30)])
    cancel = asyncio.Event()
    cancelled_at: list[float] = []

    async def cancel_once_the_request_is_in() -> None:
        # the middle of the call: the server has the request (a fixed delay
        # raced the request's start on a busy machine)
        while server.request_count < 1:
            await asyncio.sleep(0.01)
        cancelled_at.append(time.monotonic())
        cancel.set()

    watcher = asyncio.ensure_future(cancel_once_the_request_is_in())
    result = await _loop(connect(server), registry).run(QUESTION, cancel=cancel)
    await watcher
    assert result.stop_reason == "cancelled"
    assert time.monotonic() - cancelled_at[0] < 1.0  # not the reply's 30 s
    assert server.request_count == 1
    assert result.steps_used == 0


async def test_deadline_in_the_middle_of_an_http_call(
    stub_server: Start, connect: Any, registry: ToolRegistry
) -> None:
    server = stub_server([final_answer_reply("late", delay=30)])
    started = time.monotonic()
    result = await _loop(connect(server), registry).run(QUESTION, deadline=time.monotonic() + 0.3)
    assert result.stop_reason == "timeout"
    assert time.monotonic() - started < 1.0


async def test_resume_over_http_sends_only_the_missing_request(
    stub_server: Start, connect: Any, registry: ToolRegistry, counter: Counter
) -> None:
    first = stub_server(
        [
            tool_calls_reply([("count", '{"label": "a"}', "c1"), ("count", '{"label": "b"}', "c2")]),
            final_answer_reply("2"),
        ]
    )
    reports: list[Report] = []

    async def crash_after_first_tool(report: Report) -> None:
        if isinstance(report, ToolStartReport):
            return  # (the driver records it; this test is about results)
        reports.append(report)
        if len(reports) == 2:
            raise ConnectionError("worker died")

    with pytest.raises(ConnectionError):
        await _loop(connect(first), registry).run(QUESTION, on_report=crash_after_first_tool)
    assert counter.runs == ["a"]

    # The driver rebuilds the partial step from its event log (completion + one result).
    completion = next(r for r in reports if isinstance(r, CompletionReport)).completion
    recorded = [Step(index=1, completion=completion, results=[reports[1].result])]
    recorded = [Step.from_dict(json.loads(json.dumps(s.to_dict()))) for s in recorded]

    second = stub_server([final_answer_reply("2")])
    result = await _loop(connect(second), registry).run(QUESTION, recorded=recorded)
    assert (result.stop_reason, result.answer) == ("final", "2")
    assert counter.runs == ["a", "b"]  # "a" was not run again
    assert second.request_count == 1  # the recorded completion was not requested again
    tool_messages = [m for m in second.requests[0]["messages"] if m["role"] == "tool"]
    assert tool_messages == [
        {"role": "tool", "tool_call_id": "c1", "content": "counted a (1)"},
        {"role": "tool", "tool_call_id": "c2", "content": "counted b (2)"},
    ]
    assert result.usage.calls == 2


async def test_request_urls_are_merged_once_and_follow_a_new_base_url(
    stub_server: Start, connect: Any
) -> None:
    first = stub_server([tool_call_reply("final_answer", '{"answer": "1"}'), text_reply("two")])
    provider = connect(first)
    client = provider._client
    await provider.complete([{"role": "user", "content": QUESTION}], None)
    merged = client._prepare_url("/chat/completions")
    await provider.complete([{"role": "user", "content": QUESTION}], None)
    # the same URL object: merged once, reused
    assert client._prepare_url("/chat/completions") is merged
    assert str(merged) == f"{first.base_url}/chat/completions"
    assert len(first.requests) == 2
    # a new base URL is not answered from the old one's merges
    second = stub_server([text_reply("three")])
    client.base_url = second.base_url
    completion = await provider.complete([{"role": "user", "content": QUESTION}], None)
    assert completion.text == "three"
    assert str(client._prepare_url("/chat/completions")) == f"{second.base_url}/chat/completions"
    assert len(first.requests) == 2 and len(second.requests) == 1


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("not json at all", "not a JSON object: not json at all"),
        ("[1, 2]", "not a JSON object: [1, 2]"),
        ({"choices": [{"finish_reason": "stop"}]}, "no choices with a message"),
        ({"choices": ["text"]}, "no choices with a message"),
    ],
)
async def test_a_reply_that_is_not_a_chat_completion_is_a_permanent_error(
    stub_server: Start, connect: Any, body: Any, says: str
) -> None:
    server = stub_server([StubReply(body)])
    with pytest.raises(ProviderError) as info:
        await connect(server).complete([], None)
    assert (info.value.kind, info.value.transient) == ("invalid_response", False)
    assert says in str(info.value)


async def test_a_tool_call_entry_that_is_not_an_object_is_a_call_without_a_name(
    stub_server: Start, connect: Any
) -> None:
    reply = tool_call_reply("calculator", '{"expression": "1"}', id="call_a")
    assert isinstance(reply.body, dict)
    reply.body["choices"][0]["message"]["tool_calls"].append("junk")
    completion = await connect(stub_server([reply])).complete([], None)
    assert [call.name for call in completion.tool_calls] == ["calculator", ""]
    assert completion.tool_calls[1].error == "the tool call has no function name"


async def test_a_provider_sets_no_connection_limit_of_its_own(stub_server: Start, connect: Any) -> None:
    """Its callers bound how many calls they make at once (``run_eval
    --concurrency`` up to 1024): every one of them is on the wire at once,
    none queued for a connection — the SDK's pool holds 1,000 (aiohttp's
    own default, 100). The server answers only once all ``calls`` are in."""
    calls = 1025
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 3 * calls:  # a socket each end, and the rest of the process
        if hard != resource.RLIM_INFINITY and hard < 3 * calls:
            pytest.skip(f"{3 * calls} open files needed, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (3 * calls, hard))
    everyone_in = threading.Barrier(calls, timeout=15)

    def handler(body: dict[str, Any]) -> StubReply:
        everyone_in.wait()  # BrokenBarrierError (a 500) unless all are in flight together
        return text_reply("ok")

    provider = connect(stub_server(handler))
    try:
        completions = await asyncio.gather(
            *(provider.complete([{"role": "user", "content": str(i)}], None) for i in range(calls))
        )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert [c.text for c in completions] == ["ok"] * calls

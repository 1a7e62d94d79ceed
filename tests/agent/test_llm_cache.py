"""The LLM-call cache's provider (``agentlab.agent.providers.caching``) on an
in-memory store: what is in the key, sampled requests, a failing store, usage
counted apart (docs/evaluating.md#caching-llm-calls)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from agentlab.agent.providers.caching import (
    CachePolicy,
    CachingProvider,
    canonical_json,
    parse_expiry,
    request_key,
)
from agentlab.agent.types import Completion, ToolCall, Usage
from agentlab.agent.usage import UsageTotals

TOOLS = [
    {"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {}}}}
]
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]


class CountingProvider:
    """A provider that answers every call with a new completion and counts them."""

    name = "counting"
    native_tools = True
    constrained_decoding = False

    def __init__(self, model: str = "m1", base_url: str | None = "http://a/v1") -> None:
        self.model = model
        self.base_url = base_url
        self.seed: int | None = None
        self.calls = 0

    async def complete(self, messages: list[dict[str, Any]], tools: Any = None, **_: Any) -> Completion:
        self.calls += 1
        return Completion(
            text=f"answer {self.calls}",
            tool_calls=(ToolCall(id="c1", name="calc", arguments={"x": 1}),),
            usage=Usage(100, 20),
            model=self.model,
            finish_reason="tool_calls",
            cost=0.5,
        )

    async def aclose(self) -> None:
        return None


class MemoryStore:
    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}
        self.requests: dict[str, dict[str, Any]] = {}

    async def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    async def put(self, key: str, *, request: dict[str, Any], completion: dict[str, Any], **_: Any) -> None:
        self.entries.setdefault(key, completion)
        self.requests.setdefault(key, request)


class FailingStore(MemoryStore):
    async def put(self, key: str, **_: Any) -> None:
        raise ConnectionError("database gone")


def _call(provider: CachingProvider, messages=MESSAGES, tools=TOOLS, **kwargs: Any) -> Completion:
    async def go() -> Completion:
        completion = await provider.complete(messages, tools, **kwargs)
        await provider.flush()
        return completion

    return asyncio.run(go())


def test_a_second_identical_call_is_served_from_the_store_without_a_request() -> None:
    inner, store = CountingProvider(), MemoryStore()
    cached = CachingProvider(inner, store)
    first = _call(cached, max_tokens=64, temperature=0.0)
    second = _call(cached, max_tokens=64, temperature=0.0)
    assert inner.calls == 1
    assert (first.cached, second.cached) == (False, True)
    # the stored completion as reported then: text, tool calls, finish reason, usage, cost
    assert second.text == "answer 1" and second.tool_calls == first.tool_calls
    assert (second.finish_reason, second.usage, second.cost) == ("tool_calls", Usage(100, 20), 0.5)
    assert second.to_dict()["cached"] is True and "cached" not in first.to_dict()
    (request,) = store.requests.values()
    assert (
        request["messages"] == MESSAGES and request["model"] == "m1" and request["base_url"] == "http://a/v1"
    )


@pytest.mark.parametrize(
    "change",
    ["model", "base_url", "message", "tool_schema", "temperature", "seed", "max_tokens", "response_schema"],
)
def test_a_change_of_any_key_part_misses(change: str) -> None:
    store = MemoryStore()
    base = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 64, "temperature": 0.0}
    _call(CachingProvider(CountingProvider(), store), **base)
    inner = CountingProvider(model="m2" if change == "model" else "m1")
    if change == "base_url":
        inner.base_url = "http://b/v1"
    if change == "seed":
        inner.seed = 7
    other = dict(base)
    if change == "message":
        other["messages"] = [MESSAGES[0], {"role": "user", "content": "2+3?"}]
    if change == "tool_schema":
        schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
        other["tools"] = [{"type": "function", "function": {"name": "calc", "parameters": schema}}]
    if change == "temperature":
        other["temperature"] = 0.2
    if change == "max_tokens":
        other["max_tokens"] = 65
    if change == "response_schema":
        other["response_schema"] = {"type": "object"}
    completion = _call(CachingProvider(inner, store, CachePolicy(sampled=True)), **other)
    assert inner.calls == 1 and not completion.cached
    assert len(store.entries) == 2


def test_sampled_requests_never_hit_without_the_flag_and_do_with_it() -> None:
    store = MemoryStore()
    inner = CountingProvider()
    plain = CachingProvider(inner, store)
    _call(plain, temperature=0.7)
    _call(plain, temperature=0.7)
    assert inner.calls == 2 and store.entries == {}  # neither served nor stored
    sampled = CachingProvider(inner, store, CachePolicy(sampled=True))
    _call(sampled, temperature=0.7)
    assert _call(sampled, temperature=0.7).cached and inner.calls == 3
    # a seed makes the request reproducible: cached without the flag
    seeded_inner = CountingProvider()
    seeded_inner.seed = 1
    seeded = CachingProvider(seeded_inner, store)
    _call(seeded, temperature=0.7)
    assert _call(seeded, temperature=0.7).cached and seeded_inner.calls == 1


def test_a_failing_write_leaves_the_call_answered() -> None:
    inner = CountingProvider()
    cached = CachingProvider(inner, FailingStore())
    completion = _call(cached, temperature=0.0)
    assert completion.text == "answer 1" and not completion.cached
    assert cached.write_failures == 1


def test_the_write_does_not_delay_the_answer() -> None:
    class SlowStore(MemoryStore):
        async def put(self, key: str, **kwargs: Any) -> None:
            await asyncio.sleep(0.5)
            await super().put(key, **kwargs)

    async def go() -> tuple[float, int]:
        cached = CachingProvider(CountingProvider(), SlowStore())
        loop = asyncio.get_running_loop()
        started = loop.time()
        await cached.complete(MESSAGES, TOOLS, temperature=0.0)
        answered = loop.time() - started
        await cached.aclose()  # waits for the pending write
        return answered, len(cached.store.entries)  # type: ignore[attr-defined]

    answered, stored = asyncio.run(go())
    assert answered < 0.25 and stored == 1


def test_cached_usage_is_counted_apart_and_charged_nothing() -> None:
    inner = CountingProvider()
    cached = CachingProvider(inner, MemoryStore())
    totals = UsageTotals()
    totals.add(_call(cached, temperature=0.0))
    totals.add(_call(cached, temperature=0.0))
    data = totals.to_dict()
    assert (data["calls"], data["input_tokens"], data["output_tokens"], data["cost"]) == (1, 100, 20, 0.5)
    assert (data["cache_hits"], data["cache_hit_input_tokens"], data["cache_hit_output_tokens"]) == (
        1,
        100,
        20,
    )
    assert data["by_model"]["m1"]["cache_hits"] == 1
    assert UsageTotals.from_dict(data).to_dict() == data


def test_the_key_is_sha256_of_canonical_json() -> None:
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'
    assert request_key({"a": 1, "b": 2}) == request_key({"b": 2, "a": 1})
    assert request_key({}) == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("15m", 900), ("12h", 43200), ("7d", 604800), ("2w", 1209600)]
)
def test_expiry_parses(text: str, seconds: int) -> None:
    assert parse_expiry(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["7", "0d", "1.5d", "7 days", "-1d", ""])
def test_an_expiry_that_does_not_parse_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--cache-expiry must be a positive whole number"):
        parse_expiry(text)

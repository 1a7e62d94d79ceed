"""The sampling seed of a task's LLM calls (``agentlab.agent.seeding``): sent
as the request's ``seed`` by the OpenAI-compatible provider, recorded by the
scripted one, part of the LLM-call cache's key, and only inside its block and
its own task."""

from __future__ import annotations

import asyncio

from agentlab.agent.providers.caching import CachePolicy, CachingProvider
from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.agent.providers.scripted import ScriptedProvider, text
from agentlab.agent.seeding import sampling_seed, sampling_seeded
from agentlab.testing.stub_llm import StubLLMServer, text_reply
from tests.agent.test_llm_cache import CountingProvider, MemoryStore

MESSAGES = [{"role": "user", "content": "hi"}]


def test_the_seed_is_set_only_inside_its_block_and_its_own_task() -> None:
    async def seen(seed: int | None) -> int | None:
        with sampling_seeded(seed):
            await asyncio.sleep(0.01)  # the other task runs meanwhile
            return sampling_seed()

    async def both() -> list[int | None]:
        return list(await asyncio.gather(seen(1), seen(2), seen(None)))

    assert asyncio.run(both()) == [1, 2, None]
    assert sampling_seed() is None


def test_the_openai_provider_sends_the_seed_and_no_seed_without_one() -> None:
    bodies: list[dict] = []

    def handler(body):
        bodies.append(body)
        return text_reply("ok")

    async def calls(base_url: str) -> None:
        provider = OpenAICompatibleProvider(base_url=base_url, api_key="k", model="stub")
        try:
            with sampling_seeded(1234):
                await provider.complete(MESSAGES, temperature=0.7)
            await provider.complete(MESSAGES, temperature=0.7)
        finally:
            await provider.aclose()

    with StubLLMServer(handler) as server:
        asyncio.run(calls(server.base_url))
    assert bodies[0]["seed"] == 1234 and bodies[0]["temperature"] == 0.7
    assert "seed" not in bodies[1]


def test_the_scripted_provider_records_the_seed() -> None:
    provider = ScriptedProvider([text("a"), text("b")])

    async def calls() -> None:
        with sampling_seeded(7):
            await provider.complete(MESSAGES)
        await provider.complete(MESSAGES)

    asyncio.run(calls())
    assert provider.kwargs_seen[0]["seed"] == 7
    assert "seed" not in provider.kwargs_seen[1]


def test_two_seeds_are_two_cache_keys_and_a_seeded_sample_is_cached() -> None:
    inner, store = CountingProvider(), MemoryStore()
    cached = CachingProvider(inner, store, CachePolicy())

    async def call(seed: int) -> None:
        with sampling_seeded(seed):
            await cached.complete(MESSAGES, temperature=0.7)

    for seed in (1, 2, 1):
        asyncio.run(call(seed))
    assert inner.calls == 2  # seed 1 again came from the store: a seeded sample repeats

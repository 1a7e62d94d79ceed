"""The in-process GGUF provider streaming (``complete(..., on_delta=…)``): the
text arrives token by token on the caller's loop, and the completion — text,
exact usage, finish reason — is the one the plain call returns."""

from __future__ import annotations

import asyncio
import importlib.util
import threading

import pytest

from agentlab.agent import AgentLoop, default_registry
from agentlab.agent.streaming import CompletionDelta, TextDelta

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed"
    ),
]
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Write two sentences about ducks."},
]


@pytest.fixture(scope="module")
def provider():
    from agentlab.agent.providers.local import LocalGGUFProvider

    return LocalGGUFProvider()


async def test_streamed_text_is_the_completions_and_usage_is_exact(provider) -> None:
    # the first call of a prompt fills llama.cpp's prefix cache, and a greedy
    # reply computed with it can differ from the very first one: compare warm calls
    await provider.complete(MESSAGES, max_tokens=40)
    plain = await provider.complete(MESSAGES, max_tokens=40)
    deltas: list[CompletionDelta] = []
    threads: set[int] = set()

    def on_delta(delta: CompletionDelta) -> None:
        threads.add(threading.get_ident())
        deltas.append(delta)

    streamed = await provider.complete(MESSAGES, max_tokens=40, on_delta=on_delta)
    assert streamed == plain  # greedy decoding: the same reply, usage counted by llama.cpp
    assert streamed.usage.output_tokens is not None and streamed.usage.output_tokens > 5
    text = "".join(d.text for d in deltas)
    assert len(deltas) > 5 and plain.text is not None
    # the last token (cut by max_tokens) may come only with the completion
    assert plain.text.startswith(text.rstrip()) and len(text) >= len(plain.text) // 2
    assert threads == {threading.get_ident()}  # handed over on the caller's loop, not llama's thread


async def test_the_local_agent_streams_only_the_answer_of_its_json_reply(provider) -> None:
    seen: list[TextDelta] = []
    loop = AgentLoop(provider, default_registry(), max_steps=1, max_tokens=96)
    result = await loop.run("What is the capital of France? Answer in one word.", on_text=seen.append)
    shown = "".join(d.text for d in seen)
    assert "{" not in shown and '"tool"' not in shown  # never the raw JSON of the protocol
    if result.stop_reason == "final":
        assert result.answer.startswith(shown.strip()[:5])
    await asyncio.sleep(0)

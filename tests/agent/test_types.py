"""The ``LLMProvider`` protocol: every provider class satisfies it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.agent.providers.scripted import ScriptedProvider
from agentlab.agent.types import LLMProvider


async def test_the_scripted_and_openai_providers_satisfy_the_protocol_and_close() -> None:
    providers = [
        ScriptedProvider([]),
        OpenAICompatibleProvider(base_url="http://127.0.0.1:9/v1", api_key=None, model="qwen"),
    ]
    for provider in providers:
        assert isinstance(provider, LLMProvider), type(provider).__name__
        assert await provider.aclose() is None


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
async def test_the_local_provider_satisfies_the_protocol_without_loading_a_model(tmp_path: Path) -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider

    model_file = tmp_path / "tiny.gguf"
    model_file.write_bytes(b"not loaded: the constructor only checks that the file exists")
    provider = LocalGGUFProvider(model_path=model_file)
    assert isinstance(provider, LLMProvider)
    assert (provider.name, provider.model, provider.native_tools) == ("local", "tiny", False)
    assert await provider.aclose() is None


def test_an_object_without_aclose_is_not_a_provider() -> None:
    class NoClose:
        name = "half"
        model = "half"
        native_tools = True

        async def complete(self, messages, tools=None, **kw):
            raise AssertionError("never called")

    assert not isinstance(NoClose(), LLMProvider)

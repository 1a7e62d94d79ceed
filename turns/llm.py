"""The LLM provider a turn uses, built from settings
(docs/architecture.md#processes-embedded-and-production; docs/configuration.md)."""

from __future__ import annotations

import logging
import time

from django.conf import settings

from agentlab.agent.pricing import Price
from agentlab.agent.types import LLMProvider

logger = logging.getLogger(__name__)


def get_provider(
    *,
    model: str | None = None,
    price: Price | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
) -> LLMProvider:
    """A provider for the configured LLM: an OpenAI-compatible endpoint when
    ``AGENTLAB_LLM_BASE_URL`` is set, else the embedded GGUF model.

    ``base_url`` overrides ``AGENTLAB_LLM_BASE_URL`` (a run's endpoint, which
    travels with it to the Celery workers; the key is this process's
    ``AGENTLAB_LLM_API_KEY`` unless ``api_key`` is given — an experiment
    variant's own, never stored with the run). ``model`` overrides
    ``AGENTLAB_MODEL`` (endpoint) or ``AGENTLAB_GGUF_PATH``
    (local model file). ``price`` overrides the price table
    (``agentlab.agent.pricing``): without it an endpoint's cost comes from the
    table (by base URL and model) and the local model's is unknown. Create one
    per event loop and share it between the turns of that loop: an async HTTP
    client is bound to the loop it first ran on (the local model itself is
    loaded once per process).
    """
    # deferred: the providers are the boundary a turn crosses, never app loading's
    from agentlab.agent.providers import make_provider

    base_url = base_url or settings.AGENTLAB_LLM_BASE_URL
    if base_url:
        return make_provider(
            base_url=base_url,
            api_key=api_key or settings.AGENTLAB_LLM_API_KEY,
            model=model or settings.AGENTLAB_MODEL,
            gguf_path=None,
            price=price,
            structured_output=settings.AGENTLAB_LLM_STRUCTURED_OUTPUT,
            stream_tools=settings.AGENTLAB_LLM_STREAM_TOOLS,
            timeout=settings.AGENTLAB_LLM_TIMEOUT_S,
            tokenizer=settings.AGENTLAB_LLM_TOKENIZER,
        )
    return make_provider(
        base_url=None,
        api_key=None,
        model=None,
        gguf_path=model or settings.AGENTLAB_GGUF_PATH,
        price=price,
        n_ctx=settings.AGENTLAB_LOCAL_N_CTX,
    )


def preload_configured_model() -> None:
    """Load the embedded model now when it is the configured provider (no
    ``AGENTLAB_LLM_BASE_URL``), so the first turn does not wait for it: called
    on a thread when the server (``config.startup``) or a Celery worker
    (``worker_ready``) starts. The provider is built as the turns build it
    (``get_provider``), so they find the same model in memory. Logs and
    returns when it cannot load — the first turn then reports that."""
    if settings.AGENTLAB_LLM_BASE_URL:
        return
    started = time.monotonic()
    try:
        provider = get_provider()
        load = getattr(provider, "load", None)
        if load is None:
            return
        load()
    except Exception as exc:  # no local extra, a broken file …
        logger.info("embedded model: not preloaded (%s)", exc)
        return
    logger.info("embedded model %s loaded in %.1f s", provider.model, time.monotonic() - started)

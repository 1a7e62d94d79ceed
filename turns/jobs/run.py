"""Driving a turn as a background job: the policy of its kind, the provider, the tools.

``run_turn_job`` is shared by the Celery task (``turns.jobs.tasks``) and the
inline executor (``turns.jobs.handover``), so both drive a turn identically; the
driver's conditional claim makes a duplicate or late hand-over a no-op that
writes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from agentlab.agent.streaming import OnDelta
from agentlab.agent.tools import ToolRegistry, default_registry
from agentlab.agent.types import Completion, LLMProvider, ProviderError
from common.db import DatabaseThreads
from turns.driver.drive import drive_turn
from turns.driver.policies import CHAT, EVALUATION
from turns.llm import get_provider
from turns.llm_cache import cached_provider, chat_cache_policy
from turns.models import Turn, TurnKind

logger = logging.getLogger(__name__)


def job_tools() -> ToolRegistry:
    """The tool registry background turns use: the built-in tools (plugins
    add theirs to each attempt, ``turns.driver.extensions``)."""
    return default_registry()


class UnavailableProvider:
    """Stands in for a provider that could not be built (bad settings, the
    ``local`` extra missing): every call is a permanent ``ProviderError``, so
    the turn still ends with ``turn.failed`` (cause ``provider_error``) instead
    of staying queued or running forever. Satisfies ``LLMProvider``."""

    name = "unavailable"
    model = ""
    native_tools = True
    constrained_decoding = False

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        response_schema: dict[str, Any] | None = None,
        on_delta: OnDelta | None = None,
    ) -> Completion:
        raise ProviderError(f"no LLM provider: {self.reason}", transient=False, kind="unavailable")

    async def aclose(self) -> None:
        """Nothing to close."""


def make_job_provider(
    *, model: str | None = None, base_url: str | None = None, api_key: str | None = None
) -> LLMProvider:
    """``turns.llm.get_provider(model=, base_url=, api_key=)`` (all ``None``:
    the configured one) — wrapped in the LLM-call cache only when
    ``AGENTLAB_CHAT_LLM_CACHE`` says so (``turns.llm_cache.chat_cache_policy``)
    — or an ``UnavailableProvider`` saying why not."""
    try:
        provider = get_provider(model=model, base_url=base_url, api_key=api_key)
        return cached_provider(provider, chat_cache_policy())
    except Exception as exc:
        logger.exception("could not build the LLM provider")
        return UnavailableProvider(f"{type(exc).__name__}: {exc}")


def turn_provider(agent_options: dict[str, Any]) -> LLMProvider | None:
    """The provider of a chat turn that names its own endpoint in
    ``Turn.agent_options`` (``model``, ``base_url``: a side-by-side variant,
    ``evaluation.experiments.side_by_side``), ``None`` for one that names
    neither. A base URL other than ``AGENTLAB_LLM_BASE_URL`` is sent no key
    (this process's key goes only to the endpoint it is configured for)."""
    model = agent_options.get("model") or None
    base_url = agent_options.get("base_url") or None
    if model is None and base_url is None:
        return None
    foreign = base_url is not None and base_url != settings.AGENTLAB_LLM_BASE_URL
    return make_job_provider(model=model, base_url=base_url, api_key="not-needed" if foreign else None)


def _turn_kind(turn_id: int) -> tuple[str, dict[str, Any]] | None:
    """The turn's kind and agent options, ``None`` when it does not exist."""
    return Turn.objects.filter(pk=turn_id).values_list("kind", "agent_options").first()


async def run_turn_job(
    turn_id: int,
    *,
    provider: LLMProvider,
    db: DatabaseThreads,
    tools: ToolRegistry | None = None,
    job_id: str = "",
) -> None:
    """Drive turn ``turn_id`` under the policy of its kind (chat or evaluation).

    Shared by the Celery task and the inline executor. A chat turn that
    names its own endpoint (``turn_provider``) is driven by a provider of
    its own, closed when it ends; the others by ``provider``. Does nothing
    when the turn does not exist or is not queued (the driver's claim fails).
    """
    row = await db.run(_turn_kind, turn_id)
    if row is None:
        logger.warning("turn job %s: no such turn", turn_id)
        return
    kind, agent_options = row
    policy = EVALUATION if kind == TurnKind.EVALUATION else CHAT
    own = turn_provider(agent_options or {}) if policy is CHAT else None
    try:
        result = await drive_turn(
            turn_id, policy=policy, provider=own or provider, db=db, tools=tools or job_tools(), job_id=job_id
        )
    finally:
        if own is not None:
            await own.aclose()
    if result is None:
        logger.info("turn job %s: not claimed (already taken or no longer queued)", turn_id)

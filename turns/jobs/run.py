"""Driving a turn as a background job: the policy of its kind, the provider, the tools.

``run_turn_job`` is shared by the Celery task (``turns.jobs.tasks``) and the
inline executor (``turns.jobs.handover``), so both drive a turn identically; the
driver's conditional claim makes a duplicate or late hand-over a no-op that
writes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

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


def make_job_provider() -> LLMProvider:
    """``turns.llm.get_provider()`` — wrapped in the LLM-call cache only when
    ``AGENTLAB_CHAT_LLM_CACHE`` says so (``turns.llm_cache.chat_cache_policy``)
    — or an ``UnavailableProvider`` saying why not."""
    try:
        return cached_provider(get_provider(), chat_cache_policy())
    except Exception as exc:
        logger.exception("could not build the LLM provider")
        return UnavailableProvider(f"{type(exc).__name__}: {exc}")


def _turn_kind(turn_id: int) -> str | None:
    return Turn.objects.filter(pk=turn_id).values_list("kind", flat=True).first()


async def run_turn_job(
    turn_id: int,
    *,
    provider: LLMProvider,
    db: DatabaseThreads,
    tools: ToolRegistry | None = None,
    job_id: str = "",
) -> None:
    """Drive turn ``turn_id`` under the policy of its kind (chat or evaluation).

    Shared by the Celery task and the inline executor. Does nothing when the
    turn does not exist or is not queued (the driver's claim fails).
    """
    kind = await db.run(_turn_kind, turn_id)
    if kind is None:
        logger.warning("turn job %s: no such turn", turn_id)
        return
    if kind == TurnKind.REPLAY:  # without its recorded path it would run the tools the replay serves
        logger.warning("turn job %s: a replay turn is driven by manage.py replay_turns only", turn_id)
        return
    policy = EVALUATION if kind == TurnKind.EVALUATION else CHAT
    result = await drive_turn(
        turn_id, policy=policy, provider=provider, db=db, tools=tools or job_tools(), job_id=job_id
    )
    if result is None:
        logger.info("turn job %s: not claimed (already taken or no longer queued)", turn_id)

"""The one place where transient LLM errors are retried.

Providers never retry by themselves (the OpenAI SDK is built with
``max_retries=0``); they raise ``ProviderError(transient=True)`` for rate
limits, 5xx, timeouts and dropped connections, and this module retries those
with exponential backoff and a little jitter (tenacity). Permanent errors
(bad request, auth, insufficient quota, context overflow) are raised at once.
(CONTRIBUTING.md#classified-failures; healthchecks ``TransportError(permanent)``.)
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from agentlab.agent.streaming import CompletionDelta
from agentlab.agent.text import json_body_safe
from agentlab.agent.types import Completion, LLMProvider, ProviderError
from agentlab.telemetry import llm_call

logger = logging.getLogger(__name__)


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.transient


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    delay = state.next_action.sleep if state.next_action else 0.0
    logger.warning("LLM call failed (attempt %d), retrying in %.2fs: %s", state.attempt_number, delay, exc)


async def complete_with_retries(
    provider: LLMProvider,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    attempts: int = 4,
    max_tokens: int | None = None,
    temperature: float | None = None,
    base_delay: float = 0.5,
    max_delay: float = 8.0,
    response_schema: dict[str, Any] | None = None,
    stream: Callable[[int, CompletionDelta], None] | None = None,
    role: str = "agent",
) -> Completion:
    """Call ``provider.complete`` up to ``attempts`` times in all
    (``response_schema``: see ``LLMProvider``).

    ``stream``: when given and the provider streams (``streaming = True``),
    each try is streamed and its fragments are handed to ``stream(try,
    delta)``, ``try`` counting from 1 — a try after a cut stream starts its
    text again.

    Waits ``min(base_delay * 2**(n-1), max_delay)`` seconds plus up to
    ``base_delay / 2`` of random jitter after the n-th transient failure. Raises
    the last ``ProviderError`` when attempts run out, a permanent
    ``ProviderError`` at once, and any other exception unchanged. Cancelling
    the calling task interrupts a backoff sleep.

    Each try is timed, counted and traced as a ``chat`` span of the current
    turn by ``agentlab.telemetry.llm_call`` in ``role`` (``agent``,
    ``review``, ``judge``).
    """
    retrying = AsyncRetrying(
        stop=stop_after_attempt(max(1, attempts)),
        wait=wait_exponential(multiplier=base_delay, max=max_delay) + wait_random(0, base_delay / 2),
        retry=retry_if_exception(_is_transient),
        before_sleep=_log_retry,
        reraise=True,
    )
    # the one path of every LLM request: what a tool returned or a document
    # held may carry NUL or a lone surrogate, which no request body can encode
    messages = json_body_safe(messages)
    tools = json_body_safe(tools) if tools is not None else None
    streams = stream is not None and bool(getattr(provider, "streaming", False))
    async for attempt in retrying:
        with (
            attempt,
            llm_call(provider, messages, role=role, max_tokens=max_tokens, temperature=temperature) as call,
        ):
            if not streams:
                return call.done(
                    await provider.complete(
                        messages,
                        tools,
                        max_tokens=max_tokens,
                        temperature=temperature,
                        response_schema=response_schema,
                    )
                )
            assert stream is not None
            return call.done(
                await provider.complete(
                    messages,
                    tools,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    response_schema=response_schema,
                    on_delta=functools.partial(stream, attempt.retry_state.attempt_number),
                )
            )
    raise AssertionError("unreachable: tenacity either returns or reraises")  # pragma: no cover

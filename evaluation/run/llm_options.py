"""``run_eval``'s options for the agent's LLM calls: the sampling temperature
and system prompt (as an experiment's variant has them), and the LLM-call cache
(docs/evaluating.md#caching-llm-calls)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from agentlab.agent.providers.caching import CachePolicy
from evaluation.run.request import cache_policy


def add_agent_options(parser: CommandParser) -> None:
    """The agent's sampling and system prompt, as an experiment's variant has them."""
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature of every agent call, 0 to 2 (default: the provider's; greedy "
        "for the embedded model)",
    )
    parser.add_argument(
        "--system-prompt",
        default=None,
        help="the agent's job description in place of the default (the tool list and protocol "
        "are still added)",
    )
    parser.add_argument(
        "--system-prompt-file", default=None, metavar="FILE", help="--system-prompt read from FILE (UTF-8)"
    )


def agent_options(opts: dict[str, Any]) -> dict[str, Any]:
    """``--temperature`` and ``--system-prompt``/``--system-prompt-file``
    checked, the file read: ``{"temperature", "system_prompt"}``. Raises
    ``ValueError`` naming the option (exit 2)."""
    temperature = opts.get("temperature")
    if temperature is not None and not (math.isfinite(temperature) and 0 <= temperature <= 2):
        raise ValueError(f"--temperature must be between 0 and 2, got {temperature:g}")
    prompt, path = opts.get("system_prompt"), opts.get("system_prompt_file")
    if prompt is not None and path is not None:
        raise ValueError("give --system-prompt or --system-prompt-file, not both")
    if path is not None:
        try:
            prompt = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--system-prompt-file {path}: cannot read it ({exc})") from None
    if prompt is not None and not prompt.strip():
        raise ValueError("--system-prompt" + ("-file is empty" if path else " is blank"))
    return {"temperature": temperature, "system_prompt": prompt}


def add_cache_options(parser: CommandParser) -> None:
    """The LLM-call cache (docs/evaluating.md#caching-llm-calls)."""
    parser.add_argument(
        "--cache",
        action="store_true",
        help="serve LLM calls made before with the same request from the cache (and store new ones)",
    )
    parser.add_argument(
        "--cache-expiry",
        default=None,
        help="how long a cached completion is served, e.g. 12h, 7d, 2w (default: until cache_clear)",
    )
    parser.add_argument(
        "--cache-sampled",
        action="store_true",
        help="cache requests with temperature > 0 and no seed too (by default they are never served)",
    )


def cache_options(opts: dict[str, Any]) -> CachePolicy | None:
    """``--cache``, ``--cache-expiry`` and ``--cache-sampled`` checked
    (``evaluation.run.request.cache_policy``: ``ValueError`` naming the
    option, exit 2); ``None`` without ``--cache``."""
    return cache_policy(
        cache=bool(opts.get("cache")),
        expiry=opts.get("cache_expiry"),
        sampled=bool(opts.get("cache_sampled")),
    )

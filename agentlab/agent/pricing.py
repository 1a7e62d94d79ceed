"""What a completion cost, in US dollars — or ``None`` when that is not known.

Order of precedence for one completion:

1. a cost the provider reported itself (an OpenAI-compatible gateway that
   returns ``usage.cost``, say) — kept as it is;
2. a price set for the run (``Price``: dollars per million input and output
   tokens, ``run_eval --price-in/--price-out``) — for self-hosted models;
3. the price table of the ``genai-prices`` package (a maintained snapshot
   shipped inside the package, read offline: nothing is fetched), matched by
   the provider's **base URL** (``https://api.openai.com/v1`` → OpenAI) and
   the model name.

Anything else is unknown: an endpoint whose URL the table does not know (a
self-hosted vLLM, Ollama or llama.cpp server — even one serving a model named
like a commercial one), a model the provider's table lacks, the embedded
local model, a completion whose token counts were not reported. Unknown is
``None`` and shown "—", never 0.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Any

from agentlab.agent.types import Usage

logger = logging.getLogger(__name__)

#: The base URL the OpenAI SDK uses when none is given.
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class Price:
    """A price override: US dollars per million input and output tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"a price per million tokens must be a number ≥ 0, got {value!r} for {name}")

    def cost(self, usage: Usage) -> float | None:
        """The cost of ``usage`` at this price; ``None`` when a count is unknown.
        An override has one input rate: cached input tokens are charged at it."""
        if usage.input_tokens is None or usage.output_tokens is None:
            return None
        return (usage.input_tokens * self.input_per_mtok + usage.output_tokens * self.output_per_mtok) / 1e6

    def to_dict(self) -> dict[str, float]:
        return {"input_per_mtok": self.input_per_mtok, "output_per_mtok": self.output_per_mtok}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Price | None:
        """Inverse of ``to_dict``; ``None`` or ``{}`` gives ``None``."""
        if not data:
            return None
        return cls(float(data["input_per_mtok"]), float(data["output_per_mtok"]))


@functools.lru_cache(maxsize=256)
def _table_entry(base_url: str, model: str) -> bool:
    """Whether the price table knows ``model`` at ``base_url`` (cached: a
    miss is looked up once per process, not once per completion)."""
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    try:
        calc_price(PriceUsage(input_tokens=0, output_tokens=0), model, provider_api_url=base_url)
    except LookupError:
        return False
    return True


def table_cost(*, base_url: str | None, model: str, usage: Usage) -> float | None:
    """The cost of ``usage`` from the ``genai-prices`` table, or ``None``.

    ``base_url`` ``None`` means the OpenAI SDK's default endpoint. Matching is
    by base URL only (never by model name alone), so a self-hosted endpoint is
    unknown cost. Prices that depend on the request time use the current one.
    Input tokens read from the provider's prompt cache
    (``usage.cached_input_tokens``) are charged at the table's cached rate
    (``cache_read_tokens``), the rest at the input rate.
    """
    if usage.input_tokens is None or usage.output_tokens is None or not model:
        return None
    url = (base_url or OPENAI_DEFAULT_BASE_URL).strip()
    try:
        if not _table_entry(url, model):
            return None
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price

        cached = min(usage.cached_input_tokens or 0, usage.input_tokens)
        price = calc_price(
            PriceUsage(
                input_tokens=usage.input_tokens,
                cache_read_tokens=cached or None,
                output_tokens=usage.output_tokens,
            ),
            model,
            provider_api_url=url,
        )
    except (LookupError, ValueError, ImportError) as exc:  # a table without this entry, or no package
        logger.debug("no price for %s at %s: %s", model, url, exc)
        return None
    return float(price.total_price)


def completion_cost(
    *, reported: float | None, price: Price | None, base_url: str | None, model: str, usage: Usage
) -> float | None:
    """The cost of one completion of an OpenAI-compatible endpoint, by the
    order in the module docstring. ``reported`` is the provider's own figure,
    ``base_url`` the endpoint's (``None``: the OpenAI SDK's default). The
    embedded model has no table entry: it uses ``Price.cost`` alone."""
    if reported is not None:
        return reported
    if price is not None:
        return price.cost(usage)
    return table_cost(base_url=base_url, model=model, usage=usage)

"""Cost from the genai-prices table, a per-run price, or unknown (``agentlab.agent.pricing``)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price

from agentlab.agent.pricing import Price, completion_cost, table_cost
from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.agent.types import Usage
from agentlab.testing.stub_llm import text_reply

OPENAI = "https://api.openai.com/v1"


def _table(model: str, url: str, tokens_in: int, tokens_out: int) -> float:
    price = calc_price(
        PriceUsage(input_tokens=tokens_in, output_tokens=tokens_out), model, provider_api_url=url
    )
    return float(price.total_price)


def test_a_known_model_at_its_providers_url_is_priced_from_the_table() -> None:
    cost = table_cost(base_url=OPENAI, model="gpt-4o-mini", usage=Usage(1_000_000, 1_000_000))
    assert cost == _table("gpt-4o-mini", OPENAI, 1_000_000, 1_000_000)
    assert cost is not None and cost > 0
    # no base URL is the OpenAI SDK's default endpoint
    assert table_cost(base_url=None, model="gpt-4o-mini", usage=Usage(1000, 10)) == _table(
        "gpt-4o-mini", OPENAI, 1000, 10
    )


def test_unknown_model_self_hosted_endpoint_and_unknown_tokens_are_unknown_cost() -> None:
    assert table_cost(base_url=OPENAI, model="smollm2-135m", usage=Usage(100, 10)) is None
    # a self-hosted server is unknown even when it names its model like a commercial one
    assert table_cost(base_url="http://127.0.0.1:8000/v1", model="gpt-4o-mini", usage=Usage(100, 10)) is None
    assert table_cost(base_url=OPENAI, model="gpt-4o-mini", usage=Usage(None, 10)) is None


def test_a_price_override_wins_over_the_table_and_a_reported_cost_over_both() -> None:
    price = Price(input_per_mtok=0.2, output_per_mtok=0.8)
    assert price.cost(Usage(1_000_000, 500_000)) == pytest.approx(0.6)
    assert price.cost(Usage(10, None)) is None
    usage = Usage(1000, 1000)
    assert completion_cost(
        reported=None, price=price, base_url=OPENAI, model="gpt-4o-mini", usage=usage
    ) == pytest.approx(0.001)
    assert (
        completion_cost(reported=0.5, price=price, base_url=OPENAI, model="gpt-4o-mini", usage=usage) == 0.5
    )
    with pytest.raises(ValueError, match="must be a number ≥ 0"):
        Price(input_per_mtok=-1, output_per_mtok=0)
    assert Price.from_dict(price.to_dict()) == price and Price.from_dict(None) is None


async def test_openai_provider_prices_by_its_base_url(stub_server: Any) -> None:
    stub = stub_server([text_reply("18", usage=(2000, 100), model="gpt-4o-mini-2024-07-18")] * 2)
    # the stub plays api.openai.com: the provider prices by its configured base URL
    client = openai.AsyncOpenAI(base_url=stub.base_url, api_key="x", max_retries=0)
    provider = OpenAICompatibleProvider(base_url=OPENAI, api_key="x", model="gpt-4o-mini", client=client)
    completion = await provider.complete([{"role": "user", "content": "?"}])
    assert completion.cost == _table("gpt-4o-mini-2024-07-18", OPENAI, 2000, 100)
    self_hosted = OpenAICompatibleProvider(base_url=stub.base_url, api_key="x", model="gpt-4o-mini")
    assert (await self_hosted.complete([{"role": "user", "content": "?"}])).cost is None
    await client.close()
    await self_hosted.aclose()


def test_cached_input_tokens_are_charged_at_the_cached_rate() -> None:
    """Before: a cached prompt was charged at the full input rate (21 % over
    on the reviewer's gpt-4o-mini run)."""
    usage = Usage(input_tokens=4000, output_tokens=500, cached_input_tokens=3000)
    cost = table_cost(base_url=OPENAI, model="gpt-4o-mini", usage=usage)
    # gpt-4o-mini: $0.15 per million input, $0.075 cached, $0.60 output
    assert cost == pytest.approx((1000 * 0.15 + 3000 * 0.075 + 500 * 0.60) / 1e6)
    full = table_cost(base_url=OPENAI, model="gpt-4o-mini", usage=Usage(4000, 500))
    assert full == pytest.approx((4000 * 0.15 + 500 * 0.60) / 1e6)
    assert Usage.from_dict(usage.to_dict()) == usage
    assert Usage(1, 2).to_dict() == {"input_tokens": 1, "output_tokens": 2}


async def test_the_openai_provider_reads_cached_tokens_and_the_totals_keep_them(stub_server: Any) -> None:
    from agentlab.agent.usage import UsageTotals

    reply = text_reply("18", usage=(4000, 500), model="gpt-4o-mini")
    usage_body: dict[str, Any] = reply.body["usage"]  # type: ignore[index,assignment]
    usage_body["prompt_tokens_details"] = {"cached_tokens": 3000}
    stub = stub_server([reply])
    client = openai.AsyncOpenAI(base_url=stub.base_url, api_key="x", max_retries=0)
    provider = OpenAICompatibleProvider(base_url=OPENAI, api_key="x", model="gpt-4o-mini", client=client)
    completion = await provider.complete([{"role": "user", "content": "?"}])
    assert completion.usage == Usage(input_tokens=4000, output_tokens=500, cached_input_tokens=3000)
    assert completion.cost == pytest.approx((1000 * 0.15 + 3000 * 0.075 + 500 * 0.60) / 1e6)
    totals = UsageTotals()
    totals.add(completion)
    assert totals.to_dict()["cached_input_tokens"] == 3000
    assert totals.to_dict()["by_model"]["gpt-4o-mini"]["cached_input_tokens"] == 3000
    assert UsageTotals.from_dict(totals.to_dict()).to_dict() == totals.to_dict()
    await client.close()

from __future__ import annotations

from typing import Any

from agentlab.agent.types import Completion, Usage
from agentlab.agent.usage import UsageTotals


def _c(model: str, inp: int | None, out: int | None, cost: float | None = None) -> Completion:
    return Completion(text="x", usage=Usage(inp, out), model=model, cost=cost)


def test_known_usage_is_summed_per_model_and_unknown_is_counted_apart() -> None:
    totals = UsageTotals()
    totals.add(_c("a", 100, 20))
    totals.add(_c("a", 50, 5))
    totals.add(_c("b", None, None))
    totals.add(_c("b", 7, None))  # half-known is unknown: never guessed

    a = {"input_tokens": 150, "output_tokens": 25, "calls": 2, "unknown_calls": 0}
    b = {"input_tokens": 0, "output_tokens": 0, "calls": 2, "unknown_calls": 2}
    unpriced = {"cost": None, "unpriced_calls": 2}
    assert totals.to_dict() == {
        "input_tokens": 150,
        "output_tokens": 25,
        "calls": 4,
        "unknown_calls": 2,
        "cost": None,
        "unpriced_calls": 4,
        "by_model": {"a": {**a, **unpriced}, "b": {**b, **unpriced}},
        "by_role": {
            "agent": {"input_tokens": 150, "output_tokens": 25, "calls": 4, "unknown_calls": 2, "cost": None}
            | {"unpriced_calls": 4}
        },
    }


def test_cost_is_none_until_a_call_has_a_cost() -> None:
    totals = UsageTotals()
    totals.add(_c("a", 1, 1))
    assert totals.cost is None
    totals.add(_c("a", 1, 1, cost=0.25))
    totals.add(_c("b", 1, 1, cost=0.5))
    assert totals.cost == 0.75
    assert totals.to_dict()["by_model"]["a"]["cost"] == 0.25


def test_merge_adds_both_sides_and_round_trips_through_dict() -> None:
    turn = UsageTotals()
    turn.add(_c("a", 10, 2))
    review = UsageTotals()
    review.add(_c("judge", 30, 3, cost=0.01), role="review")
    review.add(_c("a", None, None), role="review")
    turn.merge(review)

    data = turn.to_dict()
    assert data["input_tokens"] == 40
    assert data["output_tokens"] == 5
    assert data["calls"] == 3
    assert data["unknown_calls"] == 1
    assert data["cost"] == 0.01
    assert data["unpriced_calls"] == 2
    assert data["by_model"]["a"] == {
        "input_tokens": 10,
        "output_tokens": 2,
        "calls": 2,
        "unknown_calls": 1,
        "cost": None,
        "unpriced_calls": 2,
    }
    assert data["by_role"] == {
        "agent": {
            "input_tokens": 10,
            "output_tokens": 2,
            "calls": 1,
            "unknown_calls": 0,
            "cost": None,
            "unpriced_calls": 1,
        },
        "review": {
            "input_tokens": 30,
            "output_tokens": 3,
            "calls": 2,
            "unknown_calls": 1,
            "cost": 0.01,
            "unpriced_calls": 1,
        },
    }
    assert UsageTotals.from_dict(data).to_dict() == data
    assert UsageTotals.from_dict(None).to_dict() == {
        "input_tokens": 0,
        "output_tokens": 0,
        "calls": 0,
        "unknown_calls": 0,
        "cost": None,
        "unpriced_calls": 0,
        "by_model": {},
        "by_role": {},
    }


def test_usage_stored_before_roles_and_pricing_were_counted_reads_as_unpriced() -> None:
    old: dict[str, Any] = {
        "input_tokens": 5,
        "output_tokens": 1,
        "calls": 1,
        "unknown_calls": 0,
        "cost": None,
        "by_model": {},
    }
    assert UsageTotals.from_dict(old).unpriced_calls == 1
    assert UsageTotals.from_dict({**old, "cost": 0.5}).unpriced_calls == 0

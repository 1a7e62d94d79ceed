"""Token and cost totals over many completions, per model and per role.

Unknown usage stays unknown: a completion whose provider did not report both
token counts adds nothing to the token sums and is counted in
``unknown_calls`` instead, so a total is never silently "0 because we did not
know". Likewise a completion without a cost adds nothing to ``cost`` and is
counted in ``unpriced_calls``; ``cost`` stays ``None`` until some completion
has a cost. The role says which call it was — ``agent`` (a step of the agent
loop), ``review`` (the reviewer), ``judge`` (the LLM judge scorer) or
``user_simulator`` (the simulated user of a conversation example,
``evaluation.run.simulator``) — so every view of a turn can label and sum them
the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agentlab.agent.types import Completion

#: Which call a completion was: a step of the agent loop, the reviewer's, or
#: the LLM judge's (a scorer: ``evaluation.judge.grader``), or the simulated
#: user's (``evaluation.run.simulator``), kept apart so the cost of grading or
#: of playing the user is never read as the agent's.
UsageRole = Literal["agent", "review", "judge", "user_simulator"]
USAGE_ROLES: tuple[str, ...] = ("agent", "review", "judge", "user_simulator")


@dataclass
class _Bucket:
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    unknown_calls: int = 0
    cost: float | None = None
    unpriced_calls: int = 0
    cached_input_tokens: int = 0
    cache_hits: int = 0
    cache_hit_input_tokens: int = 0
    cache_hit_output_tokens: int = 0

    def add(self, completion: Completion) -> None:
        if completion.cached:  # served by the LLM-call cache: no request, no charge
            self.cache_hits += 1
            self.cache_hit_input_tokens += int(completion.usage.input_tokens or 0)
            self.cache_hit_output_tokens += int(completion.usage.output_tokens or 0)
            return
        self.calls += 1
        usage = completion.usage
        if usage.known:
            self.input_tokens += int(usage.input_tokens or 0)
            self.output_tokens += int(usage.output_tokens or 0)
            self.cached_input_tokens += int(usage.cached_input_tokens or 0)
        else:
            self.unknown_calls += 1
        if completion.cost is not None:
            self.cost = (self.cost or 0.0) + float(completion.cost)
        else:
            self.unpriced_calls += 1

    def merge(self, other: _Bucket) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.calls += other.calls
        self.unknown_calls += other.unknown_calls
        self.unpriced_calls += other.unpriced_calls
        self.cached_input_tokens += other.cached_input_tokens
        self.cache_hits += other.cache_hits
        self.cache_hit_input_tokens += other.cache_hit_input_tokens
        self.cache_hit_output_tokens += other.cache_hit_output_tokens
        if other.cost is not None:
            self.cost = (self.cost or 0.0) + other.cost

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "calls": self.calls,
            "unknown_calls": self.unknown_calls,
            "cost": self.cost,
            "unpriced_calls": self.unpriced_calls,
        }
        if self.cached_input_tokens:
            data["cached_input_tokens"] = self.cached_input_tokens
        if self.cache_hits:
            data["cache_hits"] = self.cache_hits
            data["cache_hit_input_tokens"] = self.cache_hit_input_tokens
            data["cache_hit_output_tokens"] = self.cache_hit_output_tokens
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> _Bucket:
        cost = data.get("cost")
        calls = int(data.get("calls") or 0)
        unpriced = data.get("unpriced_calls")
        return cls(
            input_tokens=int(data.get("input_tokens") or 0),
            output_tokens=int(data.get("output_tokens") or 0),
            calls=calls,
            unknown_calls=int(data.get("unknown_calls") or 0),
            cost=None if cost is None else float(cost),
            # rows stored before unpriced_calls existed: unpriced when they had no cost at all
            unpriced_calls=int(unpriced) if unpriced is not None else (calls if cost is None else 0),
            cached_input_tokens=int(data.get("cached_input_tokens") or 0),
            cache_hits=int(data.get("cache_hits") or 0),
            cache_hit_input_tokens=int(data.get("cache_hit_input_tokens") or 0),
            cache_hit_output_tokens=int(data.get("cache_hit_output_tokens") or 0),
        )


@dataclass
class UsageTotals:
    """Summed usage of many completions, overall, per model and per role.

    ``to_dict()`` shape (JSON-serialisable, stored on turns and runs)::

        {"input_tokens": int, "output_tokens": int, "calls": int,
         "unknown_calls": int, "cost": float | None, "unpriced_calls": int,
         ["cached_input_tokens": int,]
         "by_model": {model: {<the same keys>}},
         "by_role": {"agent" | "review" | "judge": {<the same keys>}}}

    ``cached_input_tokens`` (of ``input_tokens``, those read from the
    provider's prompt cache and priced at its cached rate) is there only
    when some call reported cached tokens. ``cache_hits``,
    ``cache_hit_input_tokens`` and ``cache_hit_output_tokens`` (there only
    when some completion was served by the LLM-call cache,
    ``agentlab.agent.providers.caching``) count those completions apart: they
    are in none of ``calls``, the token sums or ``cost`` (no request was
    made, nothing is charged).

    Token sums cover only calls whose usage is known (both counts reported);
    ``calls - unknown_calls`` of them. ``cost`` is US dollars summed over the
    ``calls - unpriced_calls`` calls that had one, ``None`` when none had.
    """

    _total: _Bucket = field(default_factory=_Bucket)
    _by_model: dict[str, _Bucket] = field(default_factory=dict)
    _by_role: dict[str, _Bucket] = field(default_factory=dict)

    @property
    def input_tokens(self) -> int:
        return self._total.input_tokens

    @property
    def output_tokens(self) -> int:
        return self._total.output_tokens

    @property
    def calls(self) -> int:
        return self._total.calls

    @property
    def cache_hits(self) -> int:
        """Completions served by the LLM-call cache (not in ``calls``)."""
        return self._total.cache_hits

    @property
    def unknown_calls(self) -> int:
        return self._total.unknown_calls

    @property
    def cost(self) -> float | None:
        return self._total.cost

    @property
    def unpriced_calls(self) -> int:
        return self._total.unpriced_calls

    def add(self, completion: Completion, *, role: UsageRole = "agent") -> None:
        """Count one completion (one LLM call) made in ``role``."""
        self._total.add(completion)
        self._by_model.setdefault(completion.model or "", _Bucket()).add(completion)
        self._by_role.setdefault(role, _Bucket()).add(completion)

    def merge(self, other: UsageTotals) -> None:
        """Add ``other``'s totals into these (e.g. an archived attempt's)."""
        self._total.merge(other._total)
        for model, bucket in other._by_model.items():
            self._by_model.setdefault(model, _Bucket()).merge(bucket)
        for role, bucket in other._by_role.items():
            self._by_role.setdefault(role, _Bucket()).merge(bucket)

    def to_dict(self) -> dict[str, Any]:
        data = self._total.to_dict()
        data["by_model"] = {model: bucket.to_dict() for model, bucket in sorted(self._by_model.items())}
        data["by_role"] = {
            role: self._by_role[role].to_dict() for role in USAGE_ROLES if role in self._by_role
        }
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> UsageTotals:
        """Inverse of ``to_dict``; ``None`` or ``{}`` gives empty totals."""
        data = data or {}
        totals = cls(_total=_Bucket.from_dict(data))
        for model, bucket in (data.get("by_model") or {}).items():
            totals._by_model[str(model)] = _Bucket.from_dict(bucket or {})
        for role, bucket in (data.get("by_role") or {}).items():
            totals._by_role[str(role)] = _Bucket.from_dict(bucket or {})
        return totals

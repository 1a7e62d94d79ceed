"""The reference-free scorers of an online evaluator: built-ins (answered,
steps, latency) and a plugin's checks (docs/monitoring.md#scorers). The LLM
judge is ``monitoring.judging``. Pure functions of a turn's recorded values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turns.models import TurnOutcome


@dataclass(frozen=True)
class ScorerResult:
    """One scorer's verdict on one turn: ``value`` in [0, 1] (``None``:
    unscored, ``explanation`` says why), ``passed`` (``None`` when unscored)."""

    name: str
    value: float | None
    passed: bool | None
    explanation: str

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "passed": self.passed, "explanation": self.explanation}


def unscored(name: str, why: str) -> ScorerResult:
    """A scorer that could not score (``why``)."""
    return ScorerResult(name=name, value=None, passed=None, explanation=why)


def verdict(name: str, passed: bool, explanation: str) -> ScorerResult:
    """A pass (1.0) or a fail (0.0)."""
    return ScorerResult(name=name, value=1.0 if passed else 0.0, passed=passed, explanation=explanation)


def answered_score(outcome: str) -> ScorerResult:
    """``answered``: passes when the turn's outcome is ``answered``; the
    explanation is the outcome (answered, asked, failed, cancelled, rejected)."""
    return verdict("answered", outcome == TurnOutcome.ANSWERED, outcome or "no outcome")


def steps_score(steps: int, bound: int) -> ScorerResult:
    """``steps``: passes when the turn used at most ``bound`` steps."""
    return verdict("steps", steps <= bound, f"{steps} step(s), bound {bound}")


def latency_score(timings: Mapping[str, Any], bound_ms: int) -> ScorerResult:
    """``latency``: passes when the turn's ``total_ms`` is at most ``bound_ms``;
    unscored when the turn recorded no total."""
    total = timings.get("total_ms")
    if not isinstance(total, int | float) or isinstance(total, bool):
        return unscored("latency", "the turn recorded no total_ms")
    return verdict("latency", total <= bound_ms, f"{int(total)} ms, bound {bound_ms} ms")


def checks_score(checks: Iterable[Mapping[str, Any]], plugin: str) -> ScorerResult:
    """``checks``: the ``check`` events' data of the turn, those of
    ``plugin`` (``*``: any); value = the fraction that passed, passes when
    all did; unscored when the turn has none of that plugin's."""
    mine = [c for c in checks if plugin == "*" or c.get("plugin") == plugin]
    verdicts = [c.get("passed") for c in mine if isinstance(c.get("passed"), bool)]
    if not verdicts:
        return unscored("checks", f"no check events of plugin {plugin!r}")
    passed = sum(1 for v in verdicts if v)
    failed = sorted({str(c.get("name")) for c in mine if c.get("passed") is False})
    text = f"{passed}/{len(verdicts)} checks passed" + (f"; failed: {', '.join(failed)}" if failed else "")
    return ScorerResult(
        name="checks", value=passed / len(verdicts), passed=passed == len(verdicts), explanation=text
    )


def combine(results: Sequence[ScorerResult]) -> tuple[float | None, bool | None]:
    """A turn's ``(value, passed)`` from its scorers' results: the mean of the
    scored values and whether all scored ones passed; ``(None, None)`` when
    none scored."""
    scored = [r for r in results if r.value is not None]
    if not scored:
        return None, None
    return sum(r.value for r in scored if r.value is not None) / len(scored), all(r.passed for r in scored)

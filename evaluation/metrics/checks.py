"""Check metrics: how plugins' checks fared over a run (pure functions).

Every ``check`` event of a run's turns is one ``CheckRow``. For every check
name, ``check_metrics`` counts how many steps (``scope: "step"``) or turns
(``scope: "turn"``) ran it, how many passed and failed, and how many distinct
turns ran it and failed it at least once — overall and per task type. A
plugin that raised counts under ``plugin_error:<plugin>`` like any failed
check, so a broken plugin is visible in the same table.

``{"evidence_quotes_a_document": {"scope": "turn", "ran": 20, "passed": 9,
"failed": 11, "pass_rate": 0.45, "turns": 20, "turns_failed": 11,
"per_task_type": {"document_qa": {…same keys but scope…}}}}``
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckRow:
    """One recorded check: the turn it belongs to, the example's task type,
    the check's name and scope (``"step"`` or ``"turn"``), and its verdict."""

    turn_id: int
    task_type: str
    name: str
    scope: str
    passed: bool


def _bucket(rows: list[CheckRow]) -> dict[str, Any]:
    passed = sum(1 for r in rows if r.passed)
    return {
        "ran": len(rows),
        "passed": passed,
        "failed": len(rows) - passed,
        "pass_rate": passed / len(rows) if rows else None,
        "turns": len({r.turn_id for r in rows}),
        "turns_failed": len({r.turn_id for r in rows if not r.passed}),
    }


def check_metrics(rows: Iterable[CheckRow]) -> dict[str, dict[str, Any]]:
    """Per check name (sorted): ``scope`` (``"step"``, ``"turn"`` or ``"mixed"``
    when a name was used at both), the counts of ``_bucket`` and
    ``per_task_type`` (the same counts per task type, sorted). ``{}`` when the
    run recorded no checks."""
    by_name: dict[str, list[CheckRow]] = defaultdict(list)
    for row in rows:
        by_name[row.name].append(row)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(by_name):
        group = by_name[name]
        scopes = {r.scope for r in group}
        by_type: dict[str, list[CheckRow]] = defaultdict(list)
        for row in group:
            by_type[row.task_type].append(row)
        out[name] = {
            "scope": scopes.pop() if len(scopes) == 1 else "mixed",
            **_bucket(group),
            "per_task_type": {t: _bucket(by_type[t]) for t in sorted(by_type)},
        }
    return out


def check_row(*, turn_id: int, task_type: str, data: Mapping[str, Any]) -> CheckRow | None:
    """The ``CheckRow`` of a ``check`` event's data, or ``None`` when the data
    is not a check (no name, or ``passed`` not a boolean)."""
    name, passed = data.get("name"), data.get("passed")
    if not isinstance(name, str) or not isinstance(passed, bool):
        return None
    return CheckRow(
        turn_id=turn_id, task_type=task_type, name=name, scope=str(data.get("scope") or "step"), passed=passed
    )


def _side(bucket: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not bucket:
        return None
    return {k: bucket.get(k) for k in ("scope", "ran", "passed", "failed", "pass_rate", "turns")}


def checks_side_by_side(
    base: Mapping[str, Mapping[str, Any]], candidate: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """A check's pass rate in two runs side by side, for every check name
    either run recorded (sorted): ``{"base": {"scope", "ran", "passed",
    "failed", "pass_rate", "turns"} | None, "candidate": … | None,
    "difference": candidate − base pass rate (``None`` unless both ran it)}``.
    Each side is that run's own counts (``metrics["checks"]``), not paired by
    example: a check may run on steps that only one run took."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(base) | set(candidate)):
        b, c = _side(base.get(name)), _side(candidate.get(name))
        difference = None
        if b and c and b["pass_rate"] is not None and c["pass_rate"] is not None:
            difference = c["pass_rate"] - b["pass_rate"]
        out[name] = {"base": b, "candidate": c, "difference": difference}
    return out

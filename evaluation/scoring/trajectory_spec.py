"""An example's expected trajectory: its fields read and checked, as plain values (no Django).

An example (a JSONL line, a CSV row, an API record) may carry, beside its gold
answer, the path the agent should take (docs/evaluating.md#trajectories):

===================== =================================================================
field                 rule
===================== =================================================================
``trajectory``        a list of objects ``{"tool": NAME, "args": {...}}`` (``args``
                      optional: ``{}``); the expected tool calls in order
``trajectory_match``  ``strict`` (default), ``unordered``, ``subset`` or ``superset``
``args_match``        ``exact`` (default), ``subset``, ``superset`` or ``ignore``
``arg_rules``         an object: argument name (or ``tool.argument``) → ``"exact"``,
                      ``"text"`` (case- and whitespace-insensitive), ``"ignore"`` or
                      ``{"tolerance": X}`` (numbers within ``X``, absolute)
``trajectory_max_steps`` a whole number ≥ 0: the ``steps`` scorer's limit
``trajectory_slack``  a whole number ≥ 0: without a limit, ``steps`` allows the
                      expected trajectory's length plus this (default 0)
===================== =================================================================

The fields are kept in the example's metadata as given (so dataset versions,
``export_dataset`` and the admin carry them like any other metadata, and the
``sql_result`` scorer's ``result_rows``/``ordered`` set the precedent); this
module checks them when a file is read (:func:`check_trajectory_fields`) and
reads them when a prediction is scored (:func:`expected_trajectory`).

The match and argument modes are LangChain agentevals' (``agentevals.trajectory.match.
create_trajectory_match_evaluator``: ``trajectory_match_mode``, ``tool_args_match_mode``);
``arg_rules`` plays the part of its ``tool_args_match_overrides``, per argument
rather than per tool.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MATCH_MODES = ("strict", "unordered", "subset", "superset")
ARGS_MODES = ("exact", "subset", "superset", "ignore")
ARG_RULE_NAMES = ("exact", "text", "ignore")

#: The protocol's own calls: not part of an agent's path unless an expected trajectory lists them.
PROTOCOL_TOOLS = frozenset({"final_answer", "ask_user"})

#: Every metadata key this module reads.
TRAJECTORY_FIELDS = (
    "trajectory",
    "trajectory_match",
    "args_match",
    "arg_rules",
    "trajectory_max_steps",
    "trajectory_slack",
)


class TrajectoryFormatError(ValueError):
    """An example's trajectory fields are not what :data:`TRAJECTORY_FIELDS` allow;
    the message names the field (``"field 'trajectory' item 2: 'tool' is missing"``)."""


@dataclass(frozen=True)
class TrajectoryStep:
    """One tool call of a path: the tool's name, its arguments (a JSON object),
    and for an agent's call its result text, its step number in the attempt
    (``None`` for an expected call) and whether the result was an error (a
    replay serves it as it was, ``agentlab.agent.replay``)."""

    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    result: str | None = None
    step: int | None = None
    is_error: bool = field(default=False, compare=False)

    def label(self) -> str:
        """``calculator({"expression": "2+2"})`` — the call for a sentence."""
        return f"{self.tool}({json.dumps(self.args, ensure_ascii=False, sort_keys=True)})"


@dataclass(frozen=True)
class ArgRule:
    """How one argument's two values are compared: ``kind`` ``exact`` (``==``),
    ``text`` (case-folded, whitespace collapsed), ``ignore`` (not compared;
    the argument may be absent on either side) or ``tolerance`` (both numbers,
    or texts that read as numbers, within ``tolerance``, absolute)."""

    kind: str
    tolerance: float = 0.0


@dataclass(frozen=True)
class ExpectedTrajectory:
    """An example's expected path and how it is matched (see the module's table)."""

    steps: tuple[TrajectoryStep, ...]
    match: str = "strict"
    args_match: str = "exact"
    arg_rules: Mapping[str, ArgRule] = field(default_factory=dict)
    max_steps: int | None = None
    slack: int = 0
    #: whether the example gives a ``trajectory`` (``[]`` included: no call
    #: expected), not only a step limit
    given: bool = True

    def rule_for(self, tool: str, argument: str) -> ArgRule:
        """The rule of ``argument`` of ``tool``: ``tool.argument``'s, else
        ``argument``'s, else ``exact``."""
        return self.arg_rules.get(f"{tool}.{argument}") or self.arg_rules.get(argument) or ArgRule("exact")

    @property
    def listed_protocol_tools(self) -> frozenset[str]:
        """The protocol's calls this trajectory lists, which then count in the agent's path."""
        return frozenset(step.tool for step in self.steps) & PROTOCOL_TOOLS


def _steps(raw: Any) -> tuple[TrajectoryStep, ...]:
    if not isinstance(raw, list):
        raise TrajectoryFormatError(f"field 'trajectory' must be a list of objects, got {_kind(raw)}")
    steps = []
    for i, item in enumerate(raw, start=1):
        where = f"field 'trajectory' item {i}"
        if not isinstance(item, dict):
            raise TrajectoryFormatError(f"{where} must be an object, got {_kind(item)}")
        unknown = sorted(set(item) - {"tool", "args"})
        if unknown:
            raise TrajectoryFormatError(f"{where}: unknown key {unknown[0]!r} (keys: 'tool', 'args')")
        tool = item.get("tool")
        if tool is None:
            raise TrajectoryFormatError(f"{where}: 'tool' is missing")
        if not isinstance(tool, str) or not tool.strip():
            raise TrajectoryFormatError(f"{where}: 'tool' must be a non-empty string, got {_kind(tool)}")
        args = item.get("args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise TrajectoryFormatError(f"{where}: 'args' must be an object, got {_kind(args)}")
        steps.append(TrajectoryStep(tool=tool.strip(), args=dict(args)))
    return tuple(steps)


def _mode(raw: Any, name: str, allowed: tuple[str, ...], default: str) -> str:
    if raw is None:
        return default
    if not isinstance(raw, str) or raw not in allowed:
        shown = repr(raw) if isinstance(raw, str) else _kind(raw)
        raise TrajectoryFormatError(f"unknown {name} {shown} (known: {', '.join(allowed)})")
    return raw


def _rule(key: str, raw: Any) -> ArgRule:
    where = f"field 'arg_rules' key {key!r}"
    if isinstance(raw, str):
        if raw not in ARG_RULE_NAMES:
            raise TrajectoryFormatError(
                f'{where}: unknown rule {raw!r} (known: {", ".join(ARG_RULE_NAMES)}, {{"tolerance": X}})'
            )
        return ArgRule(raw)
    if isinstance(raw, dict) and set(raw) == {"tolerance"}:
        tolerance = raw["tolerance"]
        if isinstance(tolerance, bool) or not isinstance(tolerance, int | float):
            raise TrajectoryFormatError(f"{where}: 'tolerance' must be a number, got {_kind(tolerance)}")
        if not math.isfinite(tolerance) or tolerance < 0:
            raise TrajectoryFormatError(f"{where}: 'tolerance' must be a finite number ≥ 0")
        return ArgRule("tolerance", float(tolerance))
    raise TrajectoryFormatError(f'{where}: a rule is a name or {{"tolerance": X}}, got {_kind(raw)}')


def _rules(raw: Any) -> dict[str, ArgRule]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise TrajectoryFormatError(f"field 'arg_rules' must be an object, got {_kind(raw)}")
    return {str(key): _rule(str(key), value) for key, value in raw.items()}


def _count(raw: Any, name: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise TrajectoryFormatError(f"field {name!r} must be a whole number ≥ 0, got {_kind(raw)}")
    return raw


def expected_trajectory(metadata: Mapping[str, Any] | None) -> ExpectedTrajectory | None:
    """An example's expected trajectory from its metadata, or ``None`` when it
    has no ``trajectory`` (and no ``trajectory_max_steps``: ``steps`` alone may be asked for).

    Raises :class:`TrajectoryFormatError` naming the field for: a trajectory
    that is not a list of objects, a step without ``tool``, ``args`` that are
    not an object, an unknown match or argument mode or rule, a step count
    that is not a whole number ≥ 0, modes or rules without a trajectory."""
    metadata = metadata or {}
    raw = metadata.get("trajectory")
    max_steps = _count(metadata.get("trajectory_max_steps"), "trajectory_max_steps")
    if raw is None:
        given = [name for name in TRAJECTORY_FIELDS[1:] if metadata.get(name) is not None]
        if given and given != ["trajectory_max_steps"]:
            raise TrajectoryFormatError(f"field {given[0]!r} is given without a 'trajectory'")
        if max_steps is None:
            return None
    return ExpectedTrajectory(
        steps=_steps(raw) if raw is not None else (),
        match=_mode(metadata.get("trajectory_match"), "trajectory_match", MATCH_MODES, "strict"),
        args_match=_mode(metadata.get("args_match"), "args_match", ARGS_MODES, "exact"),
        arg_rules=_rules(metadata.get("arg_rules")),
        max_steps=max_steps,
        slack=_count(metadata.get("trajectory_slack"), "trajectory_slack") or 0,
        given=raw is not None,
    )


def check_trajectory_fields(metadata: Mapping[str, Any]) -> None:
    """Raise :class:`TrajectoryFormatError` when ``metadata``'s trajectory
    fields are bad (see :func:`expected_trajectory`); return nothing otherwise."""
    expected_trajectory(metadata)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__

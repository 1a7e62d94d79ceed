"""The trajectory scorers: the agent's path of tool calls against an example's
expected one. Pure functions, no Django (docs/evaluating.md#trajectories).

``trajectory``
    Pass/fail by the example's ``trajectory_match`` and ``args_match``, with
    LangChain agentevals' meanings (``create_trajectory_match_evaluator``):
    ``strict`` — the same calls in the same order; ``unordered`` — the same
    calls in any order; ``subset`` — the agent called nothing outside the
    expected; ``superset`` — the agent called at least the expected. Two calls
    match when their tools are equal and their arguments match by
    ``args_match``: ``exact`` (equal objects), ``subset`` (every argument the
    agent gave is expected, with its value), ``superset`` (every expected
    argument is given, with its value), ``ignore``; an argument with a rule in
    ``arg_rules`` is compared by it. The explanation names the first mismatch
    ("step 2 called search_documents, expected calculator").
``tool_f1``
    Precision, recall and F1 of the agent's calls against the expected
    multiset (calls paired one to one by the same match as above, the pairing
    the largest there is); ``value`` is F1, ``correct`` is ``F1 == 1``.
    promptfoo's ``tool-call-f1`` (there by name only; here names and arguments).
``steps``
    The agent's path is at most ``trajectory_max_steps`` calls long, else at
    most the expected length plus ``trajectory_slack``.

Two deliberate deviations from agentevals 0.0.9, each tested in
``tests/evaluation/conformance/test_trajectory_agentevals.py``:

1. *One orientation for argument modes.* agentevals' ``subset`` and
   ``unordered`` trajectory modes call the argument matcher with the two sides
   swapped (``_is_trajectory_superset(reference, outputs)``), so there
   ``args_match: subset`` means "the expected arguments are a subset of the
   agent's". Here ``subset`` always means "the agent's arguments are a subset
   of the expected", ``superset`` the reverse, in every trajectory mode.
2. *Any pairing, not the first.* agentevals pairs each call with the first
   unused call that matches (greedy), which can miss a pairing that exists
   when argument matching is not an equivalence (``subset``/``superset``,
   rules). Here calls are paired by a maximum bipartite matching
   (``scipy.sparse.csgraph.maximum_bipartite_matching``), so a path is
   accepted whenever some pairing satisfies the mode. With ``exact`` and
   ``ignore`` the two agree always.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evaluation.scoring.base import Score
from evaluation.scoring.trajectory_spec import PROTOCOL_TOOLS, ArgRule, ExpectedTrajectory, TrajectoryStep

TRAJECTORY = "trajectory"
TOOL_F1 = "tool_f1"
STEPS = "steps"

_SPACE = re.compile(r"\s+")


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def values_match(rule: ArgRule, actual: Any, expected: Any) -> bool:
    """Whether one argument's two values are equal under ``rule`` (:class:`ArgRule`)."""
    if rule.kind == "ignore":
        return True
    if rule.kind == "text" and isinstance(actual, str) and isinstance(expected, str):
        return _SPACE.sub(" ", actual).strip().casefold() == _SPACE.sub(" ", expected).strip().casefold()
    if rule.kind == "tolerance":
        a, b = _as_number(actual), _as_number(expected)
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b):
            return abs(a - b) <= rule.tolerance
    return bool(actual == expected)


def args_mismatch(expected: ExpectedTrajectory, actual: TrajectoryStep, wanted: TrajectoryStep) -> str:
    """``""`` when the two calls' arguments match by ``expected.args_match`` and
    its rules, else which argument differs (``argument 'expression' is '2+3',
    expected '2+2'``). The tools are taken to be equal."""
    mode = expected.args_match
    if mode == "ignore":
        return ""
    compared = [
        key
        for key in dict.fromkeys([*actual.args, *wanted.args])
        if expected.rule_for(wanted.tool, key).kind != "ignore"
    ]
    for key in compared:
        has_actual, has_wanted = key in actual.args, key in wanted.args
        if not has_wanted and mode in ("exact", "subset"):
            return f"argument {key!r} is not expected"
        if not has_actual and mode in ("exact", "superset"):
            return f"argument {key!r} is missing"
        if has_actual and has_wanted:
            rule = expected.rule_for(wanted.tool, key)
            if not values_match(rule, actual.args[key], wanted.args[key]):
                return f"argument {key!r} is {_short(actual.args[key])}, expected {_short(wanted.args[key])}"
    return ""


def calls_match(expected: ExpectedTrajectory, actual: TrajectoryStep, wanted: TrajectoryStep) -> bool:
    """Whether an agent's call matches an expected call: the same tool, the arguments by the rules."""
    return actual.tool == wanted.tool and not args_mismatch(expected, actual, wanted)


def agent_path(expected: ExpectedTrajectory, calls: Sequence[TrajectoryStep]) -> list[TrajectoryStep]:
    """The agent's calls that count: the protocol's own (``final_answer``,
    ``ask_user``) left out unless the expected trajectory lists them."""
    keep = expected.listed_protocol_tools
    return [call for call in calls if call.tool not in PROTOCOL_TOOLS or call.tool in keep]


def pairing(
    expected: ExpectedTrajectory, actual: Sequence[TrajectoryStep], wanted: Sequence[TrajectoryStep]
) -> dict[int, int]:
    """The largest one-to-one pairing of agent calls (index) with expected calls
    (index) that match (:func:`calls_match`): a maximum bipartite matching,
    ``scipy.sparse.csgraph.maximum_bipartite_matching`` (Hopcroft–Karp)."""
    if not actual or not wanted:
        return {}
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching

    edges = np.zeros((len(actual), len(wanted)), dtype=np.int8)
    for i, call in enumerate(actual):
        for j, want in enumerate(wanted):
            if calls_match(expected, call, want):
                edges[i, j] = 1
    if not edges.any():
        return {}
    matched = maximum_bipartite_matching(csr_matrix(edges), perm_type="column")
    return {i: int(j) for i, j in enumerate(matched) if j >= 0}


@dataclass(frozen=True)
class PathMatch:
    """The outcome of matching a path: ``passed`` and, when not, the first mismatch in words."""

    passed: bool
    mismatch: str = ""


def _strict(expected: ExpectedTrajectory, actual: Sequence[TrajectoryStep]) -> PathMatch:
    wanted = expected.steps
    for n, (call, want) in enumerate(zip(actual, wanted, strict=False), start=1):
        if call.tool != want.tool:
            return PathMatch(False, f"step {n} called {call.tool}, expected {want.tool}")
        why = args_mismatch(expected, call, want)
        if why:
            return PathMatch(False, f"step {n} called {call.tool} but {why}")
    if len(actual) > len(wanted):
        extra = actual[len(wanted)]
        return PathMatch(False, f"step {len(wanted) + 1} called {extra.tool}, expected no more calls")
    if len(actual) < len(wanted):
        missing = wanted[len(actual)]
        return PathMatch(
            False,
            f"the path ended after {len(actual)} calls, expected step {len(actual) + 1}: {missing.tool}",
        )
    return PathMatch(True)


def _unmatched_agent(actual: Sequence[TrajectoryStep], paired: dict[int, int]) -> str:
    i = next(i for i in range(len(actual)) if i not in paired)
    return f"step {i + 1} called {actual[i].label()}, which the expected path does not have"


def _unmatched_expected(wanted: Sequence[TrajectoryStep], paired: dict[int, int]) -> str:
    used = set(paired.values())
    j = next(j for j in range(len(wanted)) if j not in used)
    return f"expected step {j + 1}, {wanted[j].label()}, was never called"


def match_path(expected: ExpectedTrajectory, calls: Sequence[TrajectoryStep]) -> PathMatch:
    """Match the agent's ``calls`` (protocol calls still in; see :func:`agent_path`)
    against ``expected`` by its ``match`` mode."""
    actual = agent_path(expected, calls)
    if expected.match == "strict":
        return _strict(expected, actual)
    paired = pairing(expected, actual, expected.steps)
    need_actual = expected.match in ("unordered", "subset")
    need_wanted = expected.match in ("unordered", "superset")
    if need_actual and len(paired) < len(actual):
        return PathMatch(False, _unmatched_agent(actual, paired))
    if need_wanted and len(paired) < len(expected.steps):
        return PathMatch(False, _unmatched_expected(expected.steps, paired))
    return PathMatch(True)


def score_trajectory(expected: ExpectedTrajectory | None, calls: Sequence[TrajectoryStep]) -> Score:
    """The ``trajectory`` scorer: pass/fail by ``expected``'s modes. No
    expected trajectory (``None``, or only a step limit) is unscored, never wrong."""
    if expected is None or not expected.given:
        return Score.unscored(TRAJECTORY, "the example has no expected trajectory")
    result = match_path(expected, calls)
    n = len(agent_path(expected, calls))
    how = f"{expected.match} match, arguments {expected.args_match}"
    if result.passed:
        return Score.of(True, TRAJECTORY, f"{n} calls, {len(expected.steps)} expected: {how}")
    return Score.of(False, TRAJECTORY, f"{result.mismatch} ({how})")


@dataclass(frozen=True)
class ToolF1:
    """``tool_f1``'s figures: ``matched`` calls of ``actual`` agent calls and ``expected`` calls."""

    matched: int
    actual: int
    expected: int

    @property
    def precision(self) -> float:
        """Matched / the agent's calls; with no calls, 1.0 when nothing was expected, else 0."""
        if self.actual == 0:
            return 1.0 if self.expected == 0 else 0.0
        return self.matched / self.actual

    @property
    def recall(self) -> float:
        """Matched / expected calls; 1.0 when nothing was expected and nothing called."""
        if self.expected == 0:
            return 1.0 if self.actual == 0 else 0.0
        return self.matched / self.expected

    @property
    def f1(self) -> float:
        """The harmonic mean of precision and recall (0 when both are 0)."""
        p, r = self.precision, self.recall
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def tool_f1(expected: ExpectedTrajectory, calls: Sequence[TrajectoryStep]) -> ToolF1:
    """Precision/recall counts of the agent's calls against the expected multiset."""
    actual = agent_path(expected, calls)
    return ToolF1(len(pairing(expected, actual, expected.steps)), len(actual), len(expected.steps))


def score_tool_f1(expected: ExpectedTrajectory | None, calls: Sequence[TrajectoryStep]) -> Score:
    """The ``tool_f1`` scorer: ``value`` the F1, ``correct`` exactly when it is 1."""
    if expected is None or not expected.given:
        return Score.unscored(TOOL_F1, "the example has no expected trajectory")
    counts = tool_f1(expected, calls)
    why = (
        f"{counts.matched} of {counts.actual} calls expected, {counts.matched} of {counts.expected} "
        f"expected calls made: precision {counts.precision:.3f}, recall {counts.recall:.3f}"
    )
    return Score(value=counts.f1, correct=counts.f1 == 1.0, scorer=TOOL_F1, explanation=why)


def score_steps(expected: ExpectedTrajectory | None, calls: Sequence[TrajectoryStep]) -> Score:
    """The ``steps`` scorer: the agent's path is at most the limit long
    (``trajectory_max_steps``, else the expected length + ``trajectory_slack``)."""
    if expected is None:
        return Score.unscored(STEPS, "the example has no expected trajectory or step limit")
    limit = expected.max_steps if expected.max_steps is not None else len(expected.steps) + expected.slack
    n = len(agent_path(expected, calls))
    return Score.of(n <= limit, STEPS, f"{n} calls, at most {limit} allowed")


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "…"

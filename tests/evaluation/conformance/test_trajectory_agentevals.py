"""``trajectory`` (the four match modes × the argument modes) against LangChain agentevals.

Reference: agentevals 0.0.9 on PyPI (a test-only dependency, the ``dev``
extra), ``agentevals.trajectory.match.create_trajectory_match_evaluator``
called as a team calls it: each tool call one assistant message with one
OpenAI-format tool call. A seeded grid of 500 (expected, actual) pairs —
half random, half the expected path perturbed (reordered, a call dropped,
one added, a tool or an argument changed) — is scored in every mode and
argument mode by both.

Agreement must be exact where AgentLab claims agentevals' meaning; every
disagreement must be one of the two deviations the module
``evaluation.scoring.trajectory_match`` documents, shown here case by case:

1. orientation: agentevals' ``subset`` mode swaps the argument matcher's
   sides, so its ``subset`` argument mode there is AgentLab's ``superset``
   (and the reverse); its ``unordered`` mode checks both orientations;
2. pairing: agentevals pairs greedily; wherever AgentLab passes and
   agentevals fails (orientation aside), agentevals passes on the same calls
   put in the order of AgentLab's pairing — a pairing existed.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest

from evaluation.scoring.trajectory_match import match_path, pairing
from evaluation.scoring.trajectory_spec import ARGS_MODES, MATCH_MODES, ExpectedTrajectory, TrajectoryStep

agentevals_match = pytest.importorskip("agentevals.trajectory.match")

PAIRS = 500
TOOLS = ("calculator", "search_documents", "sql_query")
ARGS: tuple[dict[str, Any], ...] = (
    {},
    {"x": 1},
    {"x": 2},
    {"x": 1, "y": "u"},
    {"y": "u"},
    {"x": 2, "y": "v"},
)
_FLIP = {"subset": "superset", "superset": "subset", "exact": "exact", "ignore": "ignore"}


def _call(rng: random.Random) -> TrajectoryStep:
    return TrajectoryStep(rng.choice(TOOLS), dict(rng.choice(ARGS)))


def _perturb(rng: random.Random, path: list[TrajectoryStep]) -> list[TrajectoryStep]:
    out = list(path)
    how = rng.choice(("same", "shuffle", "drop", "add", "tool", "args"))
    if how == "shuffle":
        rng.shuffle(out)
    elif how == "drop" and out:
        out.pop(rng.randrange(len(out)))
    elif how == "add":
        out.insert(rng.randrange(len(out) + 1), _call(rng))
    elif how == "tool" and out:
        i = rng.randrange(len(out))
        out[i] = TrajectoryStep(rng.choice(TOOLS), out[i].args)
    elif how == "args" and out:
        i = rng.randrange(len(out))
        out[i] = TrajectoryStep(out[i].tool, dict(rng.choice(ARGS)))
    return out


def grid() -> list[tuple[list[TrajectoryStep], list[TrajectoryStep]]]:
    """500 (expected, actual) pairs, from ``random.Random(48)``."""
    rng = random.Random(48)
    pairs = []
    for n in range(PAIRS):
        expected = [_call(rng) for _ in range(rng.randint(0, 4))]
        actual = _perturb(rng, expected) if n % 2 else [_call(rng) for _ in range(rng.randint(0, 4))]
        pairs.append((expected, actual))
    return pairs


def _messages(calls: list[TrajectoryStep]) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": c.tool, "arguments": json.dumps(c.args)}}],
        }
        for c in calls
    ]


def reference(
    mode: str, args_mode: str, expected: list[TrajectoryStep], actual: list[TrajectoryStep]
) -> bool:
    """agentevals' verdict on one pair."""
    evaluator = agentevals_match.create_trajectory_match_evaluator(
        trajectory_match_mode=mode, tool_args_match_mode=args_mode
    )
    result = evaluator(outputs=_messages(actual), reference_outputs=_messages(expected))
    return bool(result["score"])


def ours(mode: str, args_mode: str, expected: list[TrajectoryStep], actual: list[TrajectoryStep]) -> bool:
    spec = ExpectedTrajectory(steps=tuple(expected), match=mode, args_match=args_mode)
    return match_path(spec, actual).passed


def _explained(
    mode: str, args_mode: str, expected: list[TrajectoryStep], actual: list[TrajectoryStep]
) -> str:
    """Which documented deviation explains a disagreement, or ``""``."""
    mine = ours(mode, args_mode, expected, actual)
    spec = ExpectedTrajectory(steps=tuple(expected), match=mode, args_match=args_mode)
    paired = pairing(spec, actual, expected)
    if mode == "subset":
        # 1: agentevals' subset mode with the argument mode flipped is ours, up to pairing
        if reference("subset", _FLIP[args_mode], expected, actual) == mine:
            return "orientation"
        # 2: the expected calls in the order of our pairing: greedy finds it
        order = [expected[j] for _, j in sorted(paired.items())]
        rest = [c for j, c in enumerate(expected) if j not in paired.values()]
        if mine and reference("subset", _FLIP[args_mode], order + rest, actual):
            return "orientation+pairing"
        return ""
    if mode in ("superset", "unordered") and mine:
        order = [actual[i] for i, _ in sorted(paired.items(), key=lambda item: item[1])]
        rest = [c for i, c in enumerate(actual) if i not in paired]
        if reference("superset", args_mode, expected, order + rest):
            return "pairing" if mode == "superset" else "orientation (both directions)"
    return ""


def test_grid_has_the_cases_that_matter():
    pairs = grid()
    assert len(pairs) == PAIRS
    kinds = Counter(
        "equal" if e == a else "same multiset" if sorted(map(repr, e)) == sorted(map(repr, a)) else "other"
        for e, a in pairs
    )
    assert kinds["equal"] >= 30 and kinds["same multiset"] >= 10 and kinds["other"] >= 300


def conformance_table() -> dict[tuple[str, str], Counter[str]]:
    """Per (mode, argument mode): agreements and each explained deviation (and ``unexplained``)."""
    table: dict[tuple[str, str], Counter[str]] = {}
    for mode in MATCH_MODES:
        for args_mode in ARGS_MODES:
            counts: Counter[str] = Counter()
            for expected, actual in grid():
                if ours(mode, args_mode, expected, actual) == reference(mode, args_mode, expected, actual):
                    counts["agree"] += 1
                else:
                    counts[_explained(mode, args_mode, expected, actual) or "unexplained"] += 1
            table[(mode, args_mode)] = counts
    return table


@pytest.fixture(scope="module")
def table() -> dict[tuple[str, str], Counter[str]]:
    return conformance_table()


@pytest.mark.parametrize("mode", MATCH_MODES)
@pytest.mark.parametrize("args_mode", ["exact", "ignore"])
def test_equivalence_argument_modes_agree_on_every_pair(table, mode, args_mode):
    assert table[(mode, args_mode)] == Counter({"agree": PAIRS})


@pytest.mark.parametrize("args_mode", ARGS_MODES)
def test_strict_agrees_on_every_pair(table, args_mode):
    assert table[("strict", args_mode)] == Counter({"agree": PAIRS})


@pytest.mark.parametrize("mode", MATCH_MODES)
@pytest.mark.parametrize("args_mode", ARGS_MODES)
def test_every_disagreement_is_a_documented_deviation(table, mode, args_mode):
    counts = table[(mode, args_mode)]
    assert counts["unexplained"] == 0, counts
    assert sum(counts.values()) == PAIRS


def test_the_deviations_occur_where_documented(table):
    # not vacuous: the grid does reach both deviations
    assert table[("subset", "subset")]["orientation"] > 0
    assert table[("subset", "superset")]["orientation"] > 0
    assert sum(table[("unordered", "subset")].values()) - table[("unordered", "subset")]["agree"] > 0


def test_greedy_pairing_deviation_by_hand():
    # greedy (superset): expected call 1 takes the agent's first call, which both fit,
    # and leaves expected call 2 nothing; the pairing 1→2, 2→1 exists
    expected = [TrajectoryStep("a", {"x": 1}), TrajectoryStep("a", {"x": 1, "y": "u"})]
    actual = [TrajectoryStep("a", {"x": 1, "y": "u"}), TrajectoryStep("a", {"x": 1})]
    # agent ⊇ expected (args superset): actual[0] fits both expected calls, actual[1] only the first
    assert reference("superset", "superset", expected, actual) is False
    assert ours("superset", "superset", expected, actual) is True


def test_orientation_deviation_by_hand():
    # subset mode, args subset: AgentLab asks the agent's args ⊆ the expected's
    expected = [TrajectoryStep("a", {"x": 1, "y": "u"})]
    actual = [TrajectoryStep("a", {"x": 1})]
    assert ours("subset", "subset", expected, actual) is True
    assert reference("subset", "subset", expected, actual) is False  # agentevals: expected ⊆ agent
    assert reference("subset", "superset", expected, actual) is True


if __name__ == "__main__":  # the figures for the closing note: python -m tests.evaluation.conformance.test_…
    for (mode, args_mode), counts in conformance_table().items():
        print(f"{mode:9} {args_mode:8} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))

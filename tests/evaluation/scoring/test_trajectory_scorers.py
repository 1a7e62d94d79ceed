"""The trajectory scorers as pure functions: ``trajectory`` on right, wrong,
reordered, extra and missing calls in each mode; per-argument rules;
``tool_f1`` on hand-computed cases; ``steps``; the example fields' checks."""

from __future__ import annotations

import pytest

from evaluation.scoring.trajectory_match import (
    score_steps,
    score_tool_f1,
    score_trajectory,
    tool_f1,
)
from evaluation.scoring.trajectory_spec import (
    ExpectedTrajectory,
    TrajectoryFormatError,
    TrajectoryStep,
    expected_trajectory,
)

CALC = TrajectoryStep("calculator", {"expression": "2+2"})
SEARCH = TrajectoryStep("search_documents", {"query": "capital of France"})
SQL = TrajectoryStep("sql_query", {"query": "SELECT 1"})
FINAL = TrajectoryStep("final_answer", {"answer": "4"})


def spec(*steps: TrajectoryStep, match: str = "strict", args: str = "exact", **more) -> ExpectedTrajectory:
    metadata = {
        "trajectory": [{"tool": s.tool, "args": s.args} for s in steps],
        "trajectory_match": match,
        "args_match": args,
        **more,
    }
    result = expected_trajectory(metadata)
    assert result is not None
    return result


# -- trajectory: right, wrong, reordered, extra, missing ---------------------------------

CASES = {
    # name: (agent's calls, {mode: passes})
    "right": ([SEARCH, CALC, FINAL], {"strict": 1, "unordered": 1, "subset": 1, "superset": 1}),
    "reordered": ([CALC, SEARCH, FINAL], {"strict": 0, "unordered": 1, "subset": 1, "superset": 1}),
    "extra": ([SEARCH, SQL, CALC, FINAL], {"strict": 0, "unordered": 0, "subset": 0, "superset": 1}),
    "missing": ([SEARCH, FINAL], {"strict": 0, "unordered": 0, "subset": 1, "superset": 0}),
    "wrong": ([SQL, CALC, FINAL], {"strict": 0, "unordered": 0, "subset": 0, "superset": 0}),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", ["strict", "unordered", "subset", "superset"])
def test_each_mode_on_right_wrong_reordered_extra_and_missing_calls(case, mode):
    calls, verdicts = CASES[case]
    result = score_trajectory(spec(SEARCH, CALC, match=mode), calls)
    assert result.correct is bool(verdicts[mode]), result.explanation
    assert result.value == float(verdicts[mode]) and result.scorer == "trajectory"


def test_the_explanation_names_the_first_mismatch():
    wrong = score_trajectory(spec(CALC, SEARCH), [CALC, TrajectoryStep("search_documents", {"query": "x"})])
    assert wrong.explanation.startswith("step 2 called search_documents but argument 'query' is \"x\"")
    swapped = score_trajectory(spec(CALC, SEARCH), [SEARCH, CALC])
    assert (
        swapped.explanation
        == "step 1 called search_documents, expected calculator (strict match, arguments exact)"
    )
    short = score_trajectory(spec(CALC, SEARCH), [CALC])
    assert short.explanation.startswith("the path ended after 1 calls, expected step 2: search_documents")
    missing = score_trajectory(spec(CALC, SEARCH, match="superset"), [SEARCH])
    assert missing.explanation.startswith(
        'expected step 1, calculator({"expression": "2+2"}), was never called'
    )


def test_no_expected_trajectory_is_not_scored_never_wrong():
    result = score_trajectory(None, [CALC])
    assert result.correct is None and result.value is None
    assert score_tool_f1(None, [CALC]).correct is None
    assert score_steps(None, [CALC]).correct is None


def test_protocol_calls_count_only_when_the_expected_lists_them():
    assert score_trajectory(spec(CALC), [CALC, FINAL]).correct is True
    with_final = spec(CALC, TrajectoryStep("final_answer", {"answer": "4"}))
    assert score_trajectory(with_final, [CALC, FINAL]).correct is True
    assert score_trajectory(with_final, [CALC]).correct is False


# -- argument modes and rules -------------------------------------------------------------


def test_argument_modes():
    more = TrajectoryStep("calculator", {"expression": "2+2", "precision": 3})
    fewer = TrajectoryStep("calculator", {})
    assert score_trajectory(spec(CALC, args="exact"), [more]).correct is False
    assert score_trajectory(spec(CALC, args="superset"), [more]).correct is True  # the agent added one
    assert score_trajectory(spec(CALC, args="subset"), [more]).correct is False
    assert score_trajectory(spec(CALC, args="subset"), [fewer]).correct is True  # the agent left one out
    assert score_trajectory(spec(CALC, args="ignore"), [TrajectoryStep("calculator", {"x": 9})]).correct


def test_per_argument_rules_text_tolerance_ignore_and_per_tool():
    rules = {"query": "text", "expression": {"tolerance": 0.01}, "sql_query.query": "exact", "id": "ignore"}
    expected = spec(
        TrajectoryStep("search_documents", {"query": "Capital of  France", "id": 1}),
        TrajectoryStep("calculator", {"expression": 4.0}),
        TrajectoryStep("sql_query", {"query": "SELECT 1"}),
        arg_rules=rules,
    )
    calls = [
        TrajectoryStep("search_documents", {"query": " capital OF france"}),  # id ignored (absent)
        TrajectoryStep("calculator", {"expression": "4.005"}),  # a number as text, within 0.01
        TrajectoryStep("sql_query", {"query": "SELECT 1"}),
    ]
    assert score_trajectory(expected, calls).correct is True
    calls[1] = TrajectoryStep("calculator", {"expression": "4.02"})
    assert "argument 'expression' is \"4.02\", expected 4.0" in score_trajectory(expected, calls).explanation
    calls[1] = TrajectoryStep("calculator", {"expression": 4})
    calls[2] = TrajectoryStep("sql_query", {"query": "select 1"})  # tool.argument overrides the text rule
    assert score_trajectory(expected, calls).correct is False


# -- tool_f1: hand-computed ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("calls", "matched", "precision", "recall", "f1"),
    [
        ([SEARCH, CALC], 2, 1.0, 1.0, 1.0),
        ([CALC, SEARCH], 2, 1.0, 1.0, 1.0),  # order does not count
        ([SEARCH, CALC, SQL], 2, 2 / 3, 1.0, 0.8),  # 2·(2/3)·1 / (2/3 + 1) = 0.8
        ([SEARCH], 1, 1.0, 0.5, 2 / 3),
        ([SEARCH, SEARCH, SQL], 1, 1 / 3, 0.5, 0.4),  # a call counts once: 2·(1/3)·(1/2) / (5/6)
        ([SQL], 0, 0.0, 0.0, 0.0),
        ([], 0, 0.0, 0.0, 0.0),
    ],
)
def test_tool_f1_hand_computed(calls, matched, precision, recall, f1):
    expected = spec(SEARCH, CALC)
    counts = tool_f1(expected, [*calls, FINAL])
    assert counts.matched == matched
    assert counts.precision == pytest.approx(precision)
    assert counts.recall == pytest.approx(recall)
    assert counts.f1 == pytest.approx(f1)
    result = score_tool_f1(expected, calls)
    assert result.value == pytest.approx(f1) and result.correct is (f1 == 1.0)


def test_tool_f1_with_arguments_and_an_empty_expected_path():
    expected = spec(CALC, SEARCH)
    assert tool_f1(expected, [TrajectoryStep("calculator", {"expression": "3+3"}), SEARCH]).f1 == 0.5
    assert tool_f1(spec(match="superset"), []).f1 == 1.0  # nothing expected, nothing called
    assert tool_f1(spec(match="superset"), [CALC]).f1 == 0.0


# -- steps ----------------------------------------------------------------------------------


def test_steps_limit_and_slack():
    assert score_steps(spec(CALC, trajectory_slack=1), [CALC, SEARCH, FINAL]).correct is True
    over = score_steps(spec(CALC), [CALC, SEARCH])
    assert over.correct is False and over.explanation == "2 calls, at most 1 allowed"
    only_limit = expected_trajectory({"trajectory_max_steps": 2})
    assert score_steps(only_limit, [CALC, CALC, FINAL]).correct is True
    assert score_steps(only_limit, [CALC, CALC, CALC]).correct is False
    assert score_trajectory(only_limit, [CALC]).correct is None  # a limit alone is no trajectory
    no_calls = expected_trajectory({"trajectory": [], "trajectory_max_steps": 0})
    assert score_trajectory(no_calls, [FINAL]).correct is True  # [] expects no call: scored
    assert score_trajectory(no_calls, [CALC]).correct is False


# -- the fields' checks -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"trajectory": {"tool": "x"}}, "field 'trajectory' must be a list of objects, got an object"),
        (
            {"trajectory": ["calculator"]},
            "field 'trajectory' item 1 must be an object, got the string 'calculator'",
        ),
        ({"trajectory": [{"tool": "a"}, {"args": {}}]}, "field 'trajectory' item 2: 'tool' is missing"),
        (
            {"trajectory": [{"tool": "a", "args": [1]}]},
            "field 'trajectory' item 1: 'args' must be an object, got an array",
        ),
        ({"trajectory": [{"tool": "a", "arg": {}}]}, "field 'trajectory' item 1: unknown key 'arg'"),
        (
            {"trajectory": [], "trajectory_match": "loose"},
            "unknown trajectory_match 'loose' (known: strict, unordered, subset, superset)",
        ),
        ({"trajectory": [], "args_match": "fuzzy"}, "unknown args_match 'fuzzy'"),
        (
            {"trajectory": [], "arg_rules": {"q": "nocase"}},
            "field 'arg_rules' key 'q': unknown rule 'nocase'",
        ),
        (
            {"trajectory": [], "arg_rules": {"q": {"tolerance": -1}}},
            "'tolerance' must be a finite number ≥ 0",
        ),
        ({"trajectory": [], "trajectory_slack": 1.5}, "field 'trajectory_slack' must be a whole number ≥ 0"),
        ({"trajectory_match": "strict"}, "field 'trajectory_match' is given without a 'trajectory'"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(metadata, message):
    with pytest.raises(TrajectoryFormatError) as excinfo:
        expected_trajectory(metadata)
    assert message in str(excinfo.value)


def test_defaults_and_no_fields():
    assert expected_trajectory({"gold_sql": "SELECT 1"}) is None
    result = expected_trajectory({"trajectory": [{"tool": "calculator"}]})
    assert result == ExpectedTrajectory(steps=(TrajectoryStep("calculator", {}),), given=True)
    assert (result.match, result.args_match, result.slack) == ("strict", "exact", 0)

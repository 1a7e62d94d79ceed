"""Scorers in evaluation/scoring.py, checked on the real shared datasets' gold answers.

Pure functions: no Django settings needed (run with ``-p no:django``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evaluation.scoring import (
    DEFAULT_SCORER_BY_TASK_TYPE,
    SCORERS,
    Score,
    extract_choice,
    extract_last_number,
    normalize_answer,
    parse_number,
    score,
    scorer_for,
)
from tests.shared_data import dataset_path


def _rows(name: str) -> list[dict[str, Any]]:
    path = dataset_path(name)
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _by_id(name: str) -> dict[str, dict[str, Any]]:
    return {row["question_id"]: row for row in _rows(name)}


# --------------------------------------------------------------------------- Score and dispatch


def test_unscored_is_not_the_same_as_wrong() -> None:
    unscored = Score.unscored("exact", "gold answer is missing")
    wrong = Score.of(False, "exact")
    assert (unscored.value, unscored.correct, unscored.is_scored) == (None, None, False)
    assert (wrong.value, wrong.correct, wrong.is_scored) == (0.0, False, True)
    assert unscored != wrong
    assert Score.of(True, "exact") == Score(value=1.0, correct=True, scorer="exact", explanation="")


@pytest.mark.parametrize("gold", [None, "", "   \n"])
@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_missing_gold_is_unscored_for_every_scorer(scorer: str, gold: str | None) -> None:
    result = score(prediction="18", gold=gold, scorer=scorer)
    assert result == Score(value=None, correct=None, scorer=scorer, explanation="gold answer is missing")


@pytest.mark.parametrize("prediction", [None, "", "  "])
@pytest.mark.parametrize(
    ("scorer", "gold", "choices"),
    [
        ("exact", "yes", None),
        ("numeric", "18", None),
        ("choice", "C", ["a", "b", "c", "d"]),
        ("contains", "Paris", None),
        ("sql_result", "6", None),
    ],
)
def test_missing_prediction_is_wrong_not_unscored(
    scorer: str, gold: str, choices: list[str] | None, prediction: str | None
) -> None:
    result = score(prediction=prediction, gold=gold, scorer=scorer, choices=choices)
    assert (result.value, result.correct, result.scorer) == (0.0, False, scorer)


def test_unknown_scorer_name_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'fuzzy'"):
        score(prediction="a", gold="a", scorer="fuzzy")


def test_scorer_registry_and_task_type_defaults() -> None:
    assert sorted(SCORERS) == ["choice", "contains", "exact", "f1", "numeric", "sql_result"]
    assert DEFAULT_SCORER_BY_TASK_TYPE == {
        "math": "numeric",
        "multiple_choice": "choice",
        "document_qa": "exact",
        "sql": "sql_result",
    }


@pytest.mark.parametrize(
    ("example_scorer", "task_type", "expected"),
    [
        (None, "math", "numeric"),
        (None, "multiple_choice", "choice"),
        (None, "document_qa", "exact"),
        (None, "sql", "sql_result"),
        (None, "translation", "exact"),
        ("", "math", "numeric"),
        ("contains", "document_qa", "contains"),
        ("exact", "math", "exact"),
    ],
)
def test_scorer_for_prefers_the_example_then_the_task_type_then_exact(
    example_scorer: str | None, task_type: str, expected: str
) -> None:
    assert scorer_for(example_scorer=example_scorer, task_type=task_type) == expected


def test_scorer_for_rejects_an_unknown_example_scorer_by_name() -> None:
    with pytest.raises(ValueError, match="unknown scorer 'llm_judge'"):
        scorer_for(example_scorer="llm_judge", task_type="math")


# --------------------------------------------------------------------------- exact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Chief of Protocol.", "chief of protocol"),
        ("3,677 seated", "3677 seated"),
        ("Stark's Park", "starks park"),
        ("“Sonic”", "sonic"),
        ("an apple a day", "apple day"),
        ("Pedro Rodríguez", "pedro rodríguez"),
        ("...", ""),
    ],
)
def test_normalize_answer_follows_squad(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    ("qid", "prediction", "correct"),
    [
        ("hotpotqa-dev-5a8b57f25542995d1e6f1371", "Yes.", True),  # gold "yes"
        ("hotpotqa-dev-5a8b57f25542995d1e6f1371", "no", False),
        ("hotpotqa-dev-5adbf0a255429947ff17385a", "No", True),  # gold "no"
        ("hotpotqa-dev-5a8c7595554299585d9e36b6", "chief of protocol", True),
        ("hotpotqa-dev-5a8c7595554299585d9e36b6", "Chief of Protocol of the United States", False),
        ("hotpotqa-dev-5a87ab905542996e4f3088c1", "3677 seated", True),  # gold "3,677 seated"
        ("hotpotqa-dev-5a8e3ea95542995a26add48d", "Greenwich Village New York City", True),
        ("hotpotqa-dev-5ab3e45655429976abd1bcd4", "North Atlantic Conference", True),  # gold has "the"
        ("hotpotqa-dev-5ae7a8175542993210983ed8", "Pedro Rodríguez", True),
        ("hotpotqa-dev-5ae7a8175542993210983ed8", "Pedro Rodriguez", False),  # accents are kept
    ],
)
def test_exact_on_hotpotqa_golds(qid: str, prediction: str, correct: bool) -> None:
    row = _by_id("hotpotqa-dev-distractor-52.jsonl")[qid]
    result = score(prediction=prediction, gold=row["answer"], scorer="exact")
    assert (result.correct, result.value) == (correct, 1.0 if correct else 0.0)


def test_exact_accepts_every_hotpotqa_gold_as_its_own_answer_in_other_case() -> None:
    rows = _rows("hotpotqa-dev-distractor-52.jsonl")
    assert len(rows) == 52
    results = [score(prediction=f" {r['answer'].upper()}. ", gold=r["answer"], scorer="exact") for r in rows]
    assert [r.correct for r in results] == [True] * 52


def test_exact_gold_that_normalises_to_nothing_is_unscored() -> None:
    result = score(prediction="the", gold="The.", scorer="exact")
    assert (result.value, result.correct) == (None, None)


# --------------------------------------------------------------------------- contains


@pytest.mark.parametrize(
    ("prediction", "gold", "correct"),
    [
        ("Yes, they were both American.", "yes", True),
        ("Yesterday it rained.", "yes", False),  # whole tokens only
        ("He was the Chief of Protocol.", "Chief of Protocol", True),
        ("The answer is Animorphs", "Animorphs", True),
        ("Goosebumps", "Animorphs", False),
    ],
)
def test_contains_matches_whole_normalised_tokens(prediction: str, gold: str, correct: bool) -> None:
    assert score(prediction=prediction, gold=gold, scorer="contains").correct is correct


# --------------------------------------------------------------------------- numeric


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$18", 18.0),
        ("18 dollars", 18.0),
        ("1,600", 1600.0),
        ("-3.5", -3.5),
        ("The answer is 26.00", 26.0),
        ("The answer is 26.", 26.0),
        ("1/2", 0.5),
        (".5", 0.5),
        ("50%", 50.0),
        ("5-3", 3.0),  # a hyphen between numbers is not a sign
        ("x=-5", -5.0),
        ("v2 has 7 parts", 7.0),  # "v2" is a name, not a number
        ("16 - 3 - 4 = 9 eggs, 9 * 2 = 18", 18.0),
        ("no number here", None),
        ("1/0", None),
    ],
)
def test_extract_last_number(text: str, expected: float | None) -> None:
    assert extract_last_number(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("18", 18.0), (" 1,600 ", 1600.0), ("$18", 18.0), ("-3.5", -3.5), ("18 dollars", None), ("abc", None)],
)
def test_parse_number_is_strict(text: str, expected: float | None) -> None:
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    ("qid", "prediction", "correct"),
    [
        ("gsm8k-test-0", "$18", True),  # gold "18"
        ("gsm8k-test-0", "18 dollars", True),
        ("gsm8k-test-0", "She makes 9 * 2 = $18.00 every day.", True),
        ("gsm8k-test-0", "18, not 20", False),  # the last number counts
        ("gsm8k-test-0", "18.01", False),
        ("gsm8k-test-0", "eighteen", False),
        ("gsm8k-test-6", "The answer is 260.", True),  # gold "260"
        ("gsm8k-test-24", "The answer is 26.00", True),  # gold "26"
        ("gsm8k-test-30", "109", True),
    ],
)
def test_numeric_on_gsm8k_golds(qid: str, prediction: str, correct: bool) -> None:
    row = _by_id("gsm8k-test-200.jsonl")[qid]
    result = score(prediction=prediction, gold=row["answer"], scorer="numeric")
    assert (result.correct, result.value) == (correct, 1.0 if correct else 0.0)


def test_numeric_accepts_all_gsm8k_golds_with_thousands_separators_and_rejects_off_by_one() -> None:
    rows = _rows("gsm8k-test-200.jsonl")
    assert len(rows) == 200
    right = [
        score(
            prediction=f"So the total is ${int(r['answer']):,}.", gold=r["answer"], scorer="numeric"
        ).correct
        for r in rows
    ]
    wrong = [
        score(prediction=str(int(r["answer"]) + 1), gold=r["answer"], scorer="numeric").correct for r in rows
    ]
    assert right == [True] * 200
    assert wrong == [False] * 200


@pytest.mark.parametrize(
    ("prediction", "gold", "correct"),
    [
        ("0.30000001", "0.3", True),  # absolute 1e-6
        ("1000.05", "1000.01", False),  # a different number, though within rel 1e-4
        ("1000.0", "1000.01", False),  # rounded to fewer places than the gold's own
        ("1000.01000001", "1000.01", True),  # the gold is this rounded to its own places
        ("1000.2", "1000.01", False),  # relative 1.9e-4
        ("27001", "27000", False),  # a whole-number gold gets no relative tolerance
        ("27000.5", "27000", False),
        ("27000.0000001", "27000", True),
        ("1/2", "0.5", True),
        ("-3.5", "-3.5", True),
        ("1,600", "1600", True),
        ("the answer", "1600", False),
    ],
)
def test_numeric_tolerance(prediction: str, gold: str, correct: bool) -> None:
    assert score(prediction=prediction, gold=gold, scorer="numeric").correct is correct


def test_numeric_no_number_in_prediction_is_wrong_but_non_numeric_gold_is_unscored() -> None:
    wrong = score(prediction="I do not know", gold="18", scorer="numeric")
    unscored = score(prediction="18", gold="eighteen", scorer="numeric")
    assert (wrong.value, wrong.correct, wrong.explanation) == (0.0, False, "no number in the prediction")
    assert (unscored.value, unscored.correct) == (None, None)
    assert unscored.explanation == "gold 'eighteen' is not a number"


# --------------------------------------------------------------------------- choice

ARC_FIRST = "arc-challenge-test-Mercury_7175875"  # gold C: "Planetary days will become shorter."


@pytest.mark.parametrize(
    ("prediction", "picked", "rule"),
    [
        ("C", ["C"], "letter"),
        ("(C)", ["C"], "letter"),
        ("C.", ["C"], "letter"),
        ("c", ["C"], "letter"),
        ("**C**", ["C"], "letter"),
        ("c) Planetary days", ["C"], "leading letter"),
        ("C. Planetary days will become shorter.", ["C"], "leading letter"),
        ("C Planetary days will become shorter", ["C"], "leading letter"),
        ("Answer: C", ["C"], "answer marker"),
        ("answer: c", ["C"], "answer marker"),
        ("The answer is C.", ["C"], "answer marker"),
        ("The correct option is (B).", ["B"], "answer marker"),
        ("Option A is wrong because density is unchanged, so the answer is C.", ["C"], "answer marker"),
        ("Planetary days will become shorter", ["C"], "option text"),
        ("The answer is: planetary days will become shorter.", ["C"], "option text"),
        ("I think it is D.", ["D"], "trailing letter"),
        ("A planet that spins faster has shorter days.", [], "no option letter found"),
        ("I am not sure.", [], "no option letter found"),
        ("e.g. the days", [], "no option letter found"),
        ("The answer is a planet.", [], "no option letter found"),
        ("E", [], "letter"),  # only four options
    ],
)
def test_extract_choice_uses_explicit_forms_only(prediction: str, picked: list[str], rule: str) -> None:
    row = _by_id("arc-challenge-test-100.jsonl")[ARC_FIRST]
    assert extract_choice(prediction, row["choices"]) == (picked, rule)


@pytest.mark.parametrize(
    ("prediction", "correct"),
    [
        ("C", True),
        ("The answer is C.", True),
        ("c) Planetary days", True),
        ("B", False),
        ("A planet that spins faster has shorter days.", False),
    ],
)
def test_choice_on_arc_gold(prediction: str, correct: bool) -> None:
    row = _by_id("arc-challenge-test-100.jsonl")[ARC_FIRST]
    result = score(prediction=prediction, gold=row["answer"], scorer="choice", choices=row["choices"])
    assert (result.correct, result.value) == (correct, 1.0 if correct else 0.0)


@pytest.mark.parametrize("dataset", ["arc-challenge-test-100.jsonl", "commonsenseqa-dev-100.jsonl"])
def test_choice_accepts_every_gold_as_letter_marker_and_option_text(dataset: str) -> None:
    rows = _rows(dataset)
    assert len(rows) == 100
    for row in rows:
        letter, choices = row["answer"], row["choices"]
        gold_text = choices["ABCDE".index(letter)]
        duplicated = choices.count(gold_text) > 1
        for prediction in (letter, f"Answer: ({letter})", f"{letter}. {gold_text}", gold_text):
            result = score(prediction=prediction, gold=letter, scorer="choice", choices=choices)
            assert result.correct is True or (duplicated and prediction == gold_text), (
                row["question_id"],
                prediction,
            )
        wrong = "ABCDE"[(choices.index(gold_text) + 1) % len(choices)]
        assert score(prediction=wrong, gold=letter, scorer="choice", choices=choices).correct is False


def test_choice_option_text_shared_by_two_options_counts_for_either() -> None:
    # CommonsenseQA row whose options A and D are both "clumsy"; gold is E "stupid".
    row = _by_id("commonsenseqa-dev-100.jsonl")["commonsenseqa-dev-f646f3e064f06423fc25b98500796cf0"]
    assert extract_choice("clumsy", row["choices"]) == (["A", "D"], "option text")
    assert score(prediction="clumsy", gold="E", scorer="choice", choices=row["choices"]).correct is False
    assert score(prediction="clumsy", gold="D", scorer="choice", choices=row["choices"]).correct is True
    assert (
        score(prediction="stupid", gold=row["answer"], scorer="choice", choices=row["choices"]).correct
        is True
    )


def test_choice_gold_that_is_not_a_valid_letter_is_unscored() -> None:
    choices = ["red", "green", "blue"]
    assert score(prediction="A", gold="D", scorer="choice", choices=choices).correct is None
    assert score(prediction="A", gold="purple", scorer="choice", choices=choices).correct is None
    # a gold given as the option's text is mapped to its letter
    assert score(prediction="C", gold="blue", scorer="choice", choices=choices).correct is True


# --------------------------------------------------------------------------- sql_result


def _sql(qid: str, prediction: str, *, with_metadata: bool = True) -> Score:
    row = _by_id("spider-dev-sql-61.jsonl")[qid]
    metadata = {k: row[k] for k in ("gold_sql", "result_rows", "ordered")} if with_metadata else None
    return score(prediction=prediction, gold=row["answer"], scorer="sql_result", metadata=metadata)


@pytest.mark.parametrize(
    ("qid", "prediction", "correct"),
    [
        ("spider-dev-0", "6", True),  # gold "6"
        ("spider-dev-0", "6.0", True),
        ("spider-dev-0", "[[6]]", True),
        ("spider-dev-0", "There are 6 singers.", True),
        ("spider-dev-0", "7", False),
        ("spider-dev-416", "31.333333333333332", True),  # an average, full float precision
        ("spider-dev-416", "31.333", True),  # the gold rounded to the places written
        ("spider-dev-416", "31.33", True),
        ("spider-dev-416", "31.34", False),
        ("spider-dev-416", "31", False),  # a whole number for a gold that is not
        ("spider-dev-413", "36", True),  # gold "36.0"
        ("spider-dev-425", "570.84", True),
        ("spider-dev-16", "[[52501, 730]]", False),  # whole numbers: no relative tolerance
        ("spider-dev-30", "france", True),  # gold "France"
        ("spider-dev-30", "Germany", False),
        ("spider-dev-8", '["France", "Netherlands", "United States"]', True),  # unordered, other order
        ("spider-dev-8", '["France", "Netherlands"]', False),
        ("spider-dev-8", '["France", "France", "Netherlands"]', False),
        (
            "spider-dev-37",
            '["Timbaland", "Justin Brown", "John Nizinik", "Tribal King", "Rose White"]',
            False,
        ),
        ("spider-dev-4", "[34.5, 25, 43]", True),  # one row given flat
        ("spider-dev-4", "(34.5, 25, 43)", True),  # Python tuple as printed by sqlite3
        ("spider-dev-4", "[[34.5, 43, 25]]", True),  # columns in another order (the Spider test-suite)
        ("spider-dev-4", "[[34.5, 43, 26]]", False),
        ("spider-dev-6", '[["Love", 2016]]', True),  # gold has the year as text "2016"
        ("spider-dev-420", "[[3, 'Arjen Robben', 1]]", True),  # gold has "3" as text
        ("spider-dev-412", '["Gonzalo Higuaín", "Fernando Gago", "Guti Midfielder"]', True),  # trailing space
        ("spider-dev-412", '["Fernando Gago", "Gonzalo Higuaín ", "Guti Midfielder"]', False),  # ordered
        (
            "spider-dev-2",
            "```json\n"
            + json.dumps(
                [
                    ["Joe Sharp", "Netherlands", 52],
                    ["John Nizinik", "France", 43],
                    ["Rose White", "France", 41],
                    ["Timbaland", "United States", 32],
                    ["Justin Brown", "France", 29],
                    ["Tribal King", "France", 25],
                ]
            )
            + "\n```",
            True,
        ),
        ("spider-dev-2", "Joe Sharp, Netherlands, 52", False),
    ],
)
def test_sql_result_on_spider_rows(qid: str, prediction: str, correct: bool) -> None:
    result = _sql(qid, prediction)
    assert (result.correct, result.value) == (correct, 1.0 if correct else 0.0)


def test_sql_result_ordered_flag_decides_whether_row_order_counts() -> None:
    rows = _by_id("spider-dev-sql-61.jsonl")
    unordered, ordered = rows["spider-dev-8"], rows["spider-dev-2"]
    assert (unordered["ordered"], ordered["ordered"]) == (False, True)
    assert _sql("spider-dev-8", json.dumps(list(reversed(unordered["result_rows"])))).correct is True
    assert _sql("spider-dev-2", json.dumps(list(reversed(ordered["result_rows"])))).correct is False
    assert _sql("spider-dev-2", json.dumps(ordered["result_rows"])).correct is True


def test_sql_result_accepts_every_spider_gold_with_and_without_metadata() -> None:
    rows = _rows("spider-dev-sql-61.jsonl")
    assert len(rows) == 61
    for row in rows:
        qid = row["question_id"]
        assert _sql(qid, row["answer"]).correct is True, qid
        assert _sql(qid, row["answer"], with_metadata=False).correct is True, qid
        assert _sql(qid, json.dumps(row["result_rows"])).correct is True, qid
        assert _sql(qid, repr([tuple(r) for r in row["result_rows"]])).correct is True, qid


def test_sql_result_explanation_and_unscored_gold() -> None:
    assert _sql("spider-dev-8", '["France"]').explanation == "unordered result differs from gold (3 rows)"
    result = score(prediction="[1]", gold='{"a": 1}', scorer="sql_result")
    assert (result.value, result.correct) == (None, None)


def test_echoing_the_lettered_options_picks_nothing() -> None:
    """A 135M model often repeats the options; that must not score as option A."""
    echoed = "A. Planetary density will decrease\nB. Planetary years will become longer\nC. Planetary days"
    assert extract_choice(echoed) == ([], "several options listed")
    result = score(prediction=echoed, gold="A", scorer="choice", choices=["a", "b", "c", "d"])
    assert (result.correct, result.value) == (False, 0.0)
    assert extract_choice("A. foo\nB. bar\nThe answer is B.") == (["B"], "answer marker")
    assert extract_choice("B. saprophytism\nbecause the fungus feeds on dead wood") == (
        ["B"],
        "leading letter",
    )

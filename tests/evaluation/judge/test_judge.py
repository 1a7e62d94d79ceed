"""The LLM judge scorer against a scripted grader: grades, unreadable replies
and errors (unscored, never wrong), the schema it decodes under, the cache key."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentlab.agent.providers.scripted import ScriptedProvider, text
from agentlab.agent.types import ProviderError
from evaluation.judge.grader import (
    DEFAULT_RUBRIC,
    JUDGE_SCHEMA,
    JudgeRequest,
    grade_name,
    judge,
    parse_grade,
)
from evaluation.scoring import score


def request(**changes: object) -> JudgeRequest:
    values: dict[str, object] = {
        "question": "Which city hosted the 1900 Olympics?",
        "prediction": "Paris, France",
        "gold": ["Paris"],
        "rubric": "",
        "model": "grader",
    }
    values.update(changes)
    return JudgeRequest(**values)  # type: ignore[arg-type]


def grade(word: str, explanation: str = "because") -> str:
    return json.dumps({"grade": word, "explanation": explanation})


@pytest.mark.parametrize(
    ("reply", "value", "correct", "name"),
    [
        (grade("correct", "same city"), 1.0, True, "correct"),
        (grade("partial", "only half"), 0.5, False, "partial"),
        (grade("incorrect", "another city"), 0.0, False, "incorrect"),
    ],
)
def test_judge_grades_correct_partial_and_incorrect(reply, value, correct, name):
    grader = ScriptedProvider([text(reply, usage=(120, 14))], model="grader")
    result, completion = asyncio.run(judge(grader, request()))
    assert (result.value, result.correct, result.scorer) == (value, correct, "judge")
    assert grade_name(result) == name
    assert result.explanation.startswith(name)
    assert completion is not None and completion.usage.input_tokens == 120
    # the grader saw the question, every gold alias, the prediction and the default rubric
    shown = grader.calls[0][-1]["content"]
    for part in ("1900 Olympics", "- Paris", "Paris, France", DEFAULT_RUBRIC):
        assert part in shown


def test_a_partial_grade_is_scored_but_not_correct():
    result = parse_grade(grade("partial"))
    assert result.is_scored and result.correct is False and result.value == 0.5


@pytest.mark.parametrize(
    "reply",
    [
        "I think it is fine.",
        "",
        json.dumps({"grade": "excellent", "explanation": "?"}),
        json.dumps({"verdict": "correct"}),
    ],
)
def test_an_unreadable_grade_leaves_the_example_unscored_with_the_reason(reply):
    grader = ScriptedProvider([text(reply)], model="grader")
    result, completion = asyncio.run(judge(grader, request()))
    assert result.value is None and result.correct is None
    assert ("no readable grade" in result.explanation) or ("returned nothing" in result.explanation)
    assert completion is not None  # the call was made (and paid): its usage is still recorded


def test_a_judge_error_leaves_the_example_unscored_not_wrong():
    grader = ScriptedProvider([ProviderError("HTTP 400: bad request", transient=False)], model="grader")
    result, completion = asyncio.run(judge(grader, request()))
    assert (result.value, result.correct) == (None, None)
    assert "the judge failed: HTTP 400" in result.explanation
    assert completion is None


def test_grades_in_prose_fences_and_synonyms_are_read():
    assert parse_grade('Sure!\n```json\n{"grade": "C", "explanation": "ok"}\n```').value == 1.0
    assert parse_grade('{"grade": "Wrong."}').value == 0.0
    assert parse_grade('{"grade": 0.5}').value == 0.5


def test_the_grade_is_decoded_under_the_schema_where_the_provider_supports_it():
    constrained = ScriptedProvider([text(grade("correct"))], constrained_decoding=True)
    free = ScriptedProvider([text(grade("correct"))], constrained_decoding=False)
    asyncio.run(judge(constrained, request()))
    asyncio.run(judge(free, request()))
    assert constrained.kwargs_seen[0]["response_schema"] == JUDGE_SCHEMA
    assert constrained.kwargs_seen[0]["temperature"] == 0.0
    assert free.kwargs_seen[0]["response_schema"] is None


def test_no_call_for_a_missing_answer_or_a_missing_gold():
    grader = ScriptedProvider([], model="grader")
    wrong, call = asyncio.run(judge(grader, request(prediction="  ")))
    assert (wrong.value, wrong.correct, call) == (0.0, False, None)
    unscored, call = asyncio.run(judge(grader, request(gold=["", " "])))
    assert (unscored.value, call) == (None, None)
    assert grader.calls == []


def test_a_dataset_or_example_rubric_replaces_the_default():
    grader = ScriptedProvider([text(grade("correct"))])
    asyncio.run(judge(grader, request(rubric="Accept only the city name, nothing more.")))
    shown = grader.calls[0][-1]["content"]
    assert "Accept only the city name" in shown and DEFAULT_RUBRIC not in shown


def test_the_cache_key_changes_with_each_of_its_five_parts():
    base = request().cache_key()
    assert request().cache_key() == base
    assert request(rubric=DEFAULT_RUBRIC).cache_key() == base  # "" means the default rubric
    for change in (
        {"question": "Which city hosted the 1924 Olympics?"},
        {"prediction": "Paris"},
        {"gold": ["Paris", "Paris, France"]},
        {"rubric": "strict"},
        {"model": "another-grader"},
    ):
        assert request(**change).cache_key() != base, change


def test_the_pure_score_function_refuses_the_judge():
    with pytest.raises(ValueError, match="needs a grading model"):
        score(prediction="Paris", gold="Paris", scorer="judge")

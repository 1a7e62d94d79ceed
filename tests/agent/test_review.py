"""The pure reviewer: prompt, trace and robust parsing of its verdict."""

from __future__ import annotations

import pytest

from agentlab.agent.providers.scripted import ScriptedProvider, call, text, tool_calls
from agentlab.agent.review import (
    Review,
    compact_trace,
    parse_review,
    retry_question,
    review_answer,
    review_messages,
)
from agentlab.agent.types import ProviderError, Step, ToolResult


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"verdict": "accept", "note": "fine", "retry_instruction": null}', Review("accept", "fine", None)),
        (
            '```json\n{"verdict": "retry", "note": "wrong sum", "retry_instruction": "add again"}\n```',
            Review("retry", "wrong sum", "add again"),
        ),
        (
            'Here you go: {"verdict": "RETRY", "note": "recheck the units"} thanks',
            Review("retry", "recheck the units", "recheck the units"),
        ),
        (
            '{"verdict": "cannot judge", "note": "no evidence", "retry_instruction": "x"}',
            Review("cannot_judge", "no evidence", None),
        ),
        ('{"verdict": "correct", "reason": "ok"}', Review("accept", "ok", None)),
        (
            '{"a": {"b": 1}} {"verdict": "wrong", "note": "n", "instruction": "use the calculator"}',
            Review("retry", "n", "use the calculator"),
        ),
        ("verdict: accept", Review("accept", "", None)),
    ],
)
def test_parse_review_takes_the_verdict_wherever_it_is(reply, expected):
    assert parse_review(reply) == expected


@pytest.mark.parametrize("reply", ["", None, "I think it is fine.", '{"verdict": "maybe"}', '{"note": "x"}'])
def test_parse_review_without_a_verdict_is_a_failed_review(reply):
    review = parse_review(reply)
    assert review.verdict == "failed" and review.error and not review.wants_retry


def test_only_a_retry_with_an_instruction_wants_a_retry():
    assert Review("retry", "n", "do x").wants_retry
    assert not Review("retry", "", None).wants_retry
    assert not Review("accept", "n", None).wants_retry


def test_compact_trace_and_messages_carry_the_attempt():
    c = call("calculator", {"expression": "6*7"}, id="c1")
    steps = [
        Step(1, tool_calls(c), [ToolResult("c1", "calculator", "42\n" + "x" * 500)]),
        Step(2, text("42")),
    ]
    trace = compact_trace(steps, output_chars=10)
    assert trace == 'step 1: calculator({"expression": "6*7"}) -> 42 xxxxxxx\nstep 2: replied with text'
    messages = review_messages(
        question="What is 6*7?", answer="42", evidence="calc", reasoning="", trace=trace
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "JSON" in messages[0]["content"]
    user = messages[1]["content"]
    assert "What is 6*7?" in user and "Answer:\n42" in user and "Reasoning:\n(none)" in user and trace in user


def test_retry_question_keeps_the_question_and_adds_context():
    q = retry_question(question="What is 6*7?", previous_answer="41", instruction="multiply again")
    assert (
        q.startswith("What is 6*7?\n") and "Previous answer: 41" in q and "instruction: multiply again" in q
    )


async def test_review_answer_makes_one_call_without_tools_and_returns_its_usage():
    provider = ScriptedProvider([text('{"verdict": "accept", "note": "ok"}', usage=(40, 9))])
    review, completion = await review_answer(provider, question="q", answer="a", evidence="e", reasoning="r")
    assert review == Review("accept", "ok", None)
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (40, 9)
    assert len(provider.calls) == 1 and provider.tools_seen == [None]


async def test_review_answer_raises_a_permanent_provider_error():
    provider = ScriptedProvider([ProviderError("quota", transient=False)])
    with pytest.raises(ProviderError):
        await review_answer(provider, question="q", answer="a", evidence="", reasoning="")


def test_a_note_with_a_raw_newline_is_read_whole() -> None:
    # llama-cpp-python's server grammar lets a string hold raw control characters
    review = parse_review(
        '{ "verdict": "retry", "note": "42 is\nwrong", "retry_instruction": "Use\tthe calculator" }'
    )
    assert (review.verdict, review.note, review.retry_instruction) == (
        "retry",
        "42 is\nwrong",
        "Use\tthe calculator",
    )

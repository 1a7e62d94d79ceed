"""The visible text of a streaming completion (``agentlab.agent.streaming``) and
the agent loop's ``on_text`` with a streaming scripted provider."""

from __future__ import annotations

import pytest

from agentlab.agent.loop import AgentLoop
from agentlab.agent.providers.scripted import Cut, ScriptedProvider, final, text, tool_call
from agentlab.agent.streaming import AnswerText, CompletionDelta, JsonAnswerScanner, TextDelta
from agentlab.agent.tools import default_registry


def feed_chars(reader: AnswerText, content: str) -> list[str]:
    return [reader.feed(CompletionDelta(text=ch)) for ch in content]


def test_plain_content_is_shown_as_it_comes_without_its_leading_blanks():
    reader = AnswerText()
    pieces = feed_chars(reader, "  \nThe **answer** is 42.")
    assert "".join(pieces) == "The **answer** is 42."
    assert pieces[-1] == "." and reader.shown == len("The **answer** is 42.")


@pytest.mark.parametrize(
    "content",
    [
        '{"tool": "final_answer", "arguments": {"answer": "x = \\"1\\"\\n\\u00e9 \\ud83d\\ude00", '
        '"evidence": "e"}}',
        '```json\n{"tool": "final_answer", "arguments": '
        '{"answer": "x = \\"1\\"\\n\\u00e9 \\ud83d\\ude00"}}\n```',
        '{"answer": "x = \\"1\\"\\n\\u00e9 \\ud83d\\ude00", "reasoning": "r"}',
    ],
)
def test_json_content_shows_only_the_decoded_answer_character_by_character(content):
    reader = AnswerText()
    pieces = feed_chars(reader, content)
    assert "".join(pieces) == 'x = "1"\né 😀'
    assert max(len(p) for p in pieces) == 1  # it grows as the JSON is written


def test_a_json_request_of_another_tool_shows_nothing():
    reader = AnswerText()
    assert "".join(feed_chars(reader, '{"tool": "calculator", "arguments": {"expression": "6*7"}}')) == ""


def test_a_non_string_answer_is_shown_as_its_json_text():
    scanner = JsonAnswerScanner()
    shown = "".join(scanner.feed(ch) for ch in '{"answer": [1, {"a": "}"}], "evidence": "e"}')
    assert shown == '[1, {"a": "}"}]'  # as the model wrote it
    assert scanner.done


def test_a_native_final_answer_streams_its_answer_field_after_the_plain_content():
    reader = AnswerText()
    assert reader.feed(CompletionDelta(text="Let me check.")) == "Let me check."
    assert reader.feed(CompletionDelta(call_index=0, call_name="final_answer")) == ""
    args = '{"answer": "forty-two", "evidence": "calculator"}'
    shown = [
        reader.feed(CompletionDelta(call_index=0, arguments=args[i : i + 3])) for i in range(0, len(args), 3)
    ]
    assert "".join(shown) == "\n\nforty-two"


def test_other_tool_calls_arguments_are_never_shown():
    reader = AnswerText()
    assert (
        reader.feed(CompletionDelta(call_index=0, call_name="calculator", arguments='{"answer": "no"}')) == ""
    )
    assert (
        reader.feed(CompletionDelta(call_index=1, call_name="final_answer", arguments='{"answer": "yes"}'))
        == "yes"
    )


async def test_the_loop_streams_each_step_and_a_retried_call_starts_its_text_again():
    provider = ScriptedProvider(
        [
            tool_call("calculator", {"expression": "6*7"}, content="I will multiply."),
            Cut("The answ"),
            text("The answer is 42."),
        ],
        stream_chars=3,
    )
    seen: list[TextDelta] = []
    result = await AgentLoop(provider, default_registry(), retry_base_delay=0.001).run(
        "q", on_text=seen.append
    )
    assert result.stop_reason == "final" and result.answer == "The answer is 42."

    def joined(step: int, completion: int) -> str:
        return "".join(d.text for d in seen if (d.step, d.completion) == (step, completion))

    assert joined(1, 1) == "I will multiply."
    assert joined(2, 1) == "The answ"  # the cut try
    assert joined(2, 2) == "The answer is 42."  # the retry starts again
    assert {(d.step, d.completion) for d in seen} == {(1, 1), (2, 1), (2, 2)}
    assert all(0 < len(d.text) <= 3 for d in seen)


async def test_without_on_text_a_streaming_provider_is_not_streamed():
    provider = ScriptedProvider([final("42")], stream_chars=2)
    result = await AgentLoop(provider, default_registry()).run("q")
    assert result.answer == "42"


async def test_an_on_text_that_raises_does_not_break_the_step():
    calls = []

    def broken(delta: TextDelta) -> None:
        calls.append(delta)
        raise RuntimeError("the page went away")

    provider = ScriptedProvider([final("a long answer")], stream_chars=2)
    result = await AgentLoop(provider, default_registry()).run("q", on_text=broken)
    assert result.stop_reason == "final" and result.answer == "a long answer"
    assert len(calls) == 1  # not streamed further after the failure

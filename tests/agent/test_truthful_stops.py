"""A turn says truthfully how it ended (against the scripted provider):
an empty final answer is ``empty_answer``, not an answer; a review cut by
the token limit is a failed review; an attempt whose every reply was cut is
``length``, not ``max_steps``; a reply whose call could not be read is shown
back to the model as a bounded excerpt, not whole."""

from __future__ import annotations

import pytest

from agentlab.agent.loop import EMPTY_ANSWER_ERROR, AgentLoop
from agentlab.agent.messages import MALFORMED_ECHO_CHARS
from agentlab.agent.providers.scripted import ScriptedProvider, final, text
from agentlab.agent.review import REVIEW_CUT_ERROR, Review, review_answer
from agentlab.agent.tools import default_registry
from agentlab.agent.types import Completion, Usage

QUESTION = "What is 17 * 23? Use the calculator."


def cut(content: str, *, decoding: str | None = None) -> Completion:
    return Completion(text=content, usage=Usage(10, 8), model="m", finish_reason="length", decoding=decoding)  # type: ignore[arg-type]


@pytest.mark.parametrize("answer", ["", "   ", "\n\t", None])
async def test_an_empty_final_answer_is_stop_reason_empty_answer(answer) -> None:
    provider = ScriptedProvider([final(answer, "391 from the calculator", "17 * 23")])
    result = await AgentLoop(provider, default_registry()).run(QUESTION)
    assert (result.stop_reason, result.answer, result.error) == ("empty_answer", "", EMPTY_ANSWER_ERROR)
    assert result.steps_used == 1


async def test_an_empty_text_reply_is_empty_answer_and_a_whitespace_one_too() -> None:
    for reply in ("", "  \n "):
        provider = ScriptedProvider([text(reply)], native_tools=False)
        result = await AgentLoop(provider, default_registry()).run(QUESTION)
        assert result.stop_reason == "empty_answer", reply


async def test_a_zero_is_an_answer_not_an_empty_one() -> None:
    provider = ScriptedProvider([final(0)])
    result = await AgentLoop(provider, default_registry()).run("What is 3 - 3?")
    assert (result.stop_reason, result.answer) == ("final", "0")


async def test_a_review_cut_by_the_token_limit_is_a_failed_review_not_its_first_word() -> None:
    provider = ScriptedProvider([cut('{"verdict": "accept", "note": "The answer 391 is')])
    review, completion = await review_answer(provider, question="q", answer="391", evidence="", reasoning="")
    assert review == Review("failed", error=REVIEW_CUT_ERROR)
    assert REVIEW_CUT_ERROR == "the reviewer's reply was cut off by the output-token limit"
    assert completion.finish_reason == "length"


async def test_an_attempt_whose_every_reply_was_cut_is_length_not_max_steps() -> None:
    # schema-constrained decoding turns each cut reply into a malformed call
    replies = [cut('{"tool": "calculator", "arguments": {"expression": "17 * 23 +', decoding="schema")] * 3
    provider = ScriptedProvider(replies, native_tools=False)
    result = await AgentLoop(provider, default_registry(), max_steps=3, max_tokens=16).run(QUESTION)
    assert result.stop_reason == "length"
    assert result.error == (
        "each of the 3 replies was cut off by the output-token limit (16 tokens) before it was complete"
    )


async def test_max_steps_stays_max_steps_when_some_reply_was_whole() -> None:
    replies = [
        cut('{"tool": "calculator", "arguments": {"expression": "17 *', decoding="schema"),
        text('{"tool": "calculator", "arguments": {"expression": "17 * 23"}}'),
    ]
    provider = ScriptedProvider(replies, native_tools=False)
    result = await AgentLoop(provider, default_registry(), max_steps=2, max_tokens=16).run(QUESTION)
    assert result.stop_reason == "max_steps"


async def test_a_malformed_reply_is_echoed_back_as_a_bounded_excerpt() -> None:
    long_reply = '{"tool": "calculator", "arguments": {"expression": "' + "1 + " * 400
    provider = ScriptedProvider(
        [
            cut(long_reply, decoding="schema"),
            text('{"tool": "final_answer", "arguments": {"answer": "391"}}'),
        ],
        native_tools=False,
    )
    result = await AgentLoop(provider, default_registry(), max_tokens=512).run(QUESTION)
    assert (result.stop_reason, result.answer) == ("final", "391")
    echoed = provider.calls[1][2]
    assert echoed["role"] == "assistant"
    hidden = len(long_reply) - MALFORMED_ECHO_CHARS
    assert echoed["content"] == f"{long_reply[:MALFORMED_ECHO_CHARS]}… [{hidden} more characters not shown]"
    # the repair observation quotes at most 300 characters of it
    observation = provider.calls[1][3]["content"]
    assert long_reply[:301] not in observation and len(observation) < 700


async def test_a_readable_call_is_echoed_whole() -> None:
    reply = '{"tool": "calculator", "arguments": {"expression": "' + "1 + " * 100 + '1"}}'
    provider = ScriptedProvider(
        [text(reply), text('{"tool": "final_answer", "arguments": {"answer": "101"}}')], native_tools=False
    )
    await AgentLoop(provider, default_registry()).run("Add one a hundred and one times.")
    assert provider.calls[1][2]["content"] == reply

"""What a driven turn records is true (issue 13): a final answer cut by the
token limit fails the turn with cause ``length``, a step's decoding mode is in
its event, NUL and lone surrogates from the model or a tool are stored as
U+FFFD — on PostgreSQL and SQLite alike (``make test`` runs this file on both)."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from agentlab.agent.providers.scripted import ScriptedProvider, final, text, tool_call
from agentlab.agent.tools import Tool, default_registry
from agentlab.agent.types import Completion, Usage
from turns.driver import EVALUATION, drive_turn
from turns.models import EventType, Turn
from turns.selectors import events_after
from turns.services import turn_create

pytestmark = pytest.mark.django_db(transaction=True)

UNSTORABLE = "a\x00b\ud800c"
STORED = "a\ufffdb\ufffdc"


async def test_a_final_answer_cut_by_the_limit_fails_the_turn_with_cause_length(owner, db_threads):
    turn = await db_threads.run(
        turn_create, owner=owner, question="Tell me about ducks.", max_output_tokens=7
    )
    cut = Completion(text="Ducks are birds that", usage=Usage(30, 7), model="m", finish_reason="length")
    provider = ScriptedProvider([cut], native_tools=False)
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads)

    assert result is not None and (result.status, result.stop_reason) == ("failed", "length")
    assert provider.kwargs_seen[0]["max_tokens"] == 7  # the turn's own limit reached the call
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.outcome, turn.stop_reason, turn.answer) == ("failed", "failed", "length", "")
    assert turn.meta["failure_cause"] == "length"
    failed = next(
        e for e in await db_threads.run(events_after, turn_id=turn.pk) if e.type == EventType.TURN_FAILED
    )
    assert failed.data == {
        "stop_reason": "length",
        "steps": 1,
        "cause": "length",
        "error": "the final answer was cut off by the output-token limit (7 tokens) before it was complete",
        "partial_answer": "Ducks are birds that",
    }
    usage = next(
        e for e in await db_threads.run(events_after, turn_id=turn.pk) if e.type == EventType.LLM_USAGE
    )
    assert usage.data["finish_reason"] == "length"


async def test_the_steps_decoding_mode_is_in_its_llm_usage_event(owner, db_threads, settings):
    settings.AGENTLAB_MAX_OUTPUT_TOKENS = 64
    turn = await db_threads.run(turn_create, owner=owner, question="What is 17 * 23?")
    provider = ScriptedProvider(
        [
            text('{"tool": "calculator", "arguments": {"expression": "17 * 23"}}'),
            text('{"tool": "final_answer", "arguments": {"answer": "391", "evidence": "calculator"}}'),
        ],
        native_tools=False,
        constrained_decoding=True,
    )
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads)
    assert result is not None and result.answer == "391"
    assert [kw["max_tokens"] for kw in provider.kwargs_seen] == [64, 64]  # AGENTLAB_MAX_OUTPUT_TOKENS
    usage_events = [
        e.data for e in await db_threads.run(events_after, turn_id=turn.pk) if e.type == EventType.LLM_USAGE
    ]
    assert [(d["step"], d["decoding"]) for d in usage_events] == [(1, "schema"), (2, "schema")]
    answered = next(
        e for e in await db_threads.run(events_after, turn_id=turn.pk) if e.type == EventType.TURN_ANSWERED
    )
    assert answered.data["answer_type"] == "string"


class _Echo(BaseModel):
    text: str = ""


async def test_nul_and_lone_surrogates_from_a_tool_and_the_model_are_stored_and_sent_as_fffd(
    owner, db_threads
):
    registry = default_registry()

    async def dirty(args: _Echo, _ctx) -> str:
        return f"tool says {UNSTORABLE}"

    registry.register(Tool(name="dirty", description="returns unstorable text", parameters=_Echo, fn=dirty))
    turn = await db_threads.run(turn_create, owner=owner, question=f"Question {UNSTORABLE}?")
    provider = ScriptedProvider(
        [
            tool_call("dirty", {"text": UNSTORABLE}, content=f"thinking {UNSTORABLE}"),
            final(f"answer {UNSTORABLE}", evidence=f"evidence {UNSTORABLE}", reasoning={"why": UNSTORABLE}),
        ]
    )
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads, tools=registry)
    assert result is not None and result.status == "succeeded"

    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert turn.question == f"Question {STORED}?"
    assert (turn.answer, turn.evidence) == (f"answer {STORED}", f"evidence {STORED}")
    # an object answer field is stored as its JSON text, where NUL is the escape \u0000
    assert turn.reasoning == '{"why": "a\\u0000b\ufffdc"}' and "\x00" not in turn.reasoning
    log = json.dumps(
        [e.data for e in await db_threads.run(events_after, turn_id=turn.pk)], ensure_ascii=False
    )
    assert "\x00" not in log and "\ud800" not in log and f"tool says {STORED}" in log
    # the next request carried the tool's output cleaned (a body no transport could encode otherwise)
    second_request = json.dumps(provider.calls[1], ensure_ascii=False)
    assert f"tool says {STORED}" in second_request and "\x00" not in second_request

"""Every event type has one payload definition (``turns.event_types``), the
append refuses a payload without its required keys, and the events that real
driven turns write match their definitions and survive JSON."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, TypeAdapter

from agentlab.agent.extensions import Extensions
from agentlab.agent.providers.scripted import ScriptedProvider, call, final, text, tool_call, tool_calls
from agentlab.agent.tools import Tool, default_registry
from turns.driver import ChatPolicy, EvaluationPolicy, drive_turn
from turns.driver import lease as lease_module
from turns.event_types import PAYLOADS
from turns.events import event_append
from turns.models import EventType, Turn, TurnEvent
from turns.selectors import events_after
from turns.services import (
    conversation_create,
    turn_cancel,
    turn_continue,
    turn_create,
    turn_interrupt,
    turn_resume,
    turn_retry,
)

pytestmark = pytest.mark.django_db(transaction=True)

RETRY = json.dumps({"verdict": "retry", "note": "looks wrong", "retry_instruction": "multiply again"})
ACCEPT = '{"verdict": "accept", "note": "checks out", "retry_instruction": null}'


class _Label(BaseModel):
    label: str


def _tools_with_approval():
    registry = default_registry()

    async def deploy(args: _Label, _ctx) -> str:
        return f"deployed {args.label}"

    registry.register(
        Tool(name="deploy", description="deploy", parameters=_Label, fn=deploy, needs_approval=True)
    )
    return registry


def test_every_event_type_has_exactly_one_payload_definition():
    assert set(PAYLOADS) == set(EventType.values)
    for event_type, payload in PAYLOADS.items():
        assert isinstance(payload.__required_keys__, frozenset), event_type
        # pydantic can build a validator for each (the shapes are closed)
        TypeAdapter(payload)


@pytest.mark.parametrize(
    ("event_type", "data", "missing"),
    [
        (EventType.PHASE, {}, "phase"),
        (EventType.TURN_FAILED, {"stop_reason": "error", "steps": 0, "cause": "error"}, "error"),
        (EventType.ATTEMPT_RETRY, {"attempt": 2, "reason": "retry"}, "previous"),
        (EventType.TURN_RESUMED, {"by": None}, "from"),
    ],
)
def test_an_append_missing_a_required_key_is_refused_and_writes_nothing(owner, event_type, data, missing):
    turn = turn_create(owner=owner, question="typed payloads")
    with pytest.raises(ValueError, match=rf"^{event_type} event payload is missing {missing} "):
        event_append(turn_id=turn.pk, type=event_type, data=data)
    assert Turn.objects.get(pk=turn.pk).last_seq == 1
    assert TurnEvent.objects.filter(turn=turn).count() == 1


def _all_events() -> list[TurnEvent]:
    return list(TurnEvent.objects.order_by("turn_id", "seq"))


async def _drive_every_kind_of_turn(owner, db_threads, settings, monkeypatch) -> list[TurnEvent]:
    """Turns that between them write every event type, through the real
    services and driver: a reviewed and retried answer with a tool and a
    plugin's checks, an expired
    approval, a clarifying question, max_steps then continue, a cancel then
    retry, an interrupt then resume."""
    monkeypatch.setattr(lease_module, "CANCEL_POLL_S", 0.05)
    settings.APPROVAL_TIMEOUT_S = 0.3

    reviewed = await db_threads.run(turn_create, owner=owner, question="What is 6*7?")
    provider = ScriptedProvider(
        [
            tool_calls(call("calculator", {"expression": "6*7"}), content="let me compute", usage=(5, 2)),
            final("41", usage=(6, 2)),
            text(RETRY, usage=(7, 3)),
            final("42", usage=(8, 2)),
            text(ACCEPT, usage=(4, 1)),
        ]
    )
    result = await drive_turn(
        reviewed.pk,
        policy=EvaluationPolicy(review=True),
        provider=provider,
        db=db_threads,
        # a plugin's step and turn checks: the check events
        extensions=Extensions(plugins=("tests.agent.plugins.sample_plugins:AsyncChecks",)),
    )
    assert result is not None and (result.answer, result.stop_reason) == ("42", "final")

    approval = await db_threads.run(turn_create, owner=owner, question="deploy x")
    result = await drive_turn(
        approval.pk,
        policy=ChatPolicy(review=False),
        # a chat turn streams its text: the llm.delta events
        provider=ScriptedProvider(
            [tool_call("deploy", {"label": "x"}, content="Deploying x.")], stream_chars=4
        ),
        db=db_threads,
        tools=_tools_with_approval(),
    )
    assert result is not None and result.stop_reason == "approval_rejected"

    conversation = await db_threads.run(conversation_create, owner=owner)
    asked = await db_threads.run(turn_create, owner=owner, question="book a table", conversation=conversation)
    provider = ScriptedProvider([tool_call("ask_user", {"question": "for how many?"})])
    result = await drive_turn(
        asked.pk, policy=EvaluationPolicy(review=False), provider=provider, db=db_threads
    )
    assert result is not None and result.stop_reason == "asked"
    # the next turns of its conversation: one cancelled, then the reply, given the history
    dropped = await db_threads.run(turn_create, owner=owner, question="oops", conversation=conversation)
    await db_threads.run(turn_cancel, turn_id=dropped.pk, acting_user=owner)
    reply = await db_threads.run(turn_create, owner=owner, question="four", conversation=conversation)
    result = await drive_turn(
        reply.pk, policy=ChatPolicy(review=False), provider=ScriptedProvider([final("booked")]), db=db_threads
    )
    assert result is not None and result.answer == "booked"

    limited = await db_threads.run(turn_create, owner=owner, question="count", max_steps=1)
    provider = ScriptedProvider([tool_call("calculator", {"expression": "1+1"})])
    result = await drive_turn(
        limited.pk, policy=EvaluationPolicy(review=False), provider=provider, db=db_threads
    )
    assert result is not None and result.stop_reason == "max_steps"
    await db_threads.run(turn_continue, turn_id=limited.pk, extra_steps=1, acting_user=owner)
    result = await drive_turn(
        limited.pk,
        policy=EvaluationPolicy(review=False),
        provider=ScriptedProvider([final("2")]),
        db=db_threads,
    )
    assert result is not None and result.answer == "2"

    cancelled = await db_threads.run(turn_create, owner=owner, question="never mind")
    await db_threads.run(turn_cancel, turn_id=cancelled.pk, acting_user=owner)
    await db_threads.run(turn_retry, turn_id=cancelled.pk, acting_user=owner)

    interrupted = await db_threads.run(turn_create, owner=owner, question="lost")
    assert await db_threads.run(turn_interrupt, turn_id=interrupted.pk, reason="worker died")
    await db_threads.run(turn_resume, turn_id=interrupted.pk, acting_user=owner)
    return await db_threads.run(_all_events)


async def test_the_events_of_driven_turns_match_their_payload_definitions(
    owner, db_threads, settings, monkeypatch
):
    events = await _drive_every_kind_of_turn(owner, db_threads, settings, monkeypatch)
    assert {e.type for e in events} == set(EventType.values)  # every type was written, by real code
    for event in events:
        TypeAdapter(PAYLOADS[event.type]).validate_python(event.data)  # closed shapes: no stray keys
    retries = {e.data["reason"] for e in events if e.type == EventType.ATTEMPT_RETRY}
    assert retries == {"review", "retry", "continue"}


async def test_stored_payloads_round_trip_through_json_unchanged(owner, db_threads, settings, monkeypatch):
    events = await _drive_every_kind_of_turn(owner, db_threads, settings, monkeypatch)
    for event in events:
        frame = event.as_frame()
        assert json.loads(json.dumps(frame)) == frame
        again = json.loads(json.dumps(event.data))
        assert TypeAdapter(PAYLOADS[event.type]).validate_python(again) == event.data
    # what the API replays is what was appended
    turn_id = events[0].turn_id
    assert [e.data for e in await db_threads.run(events_after, turn_id=turn_id)] == [
        e.data for e in events if e.turn_id == turn_id
    ]


async def test_a_history_event_says_what_was_given_and_what_was_left_out(
    owner, db_threads, settings, monkeypatch
):
    events = await _drive_every_kind_of_turn(owner, db_threads, settings, monkeypatch)
    (history,) = [e for e in events if e.type == EventType.HISTORY]
    asked, dropped = await db_threads.run(
        lambda: list(Turn.objects.filter(question__in=["book a table", "oops"]).order_by("position"))
    )
    assert history.data["turns"] == [asked.pk]
    assert history.data["dropped"] == [{"turn": dropped.pk, "position": 2, "reason": "cancelled"}]
    assert history.data["messages"] == [
        {"role": "user", "content": "book a table"},
        {"role": "assistant", "content": "for how many?"},
    ]

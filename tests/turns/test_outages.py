"""A database outage under a driven turn, and tools after a crash (issue 18).

The database failing mid-turn (``OperationalError``: a restart, a cut
connection) ends the turn ``interrupted`` — resumable — never ``failed``,
and keeps the steps it had held back, so a resume loses no answer. A tool
gets an idempotency key; ``tool.started`` is written before it runs, and a
resume after a crash between the two runs it again with the same key and
says so. (The same, against real restarts and kills: ``tests/faults``.)
"""

from __future__ import annotations

import itertools

import pytest
from django.db import OperationalError
from pydantic import BaseModel

from agentlab.agent.providers.scripted import ScriptedProvider, final, tool_call
from agentlab.agent.tools import Tool, ToolContext, default_registry
from turns import events as events_module
from turns.driver import EVALUATION, drive_turn
from turns.models import EventType, Turn
from turns.selectors import events_after
from turns.services import turn_create, turn_interrupt, turn_resume

pytestmark = pytest.mark.django_db(transaction=True)


async def types(db_threads, turn_id: int) -> list[str]:
    return [e.type for e in await db_threads.run(events_after, turn_id=turn_id)]


async def test_a_database_error_at_the_finish_interrupts_the_turn_and_keeps_the_answer(
    owner, db_threads, monkeypatch
):
    turn = await db_threads.run(turn_create, owner=owner, question="What is 6 * 7?")
    calls = itertools.count()
    real = events_module.event_append_many

    def restarting(**kwargs):
        # the terminal write meets a database that was just restarted
        if any(e.type == EventType.TURN_ANSWERED for e in kwargs["events"]) and next(calls) == 0:
            raise OperationalError("terminating connection due to administrator command")
        return real(**kwargs)

    monkeypatch.setattr(events_module, "event_append_many", restarting)
    result = await drive_turn(
        turn.pk, policy=EVALUATION, provider=ScriptedProvider([final("42")]), db=db_threads
    )
    assert result is not None and result.status == "interrupted"
    assert "terminating connection" in (result.error or "")
    row = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (row.status, row.outcome) == ("interrupted", "")
    logged = await db_threads.run(events_after, turn_id=turn.pk)
    assert [e.type for e in logged][-1] == EventType.TURN_INTERRUPTED
    assert logged[-1].data["reason"].startswith("database error: OperationalError: terminating connection")
    # the held-back final answer was written with the interruption ...
    assert EventType.TOOL_CALL in [e.type for e in logged]

    await db_threads.run(turn_resume, turn_id=turn.pk)
    no_llm = ScriptedProvider([])
    again = await drive_turn(turn.pk, policy=EVALUATION, provider=no_llm, db=db_threads)
    # ... so the resume answers from the log without asking the model again
    assert again is not None and (again.status, again.answer) == ("succeeded", "42")
    assert no_llm.calls == []


async def test_a_database_error_mid_turn_is_an_interruption_not_a_failure(owner, db_threads, monkeypatch):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    calls = itertools.count()
    real = events_module.event_append_many

    def cut(**kwargs):
        if any(e.type == EventType.TOOL_RESULT for e in kwargs["events"]) and next(calls) == 0:
            raise OperationalError("the connection is closed")
        return real(**kwargs)

    monkeypatch.setattr(events_module, "event_append_many", cut)
    provider = ScriptedProvider([tool_call("calculator", {"expression": "2+2"})])
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads)
    assert result is not None and result.status == "interrupted"
    assert (await types(db_threads, turn.pk))[-1] == "turn.interrupted"
    assert "turn.failed" not in await types(db_threads, turn.pk)


class _Send(BaseModel):
    to: str


def _sending_tool(seen: list[ToolContext]) -> Tool:
    def send(args: _Send, context: ToolContext) -> str:
        seen.append(context)
        return f"sent to {args.to}"

    return Tool(name="send", description="Send a message (a side effect).", parameters=_Send, fn=send)


async def test_a_tool_gets_an_idempotency_key_and_tool_started_is_written_first(owner, db_threads):
    seen: list[ToolContext] = []
    tools = default_registry()
    tools.register(_sending_tool(seen))
    turn = await db_threads.run(turn_create, owner=owner, question="send it")
    provider = ScriptedProvider([tool_call("send", {"to": "ann"}, id="call_send"), final("sent")])
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads, tools=tools)
    assert result is not None and result.answer == "sent"

    key = f"turn-{turn.pk}/attempt-1/call_send"
    assert [(c.idempotency_key, c.may_have_run) for c in seen] == [(key, False)]
    logged = await db_threads.run(events_after, turn_id=turn.pk)
    kinds = [e.type for e in logged]
    # before the tool ran, after its call; nothing for final_answer (no side effect)
    assert kinds.index("tool.started") == kinds.index("tool.call") + 1 < kinds.index("tool.result")
    assert kinds.count("tool.started") == 1
    started = next(e for e in logged if e.type == EventType.TOOL_STARTED)
    assert started.data == {
        "attempt": 1,
        "step": 1,
        "call_id": "call_send",
        "name": "send",
        "idempotency_key": key,
        "repeat": False,
    }


async def test_a_resume_after_a_crash_mid_tool_passes_the_same_key_and_says_so(
    owner, db_threads, monkeypatch
):
    seen: list[ToolContext] = []
    tools = default_registry()
    tools.register(_sending_tool(seen))
    turn = await db_threads.run(turn_create, owner=owner, question="send it")
    real = events_module.event_append_many

    class Crash(BaseException):
        """The process dies: nothing after this runs (not an Exception the driver catches)."""

    def dies_before_the_result(**kwargs):
        if any(e.type == EventType.TOOL_RESULT for e in kwargs["events"]):
            raise Crash
        return real(**kwargs)

    monkeypatch.setattr(events_module, "event_append_many", dies_before_the_result)
    provider = ScriptedProvider([tool_call("send", {"to": "ann"}, id="call_send")])
    with pytest.raises(Crash):
        await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads, tools=tools)
    monkeypatch.setattr(events_module, "event_append_many", real)
    assert await db_threads.run(turn_interrupt, turn_id=turn.pk, reason="worker killed")
    await db_threads.run(turn_resume, turn_id=turn.pk)

    result = await drive_turn(
        turn.pk, policy=EVALUATION, provider=ScriptedProvider([final("sent")]), db=db_threads, tools=tools
    )
    assert result is not None and result.answer == "sent"
    key = f"turn-{turn.pk}/attempt-1/call_send"
    assert [(c.idempotency_key, c.may_have_run) for c in seen] == [(key, False), (key, True)]
    started = [
        e.data for e in await db_threads.run(events_after, turn_id=turn.pk) if e.type == "tool.started"
    ]
    assert [(d["idempotency_key"], d["repeat"]) for d in started] == [(key, False), (key, True)]

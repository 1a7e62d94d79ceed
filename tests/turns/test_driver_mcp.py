"""MCP tool servers in driven chat turns (turns/driver/extensions.py): a scripted
model calls the real MCP test server over stdio and streamable HTTP; the
server is reused across turns, dies mid-turn, and needs approval."""

from __future__ import annotations

import asyncio

import pytest

from agentlab.agent.mcp import parse_server
from agentlab.agent.providers.scripted import ScriptedProvider, final, tool_call
from tests.mcp_support import http_server, starts, stdio_spec
from turns.driver import CHAT, drive_turn
from turns.driver import lease as lease_module
from turns.models import Approval, EventType, Turn
from turns.selectors import events_after
from turns.services import approval_decide, turn_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("process_hub")]


def tool_results(turn_id: int) -> list[dict]:
    return [e.data["result"] for e in events_after(turn_id=turn_id) if e.type == EventType.TOOL_RESULT]


async def ask(db_threads, owner, provider, question: str = "Add them."):
    turn = await db_threads.run(turn_create, owner=owner, question=question)
    result = await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    return turn.pk, result


async def test_stdio_server_tools_are_called_in_chat_turns_and_the_server_is_started_once(
    owner, db_threads, settings, tmp_path
):
    settings.AGENTLAB_MCP_SERVERS = [parse_server("calc", stdio_spec(tmp_path / "starts"))]

    first, r1 = await ask(
        db_threads, owner, ScriptedProvider([tool_call("calc__add", {"a": 2, "b": 3}, id="a1"), final("5")])
    )
    second, r2 = await ask(
        db_threads, owner, ScriptedProvider([tool_call("calc__add", {"a": 4, "b": 4}, id="a2"), final("8")])
    )

    assert (r1.answer, r2.answer) == ("5", "8")
    assert (await db_threads.run(tool_results, first))[0] == {
        "call_id": "a1",
        "name": "calc__add",
        "output": "5",
        "is_error": False,
    }
    assert (await db_threads.run(tool_results, second))[0]["output"] == "8"
    assert starts(tmp_path / "starts") == 1
    stored = await db_threads.run(Turn.objects.get, pk=first)
    assert stored.meta["extensions"] == {"plugins": [], "mcp_servers": ["calc"], "system_prompt": None}


async def test_streamable_http_server_tools_are_called_in_a_chat_turn(owner, db_threads, settings, tmp_path):
    with http_server(tmp_path / "starts") as url:
        settings.AGENTLAB_MCP_SERVERS = [parse_server("web", url)]
        turn_id, result = await ask(
            db_threads,
            owner,
            ScriptedProvider([tool_call("web__echo", {"text": "over HTTP"}, id="e1"), final("over HTTP")]),
            question="Echo it.",
        )

    assert result.answer == "over HTTP"
    assert (await db_threads.run(tool_results, turn_id))[0] == {
        "call_id": "e1",
        "name": "web__echo",
        "output": "over HTTP",
        "is_error": False,
    }


async def test_a_server_that_dies_mid_turn_is_a_tool_error_the_model_sees_and_comes_back(
    owner, db_threads, settings, tmp_path
):
    settings.AGENTLAB_MCP_SERVERS = [parse_server("calc", stdio_spec(tmp_path / "starts"))]
    provider = ScriptedProvider(
        [
            tool_call("calc__die", {}, id="d1"),
            tool_call("calc__add", {"a": 1, "b": 1}, id="a1"),
            final("2"),
        ]
    )

    turn_id, result = await ask(db_threads, owner, provider)

    assert result.status == "succeeded" and result.answer == "2"
    died, added = (await db_threads.run(tool_results, turn_id))[:2]
    assert died == {
        "call_id": "d1",
        "name": "calc__die",
        "output": "Tool calc__die failed: MCPCallError: MCP server 'calc' closed the connection during die "
        "(it may have crashed); it is started again at the next call",
        "is_error": True,
    }
    assert added["output"] == "2" and not added["is_error"]
    # what the model was shown after the crash is that tool error
    assert provider.calls[1][-1] == {"role": "tool", "tool_call_id": "d1", "content": died["output"]}
    assert starts(tmp_path / "starts") == 2


async def test_an_mcp_tool_that_needs_approval_waits_for_a_human(owner, db_threads, settings, monkeypatch):
    monkeypatch.setattr(lease_module, "CANCEL_POLL_S", 0.05)
    settings.AGENTLAB_MCP_SERVERS = [parse_server("calc", {**stdio_spec(), "approval": ["add"]})]
    turn = await db_threads.run(turn_create, owner=owner, question="Add 20 and 22.")
    provider = ScriptedProvider([tool_call("calc__add", {"a": 20, "b": 22}, id="a1"), final("42")])
    task = asyncio.create_task(drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads))

    approval = None
    for _ in range(500):
        approval = await db_threads.run(lambda: Approval.objects.filter(turn_id=turn.pk).first())
        if approval is not None:
            break
        await asyncio.sleep(0.02)
    assert approval is not None and approval.tool_call["name"] == "calc__add"
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).status == "waiting"
    assert await db_threads.run(tool_results, turn.pk) == []  # nothing ran yet

    await db_threads.run(approval_decide, approval_id=approval.pk, approve=True, acting_user=owner)
    result = await asyncio.wait_for(task, timeout=30)

    assert result is not None and result.answer == "42"
    assert (await db_threads.run(tool_results, turn.pk))[0]["output"] == "42"
    resolved = [
        e.data for e in await db_threads.run(events_after, turn_id=turn.pk) if e.type == "approval.resolved"
    ]
    assert resolved == [
        {"approval_id": approval.pk, "status": "approved", "by": "owner", "tool": "calc__add"}
    ]

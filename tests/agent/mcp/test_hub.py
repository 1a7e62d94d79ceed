"""The process's MCP sessions (agentlab/agent/mcp/hub.py) against the real test
server (agentlab/testing/mcp_server.py), over stdio and streamable HTTP. No Django."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from agentlab.agent.mcp import IDEMPOTENCY_META_KEY, MCPCallError, MCPHub, MCPUnavailable, parse_server
from agentlab.testing.net import free_port
from tests.mcp_support import http_server, starts, stdio_server


@pytest.fixture
def hub():
    hub = MCPHub()
    yield hub
    hub.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_stdio_server_is_started_once_and_reused_by_turns_on_other_event_loops(hub, tmp_path):
    config = stdio_server(starts_file=tmp_path / "starts")

    async def one_turn(a: int) -> str:
        return (await hub.call_tool(config, "add", {"a": a, "b": 1})).text

    # each asyncio.run is a new loop, as each Celery task thread has its own
    answers = [asyncio.run(one_turn(a)) for a in (1, 2, 3)]

    assert answers == ["2", "3", "4"]
    assert starts(tmp_path / "starts") == 1
    assert hub.starts["t"] == 1


async def test_tools_are_listed_and_errors_and_the_idempotency_key_arrive(hub):
    config = stdio_server()

    listed = await hub.list_tools(config)
    failed = await hub.call_tool(config, "fail", {"message": "disk full"})
    who = await hub.call_tool(config, "whoami", {}, idempotency_key="turn-7:call-2")

    assert [t.name for t in listed] == ["add", "echo", "whoami", "fail", "die"]
    assert listed[0].input_schema["required"] == ["a", "b"]
    assert (failed.is_error, failed.text) == (True, "Error executing tool fail: disk full")
    assert json.loads(who.text)["meta"][IDEMPOTENCY_META_KEY] == "turn-7:call-2"


async def test_a_server_that_dies_mid_call_is_a_call_error_and_is_started_again_at_the_next_call(
    hub, tmp_path
):
    config = stdio_server(starts_file=tmp_path / "starts")
    first_pid = json.loads((await hub.call_tool(config, "whoami", {})).text)["pid"]

    with pytest.raises(MCPCallError) as caught:
        await hub.call_tool(config, "die", {})
    after = await hub.call_tool(config, "whoami", {})

    assert str(caught.value) == (
        "MCP server 't' closed the connection during die (it may have crashed); "
        "it is started again at the next call"
    )
    assert json.loads(after.text)["pid"] != first_pid
    assert starts(tmp_path / "starts") == 2


async def test_a_command_that_cannot_start_is_unavailable_naming_the_server_and_command(hub):
    config = parse_server("ghost", {"command": ["/nonexistent/mcp-server", "--flag"]})

    with pytest.raises(MCPUnavailable) as caught:
        await hub.list_tools(config)

    message = str(caught.value)
    assert message.startswith("MCP server 'ghost' (stdio /nonexistent/mcp-server --flag) is unavailable: ")
    assert "FileNotFoundError" in message


async def test_a_server_that_does_not_answer_in_time_is_unavailable(hub):
    # `sleep` never speaks MCP: the start times out
    config = parse_server("mute", {"command": ["sleep", "30"], "start_timeout_s": 0.5})

    started = time.monotonic()
    with pytest.raises(MCPUnavailable, match=r"'mute' .* is unavailable: no tool list within 0.5 s"):
        await hub.list_tools(config)

    assert time.monotonic() - started < 10


async def test_an_unreachable_url_is_unavailable(hub):
    config = parse_server("gone", f"http://127.0.0.1:{free_port()}/mcp")

    with pytest.raises(
        MCPUnavailable, match=r"MCP server 'gone' \(streamable-http http://127.0.0.1:\d+/mcp\)"
    ):
        await hub.list_tools(config)


async def test_a_streamable_http_server_is_called_and_its_session_reused(hub, tmp_path):
    with http_server(tmp_path / "starts") as url:
        config = parse_server("web", url)

        added = await hub.call_tool(config, "add", {"a": 20, "b": 22})
        echoed = await hub.call_tool(config, "echo", {"text": "over HTTP"}, idempotency_key="k-1")

    assert (added.text, added.is_error) == ("42", False)
    assert echoed.text == "over HTTP"
    assert hub.starts["web"] == 1


def test_close_stops_the_stdio_server_process(tmp_path):
    hub = MCPHub()
    config = stdio_server()
    pid = json.loads(asyncio.run(hub.call_tool(config, "whoami", {})).text)["pid"]
    assert pid_alive(pid)

    hub.close()

    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)


async def test_a_server_that_died_while_idle_is_started_again_when_the_next_turn_lists_its_tools(
    hub, tmp_path
):
    config = stdio_server(starts_file=tmp_path / "starts")
    pid = json.loads((await hub.call_tool(config, "whoami", {})).text)["pid"]
    os.kill(pid, signal.SIGKILL)
    while pid_alive(pid):
        await asyncio.sleep(0.05)

    listed = await hub.list_tools(config)  # what a turn does first
    after = await hub.call_tool(config, "add", {"a": 1, "b": 2})

    assert [t.name for t in listed][:2] == ["add", "echo"]
    assert (after.text, after.is_error) == ("3", False)
    assert starts(tmp_path / "starts") == 2

"""MCP tools offered like built-in ones (agentlab/agent/mcp/tools.py), against the
real test server over stdio. No Django."""

from __future__ import annotations

import pytest

from agentlab.agent.mcp import MCPHub, MCPUnavailable, mcp_tools, parse_server, tool_name
from agentlab.agent.tools import ToolContext, ToolRegistry, default_registry
from agentlab.agent.types import ToolCall
from tests.mcp_support import stdio_server


@pytest.fixture
def hub():
    hub = MCPHub()
    yield hub
    hub.close()


async def test_tools_are_prefixed_by_server_and_approval_is_per_tool(hub):
    config = stdio_server("calc", approval=["die"], tools=["add", "fail", "die"])

    tools = await mcp_tools([config], hub=hub)

    assert [(t.name, t.needs_approval) for t in tools] == [
        ("calc__add", False),
        ("calc__fail", False),
        ("calc__die", True),
    ]
    assert tools[0].spec()["function"]["parameters"]["required"] == ["a", "b"]
    # the server's readOnlyHint annotation: add has it, the others do not
    assert [t.read_only for t in tools] == [True, False, False]


async def test_approval_for_a_whole_server(hub):
    tools = await mcp_tools([stdio_server("calc", approval=True)], hub=hub)

    assert {t.needs_approval for t in tools} == {True}


async def test_calls_run_through_the_registry_like_any_tool(hub):
    registry = ToolRegistry([*default_registry(), *await mcp_tools([stdio_server("calc")], hub=hub)])

    def call(name: str, **arguments):
        return registry.execute(ToolCall(id="c1", name=name, arguments=arguments), ToolContext())

    added, refused, failed = (
        await call("calc__add", a=2, b=3),
        await call("calc__add", a=2),
        await call("calc__fail", message="quota exceeded"),
    )

    assert (added.output, added.is_error) == ("5", False)
    assert refused.is_error and refused.output.endswith("'b' is a required property")
    assert failed.is_error
    assert failed.output == "Tool calc__fail failed: MCPToolError: Error executing tool fail: quota exceeded"


async def test_one_unavailable_server_makes_the_listing_fail_naming_it(hub):
    good, bad = stdio_server("calc"), parse_server("ghost", "/nonexistent/server")

    with pytest.raises(MCPUnavailable, match="MCP server 'ghost'"):
        await mcp_tools([good, bad], hub=hub)


def test_tool_names_keep_what_endpoints_accept():
    assert tool_name("docs", "search.v2") == "docs__search_v2"
    assert len(tool_name("s", "x" * 100)) == 64

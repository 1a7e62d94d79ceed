"""A turn's plugins and MCP servers put together (agentlab/agent/extensions.py),
driven by the agent loop with a scripted model. No Django."""

from __future__ import annotations

import pytest

from agentlab.agent.extensions import Extensions, turn_setup
from agentlab.agent.loop import AgentLoop
from agentlab.agent.mcp import MCPHub, MCPUnavailable, parse_server
from agentlab.agent.plugins import PluginContext
from agentlab.agent.providers.scripted import ScriptedProvider, final, tool_call
from agentlab.agent.tools import ToolContext, default_registry
from tests.mcp_support import stdio_server

SAMPLES = "tests.agent.plugins.sample_plugins"


@pytest.fixture
def hub():
    hub = MCPHub()
    yield hub
    hub.close()


async def test_no_extensions_leave_the_built_in_tools_as_they_are():
    tools = default_registry()

    setup = await turn_setup(Extensions(), tools=tools, context=PluginContext())

    assert setup.tools is tools and setup.plugins is None and setup.system_prompt is None


async def test_a_scripted_model_calls_a_plugin_tool_and_an_mcp_tool(hub):
    extensions = Extensions(plugins=("example",), mcp_servers=(stdio_server("calc"),))
    setup = await turn_setup(extensions, tools=default_registry(), context=PluginContext(), hub=hub)
    provider = ScriptedProvider(
        [
            tool_call("word_count", {"text": "one two three"}, id="w"),
            tool_call("calc__add", {"a": 3, "b": 4}, id="a"),
            final("7", evidence="calc__add said 7"),
        ]
    )

    result = await AgentLoop(provider, setup.tools).run("Add 3 and 4.", context=ToolContext())

    assert result.stop_reason == "final" and result.answer == "7"
    assert [(r.name, r.output, r.is_error) for s in result.steps for r in s.results] == [
        ("word_count", '{"words": 3}', False),
        ("calc__add", "7", False),
        ("final_answer", "Final answer recorded.", False),
    ]
    offered = [spec["function"]["name"] for spec in provider.tools_seen[0]]
    assert offered[:4] == ["calculator", "search_documents", "ask_user", "final_answer"]
    assert {"calc__add", "calc__die", "word_count"} <= set(offered)


async def test_the_chosen_system_prompt_reaches_the_model_and_names_its_plugin():
    extensions = Extensions(plugins=(f"{SAMPLES}:OtherPrompt", "example_prompt"))
    setup = await turn_setup(extensions, tools=default_registry(), context=PluginContext())
    provider = ScriptedProvider([final("ok")])

    await AgentLoop(provider, setup.tools, system_prompt=setup.system_prompt).run("Hi?")

    assert setup.prompt_plugin == "example_prompt"
    system = provider.calls[0][0]["content"]
    assert system.startswith("You are a careful problem-solving agent.")
    assert "copy, word for word, the sentence of a document" in system


async def test_plugin_failures_while_setting_up_are_checks_not_exceptions():
    setup = await turn_setup(
        Extensions(plugins=(f"{SAMPLES}:Raising",)), tools=default_registry(), context=PluginContext()
    )

    assert [c.detail for c in setup.checks] == [
        "agentlab_tools: RuntimeError: no tools today",
        "agentlab_system_prompt: RuntimeError: no prompt today",
    ]
    assert setup.system_prompt is None


async def test_an_unreachable_mcp_server_at_the_start_raises(hub):
    extensions = Extensions(mcp_servers=(parse_server("ghost", "/nonexistent/server"),))

    with pytest.raises(MCPUnavailable, match="MCP server 'ghost'"):
        await turn_setup(extensions, tools=default_registry(), context=PluginContext(), hub=hub)

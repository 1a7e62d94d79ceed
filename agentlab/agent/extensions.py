"""What a turn adds to the built-in agent: its plugins and MCP servers.

``Extensions`` names them (plugin names in configured order, MCP server
settings); it is a small frozen value, so it can be handed to a worker
process or a job. ``turn_setup`` turns it into what one attempt runs with —
the tool registry (built-in tools, then the MCP servers' tools, then the
plugins'), the system prompt plugins chose and which plugin chose it, and the
``PluginSet`` whose step and turn hooks the driver calls — plus the failed
checks met on the way (a plugin that raised in ``agentlab_tools``, say).

An MCP server that cannot be started or reached raises ``MCPUnavailable``:
a turn cannot be measured with a tool set it was not given, so the driver
fails it (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlab.agent.mcp.config import MCPServerConfig
from agentlab.agent.mcp.hub import MCPHub
from agentlab.agent.plugins.hookspecs import PluginContext
from agentlab.agent.plugins.manager import PluginSet, plugin_set
from agentlab.agent.plugins.records import CheckRecord
from agentlab.agent.protocol import system_prompt
from agentlab.agent.tools import ToolContext, ToolRegistry


@dataclass(frozen=True)
class Extensions:
    """Plugin names (entry-point names or dotted paths, in the order whose
    last system prompt wins) and MCP servers of a turn."""

    plugins: tuple[str, ...] = ()
    mcp_servers: tuple[MCPServerConfig, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.plugins or self.mcp_servers)

    def with_plugins(self, names: tuple[str, ...] | list[str]) -> Extensions:
        """These extensions with ``names`` appended (a name already there stays
        where it was)."""
        merged = tuple(dict.fromkeys([*self.plugins, *names]))
        return Extensions(plugins=merged, mcp_servers=self.mcp_servers)

    def plugin_set(self) -> PluginSet | None:
        """The loaded plugins (``None`` without any). Raises ``PluginError``."""
        return _plugin_set(self.plugins) if self.plugins else None


@dataclass(frozen=True)
class RunExtensions:
    """The layers of an evaluation run's extensions: the plugin names of the
    settings, of the dataset and of the run, and the MCP servers (the
    settings' then the run's; ``run_mcp_servers`` the run's alone). An
    example's own plugins go between the dataset's and the run's
    (``for_example``). Frozen and free of Django (the agent core's rule); a
    Celery worker rebuilds a run's from its config (``evaluation.run.worker``)."""

    settings_plugins: tuple[str, ...] = ()
    dataset_plugins: tuple[str, ...] = ()
    run_plugins: tuple[str, ...] = ()
    mcp_servers: tuple[MCPServerConfig, ...] = ()
    run_mcp_servers: tuple[MCPServerConfig, ...] = ()

    def for_example(self, example_plugins: Sequence[str] = ()) -> Extensions:
        """The ``Extensions`` of one example's turn (see the module docstring)."""
        names = [*self.settings_plugins, *self.dataset_plugins, *example_plugins, *self.run_plugins]
        return Extensions(plugins=tuple(dict.fromkeys(names)), mcp_servers=self.mcp_servers)


_sets: dict[tuple[str, ...], PluginSet] = {}


def _plugin_set(names: tuple[str, ...]) -> PluginSet:
    # a set is cheap to keep and validating hook implementations for every
    # turn is not: one per distinct list of names per process
    found = _sets.get(names)
    if found is None:
        found = _sets[names] = plugin_set(names)
    return found


@dataclass
class TurnSetup:
    """What an attempt runs with (see the module docstring). ``system_prompt``
    is ``None`` when no plugin chose one (the default stands)."""

    tools: ToolRegistry
    plugins: PluginSet | None = None
    system_prompt: str | None = None
    prompt_plugin: str | None = None
    checks: list[CheckRecord] = field(default_factory=list)


async def turn_setup(
    extensions: Extensions,
    *,
    tools: ToolRegistry,
    context: PluginContext,
    example: Mapping[str, Any] | None = None,
    hub: MCPHub | None = None,
) -> TurnSetup:
    """The tools, system prompt and plugins of one attempt.

    ``tools``: the built-in registry. ``context``: what plugins are told of
    the turn; ``example`` goes to ``agentlab_system_prompt`` (``None`` in
    chat). Raises ``MCPUnavailable`` (an MCP server cannot be used) and
    ``PluginError`` (a plugin cannot be loaded).
    """
    if not extensions:
        return TurnSetup(tools=tools)
    extra = []
    if extensions.mcp_servers:
        from agentlab.agent.mcp.tools import mcp_tools

        extra += await mcp_tools(list(extensions.mcp_servers), hub=hub)
    plugins = extensions.plugin_set()
    checks: list[CheckRecord] = []
    chosen: tuple[str | None, str | None] = (None, None)
    if plugins is not None:
        taken = [*tools.names, *(t.name for t in extra)]
        plugin_tools, errors = await plugins.tools(context, taken=taken)
        extra += plugin_tools
        checks += errors
        if plugins.implements("agentlab_system_prompt"):
            offered = tools.offered(
                ToolContext(documents=[dict(d) for d in context.documents], metadata=dict(context.metadata))
            )
            default = system_prompt(offered, native_tools=True)
            choice = await plugins.system_prompt(example, default)
            checks += choice.errors
            chosen = (choice.prompt, choice.plugin)
    registry = tools.with_tools(extra) if extra else tools
    return TurnSetup(
        tools=registry, plugins=plugins, system_prompt=chosen[0], prompt_plugin=chosen[1], checks=checks
    )

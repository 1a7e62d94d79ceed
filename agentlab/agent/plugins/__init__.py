"""Plugins: your tools, your system prompt, your checks on every step (pluggy).

A plugin in a few lines (``myplugin.py``, named in ``AGENTLAB_PLUGINS`` or
published under the ``agentlab`` entry-point group)::

    from agentlab.agent.plugins import hookimpl

    @hookimpl
    def agentlab_step_checked(step, context):
        if step.results:
            failed = [r.name for r in step.results if r.is_error]
            return {"name": "tools_succeeded", "passed": not failed, "detail": failed}

See ``hookspecs`` for the hooks, ``loading`` for where plugins are found,
``manager`` for how their hooks are called and ``records`` for how a check —
or a failing plugin — is recorded.

The manager's and the records' names (they import the agent's tools) are
imported when first read (``agentlab.agent.lazy``): finding a plugin
(``load_plugin``) imports no tool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlab.agent.lazy import exports_of, lazy_export
from agentlab.agent.plugins.hookspecs import (
    ENTRY_POINT_GROUP,
    AgentlabHookSpecs,
    Check,
    PluginContext,
    TurnSummary,
    hookimpl,
    hookspec,
)
from agentlab.agent.plugins.loading import LoadedPlugin, PluginError, installed_plugins, load_plugin

if TYPE_CHECKING:
    from agentlab.agent.plugins.manager import PluginSet, plugin_set
    from agentlab.agent.plugins.records import ERROR_CHECK_PREFIX, CheckRecord, PromptChoice
    from agentlab.agent.tools import schema_tool as plugin_tool

_EXPORTS = {
    **exports_of("agentlab.agent.plugins.manager", "PluginSet", "plugin_set"),
    **exports_of("agentlab.agent.plugins.records", "ERROR_CHECK_PREFIX", "CheckRecord", "PromptChoice"),
    "plugin_tool": "agentlab.agent.tools:schema_tool",
}


def __getattr__(name: str) -> Any:
    return lazy_export(__name__, _EXPORTS, name)


__all__ = [
    "ENTRY_POINT_GROUP",
    "ERROR_CHECK_PREFIX",
    "AgentlabHookSpecs",
    "Check",
    "CheckRecord",
    "LoadedPlugin",
    "PluginContext",
    "PluginError",
    "PluginSet",
    "PromptChoice",
    "TurnSummary",
    "hookimpl",
    "hookspec",
    "installed_plugins",
    "load_plugin",
    "plugin_set",
    "plugin_tool",
]

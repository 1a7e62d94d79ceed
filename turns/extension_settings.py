"""The plugins and MCP servers of the settings, for the turns that run with them (docs/extending.md).

``AGENTLAB_PLUGINS`` and ``AGENTLAB_MCP_SERVERS`` apply to every turn: chat
turns run with exactly these, evaluation turns with these and whatever their
dataset and run switch on (``evaluation``). ``extensions_check`` is a Django
system check: a plugin that cannot be loaded is reported by ``manage.py
check``, ``runserver`` and ``migrate`` before any turn fails on it.

App loading imports this module for the check, so the agent's extensions and
plugins (the MCP hub, the tools) are imported by the functions that use them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core import checks

if TYPE_CHECKING:
    from agentlab.agent.extensions import Extensions


def settings_extensions() -> Extensions:
    """``AGENTLAB_PLUGINS`` and ``AGENTLAB_MCP_SERVERS`` as ``Extensions``."""
    # deferred: see the module docstring
    from agentlab.agent.extensions import Extensions

    return Extensions(
        plugins=tuple(settings.AGENTLAB_PLUGINS), mcp_servers=tuple(settings.AGENTLAB_MCP_SERVERS)
    )


def recorded_extensions(recorded: Mapping[str, Any] | None) -> Extensions:
    """The settings' extensions plus the plugins a turn recorded that it ran
    with (``Turn.meta["extensions"]``): what a turn resumed by a job — not by
    the ``run_eval`` that started it — runs with. MCP servers given to that
    run only are not known here: its tools are then not offered."""
    names: Sequence[str] = (recorded or {}).get("plugins") or ()
    return settings_extensions().with_plugins(list(names))


def extensions_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``agentlab.E001`` when a plugin of ``AGENTLAB_PLUGINS`` cannot be
    loaded or registered."""
    if not settings.AGENTLAB_PLUGINS:
        return []
    from agentlab.agent.plugins import PluginError, plugin_set

    try:
        plugin_set(list(settings.AGENTLAB_PLUGINS))
    except PluginError as exc:
        return [checks.Error(f"AGENTLAB_PLUGINS: {exc}", id="agentlab.E001")]
    return []

"""A run's plugins and MCP servers (docs/architecture.md#evaluation-semantics; docs/extending.md).

An example's turn runs with, in this order (the last system prompt wins):
the plugins of ``AGENTLAB_PLUGINS``, its dataset's (``import_dataset
--plugin``), its own line's (``plugins``) and the run's (``run_eval
--plugin``); and with the MCP servers of ``AGENTLAB_MCP_SERVERS`` and the run's
(``run_eval --mcp``). ``RunExtensions`` holds that for one run;
``extensions_snapshot`` is what the run's config records — every plugin that
may run, with its distribution and version, and the MCP servers without their
environment's values — and ``extensions_resume`` what a resumed run keeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings

from agentlab.agent.extensions import RunExtensions
from agentlab.agent.mcp.config import MCPServerConfig
from agentlab.agent.mcp.hub import MCPUnavailable, mcp_hub
from agentlab.agent.plugins import PluginError, load_plugin, plugin_set
from common.errors import BadInput, StateConflict
from evaluation.models import Dataset, Example


def run_extensions(
    *, dataset: Dataset, plugins: Sequence[str] = (), mcp_servers: Sequence[MCPServerConfig] = ()
) -> RunExtensions:
    """The extensions of a run of ``dataset`` with ``run_eval``'s ``--plugin``
    names and ``--mcp`` servers. Raises ``BadInput`` when an ``--mcp`` name is
    one of ``AGENTLAB_MCP_SERVERS`` (two servers, one tool prefix)."""
    configured = tuple(settings.AGENTLAB_MCP_SERVERS)
    taken = {server.name for server in configured}
    for server in mcp_servers:
        if server.name in taken:
            raise BadInput(
                f"--mcp {server.name}: AGENTLAB_MCP_SERVERS already names a server {server.name!r}"
            )
        taken.add(server.name)
    return RunExtensions(
        settings_plugins=tuple(settings.AGENTLAB_PLUGINS),
        dataset_plugins=tuple(dataset.plugins or ()),
        run_plugins=tuple(dict.fromkeys(p.strip() for p in plugins if p.strip())),
        mcp_servers=(*configured, *mcp_servers),
        run_mcp_servers=tuple(mcp_servers),
    )


def _example_plugin_lists(dataset: Dataset) -> list[tuple[str, ...]]:
    lists = Example.objects.filter(dataset=dataset).values_list("plugins", flat=True).distinct()
    return sorted({tuple(names or ()) for names in lists})


def extensions_snapshot(extensions: RunExtensions, *, dataset: Dataset) -> dict[str, Any]:
    """What the run's config records: ``plugins`` — every plugin an example
    of the run may run with, in order (``{"name", "target", "distribution",
    "version"}``); ``run_plugins`` — the ``--plugin`` names; ``mcp_servers``
    — every server (``MCPServerConfig.describe``); ``run_mcp_servers`` — the
    ``--mcp`` names.

    Every plugin set an example can get is built first, so a plugin that
    cannot be loaded or registered is ``BadInput`` before anything runs.
    """
    names: list[str] = []
    for example_plugins in _example_plugin_lists(dataset) or [()]:
        chosen = extensions.for_example(example_plugins).plugins
        try:
            plugin_set(chosen)
        except PluginError as exc:
            raise BadInput(str(exc)) from None
        names += chosen
    return {
        "plugins": [load_plugin(name).describe() for name in dict.fromkeys(names)],
        "run_plugins": list(extensions.run_plugins),
        "mcp_servers": [server.describe() for server in extensions.mcp_servers],
        "run_mcp_servers": [server.name for server in extensions.run_mcp_servers],
    }


def extensions_resume(extensions: RunExtensions, *, run_id: str, config: Mapping[str, Any]) -> RunExtensions:
    """The extensions a resumed run drives with: its own ``--plugin`` names
    when none are given again; the same ``--mcp`` servers again.

    Raises ``StateConflict`` when other ``--plugin`` names are given, or when
    ``--mcp`` servers differ from those it started with (their environment
    is not stored, so they must be given again): one run measures one setup.
    """
    stored_plugins = list(config.get("run_plugins") or [])
    plugins = extensions.run_plugins
    if plugins and list(plugins) != stored_plugins:
        raise StateConflict(
            f"run {run_id!r} was started with --plugin {stored_plugins or 'none'}, not {list(plugins)}: "
            "one run measures one setup; start a new run id"
        )
    stored_mcp = _described(config.get("mcp_servers") or [], config.get("run_mcp_servers") or [])
    given = _described(
        [s.describe() for s in extensions.run_mcp_servers], [s.name for s in extensions.run_mcp_servers]
    )
    if stored_mcp != given:
        names = ", ".join(sorted(stored_mcp)) or "none"
        raise StateConflict(
            f"run {run_id!r} was started with --mcp servers {names}; give the same --mcp options "
            "again to resume it (one run measures one setup)"
        )
    return RunExtensions(
        settings_plugins=extensions.settings_plugins,
        dataset_plugins=extensions.dataset_plugins,
        run_plugins=tuple(stored_plugins),
        mcp_servers=extensions.mcp_servers,
        run_mcp_servers=extensions.run_mcp_servers,
    )


def _described(servers: Iterable[Mapping[str, Any]], names: Iterable[str]) -> dict[str, tuple[str, str]]:
    wanted = set(names)
    return {s["name"]: (s["transport"], s["target"]) for s in servers if s.get("name") in wanted}


def example_subject(example: Example) -> dict[str, Any]:
    """The example as plugins see it (``PluginContext.example``)."""
    return {
        "question_id": example.external_id,
        "question": example.question,
        "answer": example.answer,
        "task_type": example.task_type,
        "choices": example.choices,
        "metadata": dict(example.metadata or {}),
        "context": dict(example.context or {}),
    }


def mcp_preflight(servers: Sequence[MCPServerConfig]) -> None:
    """Start every MCP server of the run (and list its tools) before any
    example is driven; the sessions stay open for the turns. Raises
    ``BadInput`` naming the first server that does not start — its command
    or URL and the child's last error line — so a broken server stops the
    run at once (exit 2) instead of failing every example one by one."""
    if not servers:
        return
    hub = mcp_hub()
    for server in servers:
        try:
            asyncio.run(hub.list_tools(server))
        except MCPUnavailable as exc:
            raise BadInput(f"{exc}; no example was run") from None

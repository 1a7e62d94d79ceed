"""Calling plugins' hooks so that no plugin can fail a turn.

``PluginSet`` holds the plugins active in one turn, in their configured order,
registered in a pluggy ``PluginManager`` that validates every ``@hookimpl``
against ``AgentlabHookSpecs`` (a misspelt hook or argument is a
``PluginError`` when the set is built). Its methods call each plugin's
implementation on its own, in that order — not through pluggy's all-or-nothing
``pm.hook.<name>(…)`` — so that one plugin's exception, timeout or unreadable
return value becomes a failed ``CheckRecord`` naming that plugin
(``plugin_error:<name>``) while the others still run. Sync implementations run
in a worker thread (a plugin may block, or use an ORM); async ones on the
turn's loop. Each call is bounded by ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import pluggy

from agentlab.agent.plugins.hookspecs import (
    HOOK_NAMES,
    PROJECT,
    AgentlabHookSpecs,
    PluginContext,
    TurnSummary,
)
from agentlab.agent.plugins.loading import LoadedPlugin, PluginError, load_plugin
from agentlab.agent.plugins.records import CheckRecord, PromptChoice, as_check, as_tool, plugin_failure, short
from agentlab.agent.tools import Tool
from agentlab.agent.types import Step

logger = logging.getLogger(__name__)

#: Seconds one hook call of one plugin may take before it counts as failed.
HOOK_TIMEOUT_S = 30.0


class PluginSet:
    """The plugins of one turn, in configured order (see the module docstring).

    Raises ``PluginError`` when a plugin's hook implementations do not match
    the specifications. Two names for the same object count once (the first).
    """

    def __init__(self, plugins: Iterable[LoadedPlugin], *, timeout_s: float = HOOK_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self.manager = pluggy.PluginManager(PROJECT)
        self.manager.add_hookspecs(AgentlabHookSpecs)
        self.plugins: list[LoadedPlugin] = []
        seen: set[int] = set()
        for plugin in plugins:
            if id(plugin.obj) in seen:
                continue
            seen.add(id(plugin.obj))
            try:
                self.manager.register(plugin.obj, name=plugin.name)
            except (ValueError, pluggy.PluginValidationError) as exc:
                raise PluginError(f"plugin {plugin.name!r} cannot be registered: {exc}") from exc
            self.plugins.append(plugin)
        try:
            self.manager.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {exc.plugin!r}: {exc}") from exc
        self._impls: dict[str, dict[str, pluggy.HookImpl]] = {
            hook: {impl.plugin_name: impl for impl in getattr(self.manager.hook, hook).get_hookimpls()}
            for hook in HOOK_NAMES
        }

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.plugins]

    def __bool__(self) -> bool:
        return bool(self.plugins)

    def implements(self, hook: str) -> bool:
        """Whether any plugin of the set implements ``hook``."""
        return bool(self._impls.get(hook))

    def describe(self) -> list[dict[str, Any]]:
        return [p.describe() for p in self.plugins]

    async def _each(self, hook: str, **kwargs: Any) -> list[tuple[str, Any, CheckRecord | None]]:
        """``(plugin name, value, failure)`` for every implementation of
        ``hook``, in configured order; ``failure`` is set when it raised or
        timed out (then ``value`` is ``None``)."""
        out: list[tuple[str, Any, CheckRecord | None]] = []
        for plugin in self.plugins:
            impl = self._impls[hook].get(plugin.name)
            if impl is None:
                continue
            args = [kwargs[name] for name in impl.argnames]
            try:
                if inspect.iscoroutinefunction(impl.function):
                    value = await asyncio.wait_for(impl.function(*args), self.timeout_s)
                else:
                    value = await asyncio.wait_for(asyncio.to_thread(impl.function, *args), self.timeout_s)
                    if inspect.isawaitable(value):
                        value = await asyncio.wait_for(value, self.timeout_s)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                out.append(
                    (
                        plugin.name,
                        None,
                        plugin_failure(plugin.name, hook, f"timed out after {self.timeout_s:g} s"),
                    )
                )
                continue
            except Exception as exc:
                logger.warning("plugin %s: %s raised", plugin.name, hook, exc_info=True)
                out.append(
                    (plugin.name, None, plugin_failure(plugin.name, hook, f"{type(exc).__name__}: {exc}"))
                )
                continue
            out.append((plugin.name, value, None))
        return out

    async def tools(
        self, context: PluginContext, *, taken: Collection[str] = ()
    ) -> tuple[list[Tool], list[CheckRecord]]:
        """The plugins' extra tools and the failures met collecting them. A
        tool whose name is in ``taken`` (the built-in and MCP tools) or given
        by an earlier plugin is left out, as a failure."""
        tools: list[Tool] = []
        errors: list[CheckRecord] = []
        names = set(taken)
        for plugin, value, failure in await self._each("agentlab_tools", context=context):
            if failure is not None:
                errors.append(failure)
                continue
            items = [] if value is None else [value] if isinstance(value, Tool | Mapping) else value
            if not isinstance(items, list | tuple):
                errors.append(
                    plugin_failure(plugin, "agentlab_tools", f"returned {short(value)}, not a list of tools")
                )
                continue
            for item in items:
                try:
                    tool = as_tool(item)
                except (TypeError, ValueError) as exc:
                    errors.append(plugin_failure(plugin, "agentlab_tools", str(exc)))
                    continue
                if tool.name in names:
                    errors.append(
                        plugin_failure(plugin, "agentlab_tools", f"tool name {tool.name!r} is taken")
                    )
                    continue
                names.add(tool.name)
                tools.append(tool)
        return tools, errors

    async def system_prompt(self, example: Mapping[str, Any] | None, default: str) -> PromptChoice:
        """The last system prompt a plugin returned, in configured order."""
        chosen: tuple[str | None, str | None] = (None, None)
        errors: list[CheckRecord] = []
        for plugin, value, failure in await self._each(
            "agentlab_system_prompt", example=example, default=default
        ):
            if failure is not None:
                errors.append(failure)
            elif isinstance(value, str) and value.strip():
                chosen = (value, plugin)
            elif value is not None:
                errors.append(
                    plugin_failure(
                        plugin, "agentlab_system_prompt", f"returned {short(value)}, not text or None"
                    )
                )
        return PromptChoice(prompt=chosen[0], plugin=chosen[1], errors=tuple(errors))

    async def step_checks(self, step: Step, context: PluginContext) -> list[CheckRecord]:
        """Every plugin's checks of one finished step (failures included)."""
        return self._checks(
            await self._each("agentlab_step_checked", step=step, context=context), "agentlab_step_checked"
        )

    async def turn_checks(self, turn: TurnSummary, context: PluginContext) -> list[CheckRecord]:
        """Every plugin's checks of a finished attempt (failures included)."""
        return self._checks(
            await self._each("agentlab_turn_finished", turn=turn, context=context), "agentlab_turn_finished"
        )

    @staticmethod
    def _checks(results: list[tuple[str, Any, CheckRecord | None]], hook: str) -> list[CheckRecord]:
        records: list[CheckRecord] = []
        for plugin, value, failure in results:
            if failure is not None:
                records.append(failure)
                continue
            items = [] if value is None else [value] if isinstance(value, Mapping) else value
            if not isinstance(items, list | tuple):
                records.append(
                    plugin_failure(plugin, hook, f"returned {short(value)}, not a check or a list of checks")
                )
                continue
            for item in items:
                records.append(as_check(item, plugin=plugin, hook=hook))
        return records


def plugin_set(names: Sequence[str], *, timeout_s: float = HOOK_TIMEOUT_S) -> PluginSet:
    """``PluginSet`` of the plugins ``names`` (``load_plugin`` each, in order;
    duplicates count once). Raises ``PluginError``."""
    unique = list(dict.fromkeys(n.strip() for n in names if n and n.strip()))
    return PluginSet([load_plugin(n) for n in unique], timeout_s=timeout_s)

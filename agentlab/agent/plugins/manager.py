"""Finding plugins, and calling their hooks so that no plugin can fail a turn.

``load_plugin(name)`` finds one plugin: an entry point of the ``agentlab``
group named ``name`` (``[project.entry-points.agentlab] name = "pkg.module"``)
or, when there is none, a dotted path (``pkg.module`` or ``pkg.module:attr``;
a class is instantiated without arguments). It is imported once per process;
a name that is neither is a ``PluginError`` naming the plugins installed.

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
import functools
import importlib
import importlib.metadata
import inspect
import json
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pluggy

from agentlab.agent.plugins.hookspecs import (
    ENTRY_POINT_GROUP,
    HOOK_NAMES,
    PROJECT,
    AgentlabHookSpecs,
    PluginContext,
    TurnSummary,
)
from agentlab.agent.tools import Tool, schema_tool
from agentlab.agent.types import Step

logger = logging.getLogger(__name__)

#: Seconds one hook call of one plugin may take before it counts as failed.
HOOK_TIMEOUT_S = 30.0
#: Characters of a check's JSON ``detail`` kept in the event log.
MAX_DETAIL_CHARS = 2000
MAX_CHECK_NAME_CHARS = 100
ERROR_CHECK_PREFIX = "plugin_error:"


class PluginError(Exception):
    """A plugin could not be found, imported or registered (a configuration
    error: reported before any turn runs)."""


@dataclass(frozen=True)
class LoadedPlugin:
    """One imported plugin. ``name``: as configured (an entry-point name or a
    dotted path). ``target``: what was imported (``pkg.module[:attr]``).
    ``distribution`` / ``version``: the installed distribution it comes
    from, when known (``None`` otherwise)."""

    name: str
    target: str
    obj: Any
    distribution: str | None
    version: str | None

    def describe(self) -> dict[str, Any]:
        """``{"name", "target", "distribution", "version"}`` — what a run's
        config snapshot records."""
        return {
            "name": self.name,
            "target": self.target,
            "distribution": self.distribution,
            "version": self.version,
        }


@dataclass(frozen=True)
class CheckRecord:
    """A check as AgentLab records it: the plugin's verdict, or — ``error``
    set — the failure of a plugin (``name`` ``plugin_error:<plugin>``,
    ``passed`` false)."""

    name: str
    passed: bool
    plugin: str
    detail: Any = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "passed": self.passed,
            "detail": self.detail,
            "plugin": self.plugin,
        }
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass(frozen=True)
class PromptChoice:
    """The system prompt plugins chose: ``prompt`` and the ``plugin`` whose it
    is (both ``None``: no plugin answered, the default stands)."""

    prompt: str | None
    plugin: str | None
    errors: tuple[CheckRecord, ...] = ()


# --- finding plugins ---------------------------------------------------------------


def installed_plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points of the ``agentlab`` group, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _import_target(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # "pkg.module.attr" written without the colon
        head, _, tail = module_name.rpartition(".")
        if attr or not head or exc.name != module_name:
            raise
        obj, attr = importlib.import_module(head), tail
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj() if inspect.isclass(obj) else obj


def _distribution_of(module_name: str) -> tuple[str | None, str | None]:
    top = module_name.split(".", 1)[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


@functools.cache
def load_plugin(name: str) -> LoadedPlugin:
    """Import the plugin ``name`` (see the module docstring), once per process.

    Raises ``PluginError`` when no entry point has that name and it is not an
    importable dotted path, or when importing it fails.
    """
    if not isinstance(name, str) or not name.strip():
        raise PluginError(f"a plugin name must be non-empty text, got {name!r}")
    name = name.strip()
    entry = installed_plugins().get(name)
    try:
        if entry is not None:
            obj = entry.load()
            obj = obj() if inspect.isclass(obj) else obj
            dist = entry.dist
            version = dist.version if dist is not None else None
            return LoadedPlugin(name, entry.value, obj, dist.name if dist is not None else None, version)
        if not all(part.isidentifier() for part in name.replace(":", ".").split(".")):
            raise PluginError(_unknown(name))
        obj = _import_target(name)
    except PluginError:
        raise
    except ModuleNotFoundError as exc:
        if entry is None and exc.name and name.startswith(exc.name):
            raise PluginError(_unknown(name)) from None
        raise PluginError(f"plugin {name!r} could not be imported: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        raise PluginError(f"plugin {name!r} could not be imported: {type(exc).__name__}: {exc}") from exc
    module_name = getattr(obj, "__name__", None) if inspect.ismodule(obj) else type(obj).__module__
    dist_name, version = _distribution_of(module_name or name)
    if version is None:
        version = getattr(obj, "__version__", None)
    return LoadedPlugin(name, name, obj, dist_name, version)


def _unknown(name: str) -> str:
    names = ", ".join(sorted(installed_plugins())) or "none"
    return (
        f"no plugin {name!r}: not an entry point of the {ENTRY_POINT_GROUP!r} group "
        f"(installed: {names}) and not an importable dotted path"
    )


# --- one turn's plugins --------------------------------------------------------------


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
                    (plugin.name, None, _failure(plugin.name, hook, f"timed out after {self.timeout_s:g} s"))
                )
                continue
            except Exception as exc:
                logger.warning("plugin %s: %s raised", plugin.name, hook, exc_info=True)
                out.append((plugin.name, None, _failure(plugin.name, hook, f"{type(exc).__name__}: {exc}")))
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
                    _failure(plugin, "agentlab_tools", f"returned {_short(value)}, not a list of tools")
                )
                continue
            for item in items:
                try:
                    tool = _as_tool(item)
                except (TypeError, ValueError) as exc:
                    errors.append(_failure(plugin, "agentlab_tools", str(exc)))
                    continue
                if tool.name in names:
                    errors.append(_failure(plugin, "agentlab_tools", f"tool name {tool.name!r} is taken"))
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
                    _failure(plugin, "agentlab_system_prompt", f"returned {_short(value)}, not text or None")
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
                    _failure(plugin, hook, f"returned {_short(value)}, not a check or a list of checks")
                )
                continue
            for item in items:
                records.append(_as_check(item, plugin=plugin, hook=hook))
        return records


# --- shapes ----------------------------------------------------------------------------


def _failure(plugin: str, hook: str, message: str) -> CheckRecord:
    text = f"{hook}: {message}"
    return CheckRecord(
        name=f"{ERROR_CHECK_PREFIX}{plugin}", passed=False, plugin=plugin, detail=text, error=text
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def json_detail(value: Any) -> Any:
    """``value`` as JSON (``str()`` for what JSON cannot hold), or its text
    cut to ``MAX_DETAIL_CHARS`` when its JSON is longer."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = json.dumps(str(value), ensure_ascii=False)
    if len(text) > MAX_DETAIL_CHARS:
        return f"{text[:MAX_DETAIL_CHARS]}…[cut: {len(text)} characters]"
    return json.loads(text)


def _as_check(item: Any, *, plugin: str, hook: str) -> CheckRecord:
    expected = 'expected {"name": str, "passed": bool, "detail": …}'
    if not isinstance(item, Mapping):
        return _failure(plugin, hook, f"returned {_short(item)}: {expected}")
    name, passed = item.get("name"), item.get("passed")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_CHECK_NAME_CHARS:
        return _failure(
            plugin, hook, f"check name {_short(name)}: {expected}, name 1-{MAX_CHECK_NAME_CHARS} chars"
        )
    if name.startswith(ERROR_CHECK_PREFIX):
        return _failure(plugin, hook, f"check name {name!r}: the prefix {ERROR_CHECK_PREFIX!r} is reserved")
    if not isinstance(passed, bool):
        return _failure(plugin, hook, f"check {name!r}: passed is {_short(passed)}: {expected}")
    return CheckRecord(
        name=name.strip(), passed=passed, plugin=plugin, detail=json_detail(item.get("detail"))
    )


def _as_tool(item: Any) -> Tool:
    if isinstance(item, Tool):
        return item
    if isinstance(item, Mapping):
        unknown = set(item) - {"name", "description", "parameters", "fn", "needs_approval"}
        if unknown:
            raise ValueError(f"tool {item.get('name')!r}: unknown keys {sorted(unknown)}")
        missing = [key for key in ("name", "description", "fn") if key not in item]
        if missing:
            raise ValueError(f"tool {item.get('name')!r}: missing {missing}")
        return schema_tool(
            item["name"],
            item["description"],
            item.get("parameters") or {"type": "object", "properties": {}},
            item["fn"],
            needs_approval=bool(item.get("needs_approval", False)),
        )
    raise TypeError(f"returned {_short(item)}: expected an agentlab Tool or a dict")


def plugin_set(names: Sequence[str], *, timeout_s: float = HOOK_TIMEOUT_S) -> PluginSet:
    """``PluginSet`` of the plugins ``names`` (``load_plugin`` each, in order;
    duplicates count once). Raises ``PluginError``."""
    unique = list(dict.fromkeys(n.strip() for n in names if n and n.strip()))
    return PluginSet([load_plugin(n) for n in unique], timeout_s=timeout_s)

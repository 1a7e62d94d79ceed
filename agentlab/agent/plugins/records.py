"""What AgentLab records of what plugins return: checks, the chosen system
prompt, and the failures of plugins (a failed check naming the plugin)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentlab.agent.tools import Tool, schema_tool

#: Characters of a check's JSON ``detail`` kept in the event log.
MAX_DETAIL_CHARS = 2000
MAX_CHECK_NAME_CHARS = 100
ERROR_CHECK_PREFIX = "plugin_error:"


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


def plugin_failure(plugin: str, hook: str, message: str) -> CheckRecord:
    text = f"{hook}: {message}"
    return CheckRecord(
        name=f"{ERROR_CHECK_PREFIX}{plugin}", passed=False, plugin=plugin, detail=text, error=text
    )


def short(value: Any) -> str:
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


def as_check(item: Any, *, plugin: str, hook: str) -> CheckRecord:
    expected = 'expected {"name": str, "passed": bool, "detail": …}'
    if not isinstance(item, Mapping):
        return plugin_failure(plugin, hook, f"returned {short(item)}: {expected}")
    name, passed = item.get("name"), item.get("passed")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_CHECK_NAME_CHARS:
        return plugin_failure(
            plugin, hook, f"check name {short(name)}: {expected}, name 1-{MAX_CHECK_NAME_CHARS} chars"
        )
    if name.startswith(ERROR_CHECK_PREFIX):
        return plugin_failure(
            plugin, hook, f"check name {name!r}: the prefix {ERROR_CHECK_PREFIX!r} is reserved"
        )
    if not isinstance(passed, bool):
        return plugin_failure(plugin, hook, f"check {name!r}: passed is {short(passed)}: {expected}")
    return CheckRecord(
        name=name.strip(), passed=passed, plugin=plugin, detail=json_detail(item.get("detail"))
    )


def as_tool(item: Any) -> Tool:
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
    raise TypeError(f"returned {short(item)}: expected an agentlab Tool or a dict")

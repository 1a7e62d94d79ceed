"""MCP server settings: what ``AGENTLAB_MCP_SERVERS`` and ``run_eval --mcp`` say.

The setting is a JSON object, server name → how to reach it::

    {"files": "python -m my_mcp_server --root /data",
     "search": "http://127.0.0.1:9000/mcp",
     "shell": {"command": ["uvx", "mcp-shell"], "env": {"TOKEN": "…"},
               "approval": true, "timeout_s": 30}}

A text value is a streamable HTTP URL (``http://`` / ``https://``) or a stdio
command line (split like a shell would, ``shlex``). An object has ``command``
(text or a list) with optional ``args``, ``env``, ``inherit_env`` and ``cwd``,
or ``url``, and
optionally ``approval`` (``true``: every tool of the server needs a human's
approval; a list: those tools), ``tools`` (offer only these), ``timeout_s``
(one call, default 60) and ``start_timeout_s`` (start and list tools, default
30). Names are 1-32 letters, digits, ``_`` or ``-``: a tool ``search`` of
server ``docs`` is offered as ``docs__search``.

A stdio server's environment is the MCP SDK's safe default — ``HOME``,
``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER`` of AgentLab's own — plus
the variables ``inherit_env`` names from AgentLab's environment (``true``:
all of them, secrets included) and then ``env``'s values. A command whose
program is ``python`` or ``python3`` runs with the interpreter running
AgentLab, so ``python -m pkg`` finds its virtualenv's packages whether or not
the virtualenv is activated.

Parsing imports nothing of the ``mcp`` SDK (importing it takes seconds).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
#: Between the server's name and the tool's in the name the model sees.
TOOL_SEPARATOR = "__"
DEFAULT_CALL_TIMEOUT_S = 60.0
DEFAULT_START_TIMEOUT_S = 30.0
_KEYS = {
    "command",
    "args",
    "env",
    "inherit_env",
    "cwd",
    "url",
    "approval",
    "tools",
    "timeout_s",
    "start_timeout_s",
}


class MCPConfigError(ValueError):
    """An MCP server setting that cannot be used; the message names the server
    and the key."""


@dataclass(frozen=True)
class MCPServerConfig:
    """How to reach one MCP server. Exactly one of ``command`` (stdio: the
    program and its arguments) and ``url`` (streamable HTTP) is set.
    ``approval``: ``True`` for every tool, else the tool names (the server's
    own names) that need approval. ``tools``: the only tools offered, or
    ``None`` for all. Hashable: the hub keys its connections by it."""

    name: str
    command: tuple[str, ...] | None = None
    url: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    #: AgentLab's own variables passed on: ``True`` all, else these names
    inherit_env: bool | frozenset[str] = frozenset()
    cwd: str | None = None
    approval: bool | frozenset[str] = False
    tools: frozenset[str] | None = None
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable-http"

    @property
    def target(self) -> str:
        """The command line or the URL, for messages."""
        return shlex.join(self.command) if self.command is not None else str(self.url)

    def needs_approval(self, tool: str) -> bool:
        """Whether the server's tool ``tool`` needs a human's approval."""
        return self.approval is True or (isinstance(self.approval, frozenset) and tool in self.approval)

    def offers(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools

    def describe(self) -> dict[str, Any]:
        """What a run's config snapshot records: everything but ``env``'s values
        (they may be secrets)."""
        approval: bool | list[str] = (
            sorted(self.approval) if isinstance(self.approval, frozenset) else self.approval
        )
        return {
            "name": self.name,
            "transport": self.transport,
            "target": self.target,
            "env": sorted(k for k, _ in self.env),
            "approval": approval,
            "tools": sorted(self.tools) if self.tools is not None else None,
            "timeout_s": self.timeout_s,
        } | (
            {"inherit_env": True if self.inherit_env is True else sorted(self.inherit_env)}
            if self.inherit_env
            else {}
        )


def _strings(value: Any, *, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MCPConfigError(f"{where} must be a list of strings, got {value!r}")
    return list(value)


def _seconds(value: Any, *, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
        raise MCPConfigError(f"{where} must be a number of seconds in (0, 3600], got {value!r}")
    return float(value)


def parse_server(name: str, value: Any, *, where: str = "AGENTLAB_MCP_SERVERS") -> MCPServerConfig:
    """One server's setting (see the module docstring). Raises
    ``MCPConfigError`` naming ``where``, the server and the key."""
    here = f"{where}: server {name!r}"
    if not isinstance(name, str) or not SERVER_NAME_RE.match(name):
        raise MCPConfigError(f"{where}: server name {name!r} must be 1-32 letters, digits, '_' or '-'")
    value = _server_object(value, here=here)
    command = _command(value, here=here) if "command" in value else None
    url = None if command is not None else _url(value, here=here)
    env = value.get("env", {})
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise MCPConfigError(f"{here}: env must be an object of strings, got {env!r}")
    inherit_raw = value.get("inherit_env", False)
    inherit_env: bool | frozenset[str] = (
        inherit_raw is True
        if isinstance(inherit_raw, bool)
        else frozenset(_strings(inherit_raw, where=f"{here}: inherit_env (true, false or variable names)"))
    )
    if inherit_env is False:
        inherit_env = frozenset()
    cwd = value.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise MCPConfigError(f"{here}: cwd must be a path, got {cwd!r}")
    approval_raw = value.get("approval", False)
    approval: bool | frozenset[str]
    if isinstance(approval_raw, bool):
        approval = approval_raw
    else:
        approval = frozenset(_strings(approval_raw, where=f"{here}: approval (true, false or tool names)"))
    tools = value.get("tools")
    return MCPServerConfig(
        name=name,
        command=command,
        url=url,
        env=tuple(sorted(env.items())),
        inherit_env=inherit_env,
        cwd=cwd,
        approval=approval,
        tools=None if tools is None else frozenset(_strings(tools, where=f"{here}: tools")),
        timeout_s=_seconds(value.get("timeout_s", DEFAULT_CALL_TIMEOUT_S), where=f"{here}: timeout_s"),
        start_timeout_s=_seconds(
            value.get("start_timeout_s", DEFAULT_START_TIMEOUT_S), where=f"{here}: start_timeout_s"
        ),
    )


def _server_object(value: Any, *, here: str) -> Mapping[str, Any]:
    """A server's setting as an object with known keys and exactly one of
    ``command`` and ``url`` (a string is one or the other)."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise MCPConfigError(f"{here}: empty; give a URL or a command")
        value = {"url": text} if re.match(r"^https?://", text) else {"command": text}
    if not isinstance(value, Mapping):
        raise MCPConfigError(f"{here}: must be a URL, a command or an object, got {value!r}")
    unknown = set(value) - _KEYS
    if unknown:
        raise MCPConfigError(f"{here}: unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
    if ("command" in value) == ("url" in value):
        raise MCPConfigError(f"{here}: give exactly one of 'command' (stdio) and 'url' (streamable HTTP)")
    return value


def _command(value: Mapping[str, Any], *, here: str) -> tuple[str, ...]:
    """A stdio server's command line: ``command`` (a string is split as a
    shell would) followed by ``args``."""
    raw = value["command"]
    try:
        parts = shlex.split(raw) if isinstance(raw, str) else _strings(raw, where=f"{here}: command")
    except ValueError as exc:
        raise MCPConfigError(f"{here}: command {raw!r} cannot be split: {exc}") from None
    parts += _strings(value.get("args", []), where=f"{here}: args")
    if not parts or not parts[0]:
        raise MCPConfigError(f"{here}: command is empty")
    return tuple(parts)


def _url(value: Mapping[str, Any], *, here: str) -> str:
    """A streamable-HTTP server's URL (no stdio keys beside it)."""
    url = value["url"]
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", url):
        raise MCPConfigError(f"{here}: url must be an http:// or https:// URL, got {url!r}")
    if "args" in value or "env" in value or "cwd" in value:
        raise MCPConfigError(f"{here}: 'args', 'env' and 'cwd' are for a stdio command, not a url")
    return url


def parse_servers(
    value: str | Mapping[str, Any] | None, *, where: str = "AGENTLAB_MCP_SERVERS"
) -> list[MCPServerConfig]:
    """Every server of a setting: a JSON object (text or already parsed);
    empty text or ``None`` is none. Raises ``MCPConfigError``."""
    if value is None:
        return []
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise MCPConfigError(
                f"{where} must be a JSON object (name → URL, command or object): {exc}"
            ) from None
    if not isinstance(value, Mapping):
        raise MCPConfigError(f"{where} must be a JSON object (name → URL, command or object), got {value!r}")
    return [parse_server(name, spec, where=where) for name, spec in value.items()]


def parse_server_option(text: str, *, where: str = "--mcp") -> MCPServerConfig:
    """``NAME=SPEC`` (a command line interface's form): SPEC is a URL, a command
    line or a JSON object as in the setting. Raises ``MCPConfigError``."""
    name, sep, spec = text.partition("=")
    if not sep:
        raise MCPConfigError(f"{where} {text!r}: expected NAME=URL, NAME=COMMAND or NAME={{JSON}}")
    spec = spec.strip()
    if spec.startswith("{"):
        try:
            value: Any = json.loads(spec)
        except ValueError as exc:
            raise MCPConfigError(f"{where} {name!r}: not a JSON object: {exc}") from None
    else:
        value = spec
    return parse_server(name.strip(), value, where=where)

"""MCP servers' tools as AgentLab tools, offered like the built-in ones.

Tool ``search`` of server ``docs`` becomes ``docs__search`` (the server's name,
``__``, the tool's name with anything an OpenAI-compatible endpoint refuses
replaced by ``_``; cut to 64 characters). Its parameters are the server's
``inputSchema``, checked with ``jsonschema`` before the call is sent; its
description is the server's. A call goes through the process's ``MCPHub``
with the call's idempotency key in ``_meta``; what the tool reports as an
error (``isError``) and what fails on the way (``MCPCallError``,
``MCPUnavailable``) reach the model as a tool error, like any tool's failure.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import Any

from agentlab.agent.mcp.config import TOOL_SEPARATOR, MCPServerConfig
from agentlab.agent.mcp.hub import MCPHub, MCPUnavailable, RemoteTool, mcp_hub
from agentlab.agent.tools import Tool, ToolContext, schema_tool

logger = logging.getLogger(__name__)

#: Characters of one result sent back to the model; the rest is cut.
MAX_RESULT_CHARS = 20_000


class MCPToolError(Exception):
    """The MCP tool reported an error (``isError``); the message is its text."""


def tool_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server``."""
    return f"{server}{TOOL_SEPARATOR}{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"[:64]


def _cut(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return f"{text[:MAX_RESULT_CHARS]}…[cut: {len(text)} characters]"


def _tool(config: MCPServerConfig, remote: RemoteTool, hub: MCPHub) -> Tool:
    async def call(arguments: dict[str, Any], context: ToolContext) -> str:
        key = getattr(context, "idempotency_key", None)
        outcome = await hub.call_tool(config, remote.name, arguments, idempotency_key=key)
        if outcome.is_error:
            raise MCPToolError(_cut(outcome.text) or "the tool reported an error")
        return _cut(outcome.text)

    return schema_tool(
        tool_name(config.name, remote.name),
        remote.description or f"Tool {remote.name} of the MCP server {config.name}.",
        remote.input_schema or {"type": "object", "properties": {}},
        call,
        needs_approval=config.needs_approval(remote.name),
        read_only=remote.read_only,
    )


async def mcp_tools(servers: Sequence[MCPServerConfig], *, hub: MCPHub | None = None) -> list[Tool]:
    """The tools of every server in ``servers``, in order (servers started at
    once, in parallel, the first time). A tool whose schema cannot be used or
    whose name repeats another is left out (logged).

    Raises ``MCPUnavailable`` naming every server that could not be started or
    reached.
    """
    hub = hub or mcp_hub()
    listings = await asyncio.gather(*(hub.list_tools(c) for c in servers), return_exceptions=True)
    failures = [str(item) for item in listings if isinstance(item, BaseException)]
    for item in listings:
        if isinstance(item, BaseException) and not isinstance(item, MCPUnavailable | Exception):
            raise item  # CancelledError and friends
    if failures:
        raise MCPUnavailable("; ".join(failures))
    tools: list[Tool] = []
    names: set[str] = set()
    for config, listing in zip(servers, listings, strict=True):
        assert isinstance(listing, list)
        for remote in listing:
            if not config.offers(remote.name):
                continue
            try:
                tool = _tool(config, remote, hub)
            except ValueError as exc:
                logger.warning("MCP server %s: tool %s left out: %s", config.name, remote.name, exc)
                continue
            if tool.name in names:
                logger.warning(
                    "MCP server %s: tool %s left out: the name %s repeats",
                    config.name,
                    remote.name,
                    tool.name,
                )
                continue
            names.add(tool.name)
            tools.append(tool)
    return tools

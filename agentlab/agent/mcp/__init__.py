"""MCP tool servers (Model Context Protocol, through the official ``mcp`` SDK).

``config`` reads the settings (no SDK import), ``hub`` owns the process's
client sessions, ``tools`` offers a server's tools to the agent. The SDK is
imported only when a server is first used: it takes seconds to import.

The settings import ``config``, which imports this package first: so the
package imports only ``config`` itself, and the hub's and the tools' names
(the tools import the agent's tool registry and pydantic) are imported when
first read (``agentlab.agent.lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlab.agent.lazy import exports_of, lazy_export
from agentlab.agent.mcp.config import (
    MCPConfigError,
    MCPServerConfig,
    parse_server,
    parse_server_option,
    parse_servers,
)

if TYPE_CHECKING:
    from agentlab.agent.mcp.hub import (
        IDEMPOTENCY_META_KEY,
        MCPCallError,
        MCPHub,
        MCPUnavailable,
        RemoteTool,
        mcp_hub,
    )
    from agentlab.agent.mcp.tools import MCPToolError, mcp_tools, tool_name

_EXPORTS = {
    **exports_of(
        "agentlab.agent.mcp.hub",
        "IDEMPOTENCY_META_KEY",
        "MCPCallError",
        "MCPHub",
        "MCPUnavailable",
        "RemoteTool",
        "mcp_hub",
    ),
    **exports_of("agentlab.agent.mcp.tools", "MCPToolError", "mcp_tools", "tool_name"),
}


def __getattr__(name: str) -> Any:
    return lazy_export(__name__, _EXPORTS, name)


__all__ = [
    "IDEMPOTENCY_META_KEY",
    "MCPCallError",
    "MCPConfigError",
    "MCPHub",
    "MCPServerConfig",
    "MCPToolError",
    "MCPUnavailable",
    "RemoteTool",
    "mcp_hub",
    "mcp_tools",
    "parse_server",
    "parse_server_option",
    "parse_servers",
    "tool_name",
]

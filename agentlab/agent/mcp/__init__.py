"""MCP tool servers (Model Context Protocol, through the official ``mcp`` SDK).

``config`` reads the settings (no SDK import), ``hub`` owns the process's
client sessions, ``tools`` offers a server's tools to the agent. The SDK is
imported only when a server is first used: it takes seconds to import.
"""

from __future__ import annotations

from agentlab.agent.mcp.config import (
    MCPConfigError,
    MCPServerConfig,
    parse_server,
    parse_server_option,
    parse_servers,
)
from agentlab.agent.mcp.hub import (
    IDEMPOTENCY_META_KEY,
    MCPCallError,
    MCPHub,
    MCPUnavailable,
    RemoteTool,
    mcp_hub,
)
from agentlab.agent.mcp.tools import MCPToolError, mcp_tools, tool_name

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

"""A tiny MCP tool server written with the official ``mcp`` SDK, for tests and demos.

Tools:

- ``add(a, b)`` → the sum, as text;
- ``echo(text)`` → the text;
- ``whoami()`` → this server's pid and the ``_meta`` of the request (the
  idempotency key AgentLab sends arrives there);
- ``fail(message)`` → a tool error (``isError``) with ``message``;
- ``die()`` → the server process exits at once, mid-call: what a crashed
  server looks like to its client.

Every start appends one line (the pid) to the file named by
``AGENTLAB_TEST_MCP_STARTS_FILE`` when it is set, so a test can count how
often a server was started::

    python -m agentlab.testing.mcp_server                              # stdio
    python -m agentlab.testing.mcp_server --http --port 8765          # streamable HTTP at /mcp

No Django here. HTTP binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

STARTS_FILE_ENV = "AGENTLAB_TEST_MCP_STARTS_FILE"


def build_server(name: str = "agentlab-test") -> MCPServer[Any]:
    """The test server with its five tools (see the module docstring)."""
    server: MCPServer[Any] = MCPServer(name, version="1.0", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))  # a replay may run it live
    def add(a: float, b: float) -> str:
        """Add two numbers."""
        total = a + b
        return str(int(total)) if float(total).is_integer() else str(total)

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def whoami(ctx: Context) -> dict[str, Any]:
        """This server's process id and the request's _meta."""
        meta = dict(ctx.request_context.meta or {})
        return {"pid": os.getpid(), "meta": meta}

    @server.tool()
    def fail(message: str) -> str:
        """Always fails with the message."""
        raise ToolError(message)

    @server.tool()
    def die() -> str:
        """End this server process at once (a crash, as its client sees it)."""
        os._exit(3)

    return server


def _record_start() -> None:
    path = os.environ.get(STARTS_FILE_ENV)
    if path:
        with Path(path).open("a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentlab.testing.mcp_server")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--name", default="agentlab-test")
    args = parser.parse_args(argv)
    server = build_server(args.name)
    _record_start()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("stdio")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

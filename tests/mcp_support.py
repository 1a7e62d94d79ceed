"""Helpers for tests that talk to the tiny MCP server (agentlab/testing/mcp_server.py)
over stdio (a child process the client starts) or streamable HTTP (a process
the test starts on a free loopback port)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentlab.agent.mcp import MCPServerConfig, parse_server
from agentlab.testing.mcp_server import STARTS_FILE_ENV
from agentlab.testing.net import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent


def stdio_spec(starts_file: Path | None = None, **extra: Any) -> dict[str, Any]:
    """The setting of the test server over stdio (this interpreter, this checkout)."""
    env = {"PYTHONPATH": str(ROOT)}
    if starts_file is not None:
        env[STARTS_FILE_ENV] = str(starts_file)
    return {"command": [sys.executable, "-m", "agentlab.testing.mcp_server"], "env": env, **extra}


def stdio_server(name: str = "t", starts_file: Path | None = None, **extra: Any) -> MCPServerConfig:
    return parse_server(name, stdio_spec(starts_file, **extra))


def starts(path: Path) -> int:
    """How many times the server writing ``path`` was started."""
    return len(path.read_text().splitlines()) if path.exists() else 0


@contextmanager
def http_server(starts_file: Path | None = None) -> Iterator[str]:
    """Run the test server over streamable HTTP on 127.0.0.1; yields its URL."""
    port = free_port()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    if starts_file is not None:
        env[STARTS_FILE_ENV] = str(starts_file)
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlab.testing.mcp_server", "--http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process=process, what="MCP test server")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

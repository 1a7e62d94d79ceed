"""Loopback helpers for tests and benchmarks that start servers as subprocesses."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(
    port: int,
    *,
    host: str = "127.0.0.1",
    timeout: float = 30.0,
    process: subprocess.Popen[bytes] | None = None,
    what: str = "server",
) -> None:
    """Wait until ``host:port`` accepts connections.

    Raises ``RuntimeError`` naming ``what`` when ``timeout`` seconds pass, or at
    once when ``process`` (the server being started) has exited.
    """
    deadline = time.monotonic() + timeout
    while not port_open(host, port, timeout=0.2):
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"{what} exited with code {process.returncode} before listening on {host}:{port}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout:.0f} s")
        time.sleep(0.05)

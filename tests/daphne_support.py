"""A real daphne for the tests that need one (HTTP edges, ``/metrics`` in a
deployment): Django's test client hides some failures daphne shows."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentlab.testing.net import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def daphne_running(env: dict[str, str], log: Path) -> Iterator[str]:
    """Serve ``config.asgi:application`` with daphne on a free port of
    127.0.0.1, in environment ``env``, its output in ``log``; yields the base
    URL (``http://127.0.0.1:PORT``) once the port accepts connections and
    stops the server after. Raises ``RuntimeError`` (naming the log) when
    daphne exits or does not listen within 30 s."""
    port = free_port()
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, timeout=30, process=proc, what=f"daphne (log: {log})")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

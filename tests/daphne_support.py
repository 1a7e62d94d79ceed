"""A real daphne for the tests that need one (HTTP edges, the browser tests,
``/metrics`` in a deployment): Django's test client hides some failures
daphne shows."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def listening_socket() -> socket.socket:
    """A TCP socket listening on a free port of 127.0.0.1.

    Handed to the server as an open descriptor (``daphne --fd``), so the port
    is the server's from the moment it is chosen: asking the kernel for a free
    port, closing it and letting the server bind it later is a race another
    listener can win (a stub LLM server binding port 0 got the same port once,
    and the browser test then talked to the stub)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def wait_until_serving(
    base_url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0
) -> None:
    """Wait until ``base_url``'s ``/healthz`` answers 200.

    An open port is not enough: the kernel queues connections on the passed
    socket before daphne has loaded the application. Raises ``RuntimeError``
    with the log's tail when ``proc`` exits or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited with code {proc.returncode}; its log ({log}):\n{_tail(log)}")
        try:
            with urllib.request.urlopen(base_url + "/healthz", timeout=2) as response:
                if response.status == 200:
                    return
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except OSError as exc:
            last = repr(exc)
        time.sleep(0.1)
    raise RuntimeError(
        f"daphne did not serve /healthz within {timeout:.0f} s ({last}); its log ({log}):\n{_tail(log)}"
    )


def _tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(unreadable)"


@contextmanager
def daphne_running(env: dict[str, str], log: Path) -> Iterator[str]:
    """Serve ``config.asgi:application`` with daphne on a free port of
    127.0.0.1 (a socket bound here and passed down), in environment ``env``,
    its output in ``log``; yields the base URL (``http://127.0.0.1:PORT``)
    once ``/healthz`` answers and stops the server after. Raises
    ``RuntimeError`` (with the log's tail) when daphne exits or does not
    serve within 30 s."""
    sock = listening_socket()
    port = sock.getsockname()[1]
    with sock, log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), "config.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            pass_fds=(sock.fileno(),),
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base_url, proc, log)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

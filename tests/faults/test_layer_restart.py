"""Fault test: daphne's streams after a restart of the channel layer's Redis.

A server that sat idle through the restart must serve the next streams by
itself — new streams join their turn's group, replay, and get the doorbells
rung afterwards — with no restart of daphne, and ``/readyz`` back at 200.
(Reported: after a Redis restart, ``group_add`` kept raising "Connection
lost" and readiness stayed at 503 for over ten minutes while idle.)
"""

from __future__ import annotations

import json
import sys
import time

import httpx
import pytest

from agentlab.testing.net import free_port, wait_for_port
from tests.api_support import session_turn_script

from .servers import Stack

pytestmark = pytest.mark.faults

SETUP = session_turn_script("layer-owner", title="layer", question="Wait.")

# An event appended by another process rings the turn's doorbell through the
# layer, as a worker's driver does.
APPEND = """
import sys
from turns.events import NewEvent, event_append_many
event_append_many(turn_id=int(sys.argv[1]), events=[NewEvent("thinking", {"text": sys.argv[2]})])
"""


def first_frames(client: httpx.Client, turn_id: int, *, after: int, until: str | None, timeout: float) -> str:
    """Open the turn's SSE stream after seq ``after`` and read it until the
    text ``until`` arrives (or the replay's first event when ``None``)."""
    text = ""
    with client.stream("GET", f"/api/turns/{turn_id}/stream?after={after}", timeout=timeout) as response:
        assert response.status_code == 200, response.read()[:300]
        deadline = time.monotonic() + timeout
        for chunk in response.iter_text():
            text += chunk
            if (until or "id: ") in text or time.monotonic() > deadline:
                break
    return text


def test_streams_recover_by_themselves_after_the_layer_s_redis_restarts_while_idle(stack: Stack) -> None:
    # no worker: the turn stays queued, so its stream stays open on the layer
    setup = json.loads(stack.django(SETUP).strip().splitlines()[-1])
    turn_id = setup["turn"]
    port = free_port()
    daphne = stack.start(
        sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application",
        log="daphne.log",
    )  # fmt: skip
    wait_for_port(port, timeout=30, process=daphne, what="daphne")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        client.cookies.set("sessionid", setup["session"])
        assert "id: 1" in first_frames(client, turn_id, after=0, until=None, timeout=10)
        assert client.get("/readyz").status_code == 200

        stack.redis.restart(down_s=1.0)
        time.sleep(5)  # idle: nothing touches the layer's connections meanwhile

        # the first stream after the outage works: its pooled connection was
        # dead, and the command is sent again on a new one
        assert "id: 1" in first_frames(client, turn_id, after=0, until=None, timeout=10)
        assert client.get("/readyz").status_code == 200
        # from now on every stream works and gets the doorbells rung after it joined
        last_seq = int(stack.sql("SELECT last_seq FROM turns_turn WHERE id = %s", turn_id)[0][0])
        for i in range(5):
            with client.stream(
                "GET", f"/api/turns/{turn_id}/stream?after={last_seq + i}", timeout=15
            ) as response:
                assert response.status_code == 200
                lines = response.iter_lines()
                assert next(lines).startswith(": stream of turn")
                stack.django(APPEND, str(turn_id), f"live {i}")
                seen = ""
                for line in lines:
                    seen += line + "\n"
                    if f"live {i}" in seen:
                        break
                assert f"id: {last_seq + i + 1}" in seen and f"live {i}" in seen
    log = stack.log("daphne.log")
    assert "Exception inside application" not in log and "Traceback" not in log, log[-3000:]
    assert "Task was destroyed but it is pending" not in log, log[-3000:]

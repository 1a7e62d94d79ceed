"""Fault test of issue 47, item 1: the Celery worker survives a Redis
restart while it holds chat turns (the incident's worker log was filed
with the issue).

The incident's conditions: a private ``redis-server`` that keeps nothing
(``--save '' --appendonly no``) stopped with ``redis-cli shutdown nosave``
and started again 2 s later; one worker ``--pool threads --concurrency 8``
(PostgreSQL, Redis broker and channel layer, Celery beat running); ten chat
turns running at the moment of the stop against a stub LLM answering after
1.0 s per call (3 tool calls, then the final answer); 5 followers (SSE
streams through daphne) per turn. Here the tool is the built-in calculator
and review is off (the stub holds no reviewer replies).

What must hold: the worker stays up, unsupervised, and takes new turns
within seconds of Redis returning; the turns it held finish (their acks go
through once Redis is back) and those whose messages Redis lost with its
data are handed to a job again by the sweeper — every turn answered, no
event lost or doubled, every follower sees its turn end.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import httpx
import pytest

from agentlab.testing.net import free_port, wait_for_port
from agentlab.testing.stub_llm import StubLLMServer, StubReply, final_answer_reply, tool_call_reply

from .servers import PrivateRedis, Stack, wait_until
from .test_restarts import assert_logs_exact, start_turns, statuses, tools_done, wait_for_status

pytestmark = pytest.mark.faults

TURNS, FOLLOWERS = 10, 5

#: The owner's session and ten chat turns, started (queued for the worker).
SETUP = """
import json, sys
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from turns.models import Conversation
from turns.services import turn_start
user, _ = get_user_model().objects.get_or_create(username="faults")
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
ids = []
for i in range(int(sys.argv[1])):
    conversation = Conversation.objects.create(owner=user, title=f"broker loss {i}")
    ids.append(turn_start(conversation=conversation, question="Add one, three times.", acting_user=user).pk)
print(json.dumps({"session": session.session_key, "turns": ids}))
"""


def one_second_calls(body: dict[str, Any]) -> StubReply:
    """Three calculator calls, then the final answer: each reply after 1.0 s."""
    done = tools_done(body)
    if done < 3:
        return tool_call_reply("calculator", {"expression": f"{done} + 1"}, delay=1.0)
    return final_answer_reply("3", "the calculator", "added one three times", delay=1.0)


def follow(base: str, session: str, turn_id: int, ends: list[int], drops: list[int]) -> None:
    """One follower: the turn's SSE stream, read until it ends (``stream.end``);
    a stream cut meanwhile is opened again after the last seq it saw, as a
    browser's ``EventSource`` does with ``Last-Event-ID`` (``drops`` counts them)."""
    after, deadline = 0, time.monotonic() + 180
    with httpx.Client(base_url=base, timeout=60) as client:
        client.cookies.set("sessionid", session)
        while time.monotonic() < deadline:
            try:
                with client.stream("GET", f"/api/turns/{turn_id}/stream?after={after}") as response:
                    for line in response.iter_lines():
                        if line.startswith("id: "):
                            after = int(line[4:])
                        elif line == "event: stream.end":
                            ends.append(turn_id)
                            return
            except httpx.HTTPError:
                pass
            drops.append(turn_id)
            time.sleep(0.5)


@pytest.fixture
def nosave_redis():
    """The incident's Redis: private, on a free port, keeping nothing."""
    redis = PrivateRedis(persist=False).start()
    yield redis
    redis.destroy()


def test_the_worker_survives_redis_shutdown_nosave_with_ten_turns_in_flight(
    nosave_redis, stack: Stack
) -> None:
    # nosave_redis first: it outlives the stack's processes at teardown
    stack.redis = nosave_redis
    stack.env.update(
        REDIS_URL=nosave_redis.url(0),
        CELERY_BROKER_URL=nosave_redis.url(1),
        HEARTBEAT_S="1",
        TURN_STALE_S="8",
    )
    with StubLLMServer(one_second_calls) as stub:
        stack.env.update(AGENTLAB_LLM_BASE_URL=stub.base_url)
        worker = stack.worker("w1", concurrency=8)
        stack.start(
            sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
            "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler",
            "--schedule", str(stack.tmp / "beat-schedule"), log="beat.log",
        )  # fmt: skip
        port = free_port()
        daphne = stack.start(
            sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application",
            log="daphne.log",
        )  # fmt: skip
        wait_for_port(port, timeout=60, process=daphne, what="daphne")
        setup = json.loads(stack.django(SETUP, str(TURNS)).strip().splitlines()[-1])
        first: list[int] = setup["turns"]
        ends: list[int] = []
        drops: list[int] = []
        base = f"http://127.0.0.1:{port}"
        followers = [
            threading.Thread(target=follow, args=(base, setup["session"], t, ends, drops))
            for t in first
            for _ in range(FOLLOWERS)
        ]
        for thread in followers:
            thread.start()
        wait_until(
            lambda: list(statuses(stack, first).values()).count("running") >= 8,
            timeout=90,
            what="eight turns running (the worker's eight threads busy)",
        )
        wait_until(
            lambda: (
                len(stack.sql("SELECT 1 FROM turns_turn WHERE id = ANY(%s) AND last_seq >= 4", first)) >= 8
            ),
            timeout=60,
            what="the running turns past their first LLM call",
        )
        held = [t for t, s in statuses(stack, first).items() if s == "running"]
        nosave_redis.shutdown_nosave()
        time.sleep(2.0)
        nosave_redis.start()
        back = time.monotonic()

        # new turns run on the same worker, within seconds of Redis returning
        second = start_turns(stack, 3)
        done = wait_for_status(
            stack, second, {"succeeded", "failed"}, timeout=60, what="turns after the restart"
        )
        taken_s = time.monotonic() - back
        assert set(done.values()) == {"succeeded"}, done
        assert worker.poll() is None, stack.log("w1.log")[-4000:]
        # the turns it held finished; the two Redis lost with its data were handed out again
        ended = wait_for_status(stack, first, {"succeeded", "failed"}, timeout=120, what="the ten turns")
        assert set(ended.values()) == {"succeeded"}, ended
        for thread in followers:
            thread.join(timeout=60)
        assert sorted(ends) == sorted(t for t in first for _ in range(FOLLOWERS))
        assert worker.poll() is None
    log = stack.log("w1.log")
    assert "Unrecoverable error" not in log and "CRITICAL" not in log, log[-4000:]
    assert "_connparams" not in log, log[-4000:]  # the incident's path
    assert "Connection to broker lost" in log and "unacknowledged message(s)" in log
    assert log.count("Connected to config.broker:Transport") == 2  # at the start, and after the outage
    assert_logs_exact(stack, first + second)
    print(
        f"\n{len(held)} turns held at the stop; new turns answered {taken_s:.1f} s after Redis returned; "
        f"{len(drops)} follower stream(s) cut and opened again"
    )
    print("--- worker log (its own lines; tracebacks left out) ---")
    print("\n".join(line for line in log.splitlines() if line.startswith("[")))

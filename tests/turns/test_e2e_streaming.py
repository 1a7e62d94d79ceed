"""End to end: a real daphne and real Celery workers (threads pool) against the
machine's PostgreSQL and Redis, a stub LLM over HTTP, and a real websocket client.

A turn that counts four labels with a slow tool runs on worker 1; worker 1 is
SIGKILLed inside the turn's third LLM call; the sweeper marks the turn
interrupted; it is resumed and worker 2 finishes it. The watcher (which also
reconnects once with ``after=``) must see seqs 1..N exactly once, the
database must hold the same, and each recorded ``count`` call must have run
exactly once.

Runs in its own freshly migrated PostgreSQL database, so it does not depend
on which database the rest of the suite uses.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentlab.testing.net import free_port, port_open
from agentlab.testing.stub_llm import StubLLMServer, StubReply, final_answer_reply, tool_call_reply
from tests.api_support import session_turn_script
from tests.redis_support import BROKER_URL, LAYER_URL, REDIS

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PG = ("127.0.0.1", 5432)

SETUP = session_turn_script("e2e-owner", title="e2e", question="Count a, b, c and d, then say done.")

RESUME = """
import sys, django
django.setup()
from turns.services import turn_resume_and_enqueue
print(turn_resume_and_enqueue(turn_id=int(sys.argv[1])).status)
"""

LABELS = ["a", "b", "c", "d"]


def psql(dbname: str, sql: str, *params: object) -> list[tuple]:
    import psycopg

    with psycopg.connect(host=PG[0], port=PG[1], user="postgres", dbname=dbname, autocommit=True) as conn:
        cur = conn.execute(sql, params or None)
        return cur.fetchall() if cur.description else []


class StubScript:
    """Asks for ``count`` once per label, then answers. Which step the turn is at
    is read from the request (the number of tool results so far), so a resumed
    turn gets the right reply. The first time the third step is asked for, the
    reply is slow and ``third_call`` is set: the moment to kill the worker."""

    def __init__(self) -> None:
        self.third_call = threading.Event()

    def __call__(self, body: dict[str, Any]) -> StubReply | dict[str, Any]:
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        if done < len(LABELS):
            delay = 0.3
            if done == 2 and not self.third_call.is_set():
                self.third_call.set()
                delay = 30.0
            return tool_call_reply("count", {"label": LABELS[done]}, usage=(10 + done, 3), delay=delay)
        return final_answer_reply(
            "done", "counted four labels", "one count per label", usage=(20, 5), delay=0.3
        )


@pytest.fixture
def e2e_env(tmp_path):
    if not port_open(*PG):
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    if not port_open(*REDIS):
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")
    dbname = f"agentlab_e2e_{uuid.uuid4().hex[:8]}"
    psql("postgres", f'CREATE DATABASE "{dbname}"')
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTLAB_", "DJANGO_", "CELERY_"))},
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{dbname}",
        "REDIS_URL": LAYER_URL,
        "CELERY_BROKER_URL": BROKER_URL,
        # a queue of our own: other runs sharing this broker neither take our turn nor give us theirs
        "CELERY_TASK_DEFAULT_QUEUE": f"e2e-{dbname}",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "HEARTBEAT_S": "0.5",
        "TURN_STALE_S": "2",
        "AGENTLAB_PLUGINS": "count",
        "AGENTLAB_REVIEW": "0",  # this test is about crash-resume streaming; its stub has no reviewer
        "AGENTLAB_TEST_COUNT_FILE": str(tmp_path / "count.txt"),
        "AGENTLAB_TEST_COUNT_DELAY_S": "0.5",
        "PYTHONUNBUFFERED": "1",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=120
    )
    # Turn ids far from other databases' ids: the channel layer's group names
    # (turn.<id>) are shared by everyone using this Redis.
    psql(dbname, f"ALTER SEQUENCE turns_turn_id_seq RESTART WITH {random.randint(10**6, 10**9)}")
    procs: list[subprocess.Popen] = []

    def start(*args: str, log: str) -> subprocess.Popen:
        with open(tmp_path / log, "w") as out:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(list(args), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield {"env": env, "dbname": dbname, "start": start, "tmp": tmp_path}
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    psql("postgres", f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def worker(e2e_env, name: str) -> subprocess.Popen:
    return e2e_env["start"](
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "--pool",
        "threads",
        "--concurrency",
        "4",
        "--loglevel",
        "INFO",
        "--hostname",
        f"{name}@e2e",
        "--without-gossip",
        "--without-mingle",
        log=f"{name}.log",
    )


def turn_row(dbname: str, turn_id: int) -> dict:
    ((status, outcome, answer, last_seq),) = psql(
        dbname, "SELECT status, outcome, answer, last_seq FROM turns_turn WHERE id = %s", turn_id
    )
    return {"status": status, "outcome": outcome, "answer": answer, "last_seq": last_seq}


async def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_turn_survives_a_killed_worker_and_streams_exactly_once(e2e_env):
    from websockets.asyncio.client import connect
    from websockets.typing import Origin

    env, dbname, tmp = e2e_env["env"], e2e_env["dbname"], e2e_env["tmp"]
    script = StubScript()
    with StubLLMServer(script) as stub:
        env["AGENTLAB_LLM_BASE_URL"] = stub.base_url
        env["AGENTLAB_MODEL"] = "stub-model"
        port = free_port()
        e2e_env["start"](
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "config.asgi:application",
            log="daphne.log",
        )
        first_worker = worker(e2e_env, "worker1")
        await wait_until(lambda: port_open("127.0.0.1", port), 30, "daphne")

        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", SETUP],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        setup = json.loads(out.stdout.strip().splitlines()[-1])
        turn_id = setup["turn"]

        received: list[dict] = []
        ends: list[dict] = []

        async def watch(after: int | None, stop_after_interrupt: bool) -> None:
            url = f"ws://127.0.0.1:{port}/ws/turns/{turn_id}/" + (
                f"?after={after}" if after is not None else ""
            )
            async with connect(
                url,
                origin=Origin(f"http://127.0.0.1:{port}"),
                additional_headers={"Cookie": f"sessionid={setup['session']}"},
            ) as ws:
                async for raw in ws:
                    frame = json.loads(raw)
                    if frame["type"] == "heartbeat":
                        assert "seq" not in frame
                        continue
                    if frame["type"] == "stream.end":
                        ends.append(frame)
                        continue
                    received.append(frame)
                    if stop_after_interrupt and frame["type"] == "turn.interrupted":
                        return  # drop the connection; come back with after=<last seq>
                assert ws.close_code == 1000

        async def kill_worker_in_third_llm_call() -> None:
            await asyncio.to_thread(script.third_call.wait, 60)
            assert script.third_call.is_set(), "the turn never reached its third LLM call"
            first_worker.send_signal(signal.SIGKILL)
            first_worker.wait(timeout=10)
            # The sweeper (``manage.py sweep_turns``, as cron runs it) marks the
            # turn interrupted once its heartbeat is TURN_STALE_S (2 s) old.
            deadline = time.monotonic() + 30
            while turn_row(dbname, turn_id)["status"] != "interrupted":
                assert time.monotonic() < deadline, "the sweeper never marked the turn interrupted"
                await asyncio.sleep(0.5)
                await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "manage.py", "sweep_turns"],
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    timeout=60,
                    check=True,
                )

        killer = asyncio.create_task(kill_worker_in_third_llm_call())
        await asyncio.wait_for(asyncio.gather(watch(None, True), killer), timeout=90)
        assert first_worker.returncode == -signal.SIGKILL
        assert turn_row(dbname, turn_id)["status"] == "interrupted"

        # Resume it, start a new worker, and follow from the last seq seen.
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", RESUME, str(turn_id)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert out.stdout.strip() == "queued"
        worker(e2e_env, "worker2")
        await asyncio.wait_for(watch(received[-1]["seq"], False), timeout=90)

    seqs = [f["seq"] for f in received]
    assert seqs == list(range(1, len(seqs) + 1)), "client saw a gap or a duplicate"
    rows = psql(
        dbname, "SELECT seq, type, data FROM turns_turnevent WHERE turn_id = %s ORDER BY seq", turn_id
    )
    assert [r[0] for r in rows] == seqs
    assert [r[1] for r in rows] == [f["type"] for f in received]
    row = turn_row(dbname, turn_id)
    assert (row["status"], row["outcome"], row["answer"], row["last_seq"]) == (
        "succeeded",
        "answered",
        "done",
        len(seqs),
    )
    assert ends == [{"type": "stream.end", "status": "succeeded"}]
    types = [r[1] for r in rows]
    assert types.count("turn.interrupted") == 1 and types.count("turn.resumed") == 1
    assert types.count("turn.started") == 2

    count_calls = [
        r[2]["call"]["arguments"]["label"]
        for r in rows
        if r[1] == "tool.call" and r[2]["call"]["name"] == "count"
    ]
    ran = (tmp / "count.txt").read_text().split()
    assert count_calls == LABELS
    assert sorted(ran) == sorted(count_calls), "the counting tool ran other than once per recorded call"

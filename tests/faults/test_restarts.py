"""Fault tests: a private PostgreSQL and a private Redis restarted under a
running Celery worker (threads pool) with turns in flight, ``run_eval``
across a database restart, and a worker killed between a tool's effect and
the commit of its result.

What must hold: every turn ends terminal or resumable (interrupted, never
failed, for an outage), the next turns succeed without restarting the
worker, no event is lost or doubled (each log's seqs are 1..last_seq and
each tool call has at most one result), ``run_eval`` exits 75 with a
resume command that resumes to exactly one prediction per example, and a
resumed tool call gets the same idempotency key.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from agentlab.testing.stub_llm import StubLLMServer, StubReply, final_answer_reply, tool_call_reply

from .servers import ROOT, Stack, wait_until

pytestmark = pytest.mark.faults

START_TURNS = """
import json, sys
from django.contrib.auth import get_user_model
from turns.models import Conversation
from turns.services import turn_start
user, _ = get_user_model().objects.get_or_create(username="faults")
ids = []
for i in range(int(sys.argv[1])):
    conversation = Conversation.objects.create(owner=user, title=f"faults {i}")
    ids.append(turn_start(conversation=conversation, question=sys.argv[2], acting_user=user).pk)
print(json.dumps(ids))
"""

RESUME = """
import sys
from turns.services import turn_resume_and_enqueue
for turn_id in sys.argv[1:]:
    print(turn_resume_and_enqueue(turn_id=int(turn_id)).status)
"""

ENDED = {"succeeded", "failed", "cancelled", "interrupted"}


def tools_done(body: dict[str, Any]) -> int:
    """How many tool results the request carries: the step a turn is at."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "tool")


def calculating(*, steps: int, delay: float):
    """A stub LLM that asks for ``steps`` calculator calls, then answers ``done``."""

    def handler(body: dict[str, Any]) -> StubReply:
        done = tools_done(body)
        if done < steps:
            return tool_call_reply("calculator", {"expression": f"{done} + 1"}, delay=delay)
        return final_answer_reply("done", "the calculator", "counted", delay=delay)

    return handler


def start_turns(stack: Stack, count: int, question: str = "Add one, three times.") -> list[int]:
    return json.loads(stack.django(START_TURNS, str(count), question).strip().splitlines()[-1])


def statuses(stack: Stack, ids: list[int]) -> dict[int, str]:
    rows = stack.sql("SELECT id, status FROM turns_turn WHERE id = ANY(%s)", ids)
    return {turn_id: status for turn_id, status in rows}


def wait_for_status(stack: Stack, ids: list[int], allowed: set[str], *, timeout: float, what: str) -> dict:
    wait_until(lambda: set(statuses(stack, ids).values()) <= allowed, timeout=timeout, what=what)
    return statuses(stack, ids)


def assert_logs_exact(stack: Stack, ids: list[int]) -> None:
    """No event lost or doubled: seqs 1..last_seq with no gap, and at most one
    ``tool.result`` per tool call and attempt."""
    for turn_id in ids:
        ((last_seq,),) = stack.sql("SELECT last_seq FROM turns_turn WHERE id = %s", turn_id)
        rows = stack.sql(
            "SELECT seq, type, data FROM turns_turnevent WHERE turn_id = %s ORDER BY seq", turn_id
        )
        assert [r[0] for r in rows] == list(range(1, last_seq + 1)), f"turn {turn_id}: a gap in its log"
        results = [(r[2].get("attempt"), r[2]["result"]["call_id"]) for r in rows if r[1] == "tool.result"]
        assert len(results) == len(set(results)), f"turn {turn_id}: a tool call has two results"


def test_a_worker_survives_a_database_restart_with_turns_in_flight(stack):
    with StubLLMServer(calculating(steps=3, delay=0.7)) as stub:
        stack.env.update(AGENTLAB_LLM_BASE_URL=stub.base_url, HEARTBEAT_S="1", TURN_STALE_S="8")
        worker = stack.worker("w1", concurrency=8)
        first = start_turns(stack, 6)
        wait_until(
            lambda: (
                len(stack.sql("SELECT 1 FROM turns_turn WHERE id = ANY(%s) AND last_seq >= 5", first)) == 6
            ),
            timeout=60,
            what="six turns in flight",
        )
        stack.pg.restart(down_s=1.0)

        ended = wait_for_status(stack, first, ENDED, timeout=60, what="the turns in flight to end or stop")
        assert "failed" not in ended.values(), ended  # an outage interrupts, it does not fail
        # no worker restart: the next turns run on the same worker
        second = start_turns(stack, 4)
        assert set(
            wait_for_status(stack, second, {"succeeded", "failed"}, timeout=60, what="new turns").values()
        ) == {"succeeded"}
        assert worker.poll() is None, stack.log("w1.log")[-3000:]

        interrupted = [t for t, s in ended.items() if s == "interrupted"]
        if interrupted:
            assert stack.django(RESUME, *map(str, interrupted)).split() == ["queued"] * len(interrupted)
        resumed = wait_for_status(stack, first, {"succeeded", "failed"}, timeout=60, what="resumed turns")
        assert set(resumed.values()) == {"succeeded"}
    assert_logs_exact(stack, first + second)
    print(f"\nafter the restart: {len(interrupted)} of 6 turns interrupted, the rest answered; all answered")


def test_a_worker_survives_two_redis_restarts(stack):
    with StubLLMServer(calculating(steps=3, delay=0.7)) as stub:
        stack.env.update(AGENTLAB_LLM_BASE_URL=stub.base_url, HEARTBEAT_S="1", TURN_STALE_S="8")
        worker = stack.worker("w1", concurrency=4)
        first = start_turns(stack, 4)
        wait_until(
            lambda: set(statuses(stack, first).values()) == {"running"}, timeout=60, what="four running turns"
        )
        stack.redis.restart(down_s=1.0)
        time.sleep(3)
        stack.redis.restart(down_s=1.0)
        # the turns in flight need the broker no more: they finish; doorbells
        # lost meanwhile are made up by the streams' heartbeat reads
        done = wait_for_status(stack, first, {"succeeded", "failed"}, timeout=60, what="turns in flight")
        assert set(done.values()) == {"succeeded"}
        second = start_turns(stack, 3)
        done = wait_for_status(
            stack, second, {"succeeded", "failed"}, timeout=90, what="turns after the restarts"
        )
        assert set(done.values()) == {"succeeded"}
        assert worker.poll() is None, stack.log("w1.log")[-3000:]
    assert_logs_exact(stack, first + second)


def test_run_eval_across_a_database_restart_exits_75_and_resumes_to_one_prediction_each(stack):
    examples = 12
    dataset = stack.tmp / "sums.jsonl"
    dataset.write_text(
        "".join(
            json.dumps(
                {
                    "question_id": f"q{i}",
                    "question": f"What is {i} + 1?",
                    "answer": str(i + 1),
                    "task_type": "math",
                }
            )
            + "\n"
            for i in range(examples)
        )
    )

    def answer(body: dict[str, Any]) -> StubReply:
        question = next(m["content"] for m in body["messages"] if m.get("role") == "user")
        n = int(re.search(r"What is (\d+) \+ 1", question).group(1))
        return final_answer_reply(str(n + 1), "arithmetic", "added one", delay=0.4)

    run_id = "fault run 'one'"  # a space and quotes: the printed command must quote them
    with StubLLMServer(answer) as stub:
        stack.env.update(AGENTLAB_LLM_BASE_URL=stub.base_url)
        command = [
            "manage.py",
            "run_eval",
            str(dataset),
            "--run-id",
            run_id,
            "--concurrency",
            "3",
            "--no-review",
        ]
        first = stack.start(sys.executable, *command, log="run1.log")
        completed = (
            "SELECT count(*) FROM evaluation_prediction p JOIN evaluation_run r ON r.id = p.run_id "
            "WHERE r.run_id = %s AND p.completed_at IS NOT NULL"
        )
        wait_until(lambda: stack.sql(completed, run_id)[0][0] >= 3, timeout=60, what="three predictions")
        stack.pg.restart(down_s=2.0)
        assert first.wait(timeout=90) == 75, stack.log("run1.log")[-3000:]
        output = stack.log("run1.log")
        resume_line = output.strip().splitlines()[-1].strip()
        argv = shlex.split(resume_line)
        # the same command with the run id, each word quoted for the shell
        assert argv[1:] == command, resume_line
        assert "the database failed mid-run" in output
        done_before = stack.sql(completed, run_id)[0][0]
        assert done_before < examples

        second = subprocess.run(argv, cwd=ROOT, env=stack.env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr[-3000:]
    rows = stack.sql(
        "SELECT e.external_id, p.completed_at IS NOT NULL, p.correct, t.status FROM evaluation_prediction p "
        "JOIN evaluation_run r ON r.id = p.run_id JOIN evaluation_example e ON e.id = p.example_id "
        "JOIN turns_turn t ON t.id = p.turn_id WHERE r.run_id = %s",
        run_id,
    )
    assert sorted(r[0] for r in rows) == sorted(f"q{i}" for i in range(examples))  # one each, none twice
    assert all(r[1] and r[2] and r[3] == "succeeded" for r in rows), rows
    print(f"\nrun_eval: exit 75 after {done_before} of {examples} predictions; resumed with: {resume_line}")


def test_32_turns_with_1s_heartbeats_for_30s_cause_no_deadlock(stack):
    started = time.monotonic()

    def handler(body: dict[str, Any]) -> StubReply:
        # tool calls (events appended) for 30 s, then the answer
        if time.monotonic() - started < 30:
            return tool_call_reply("calculator", {"expression": "2 + 2"}, delay=0.5)
        return final_answer_reply("4", "the calculator", "added", delay=0.1)

    log_start = len(stack.pg.log_text())
    with StubLLMServer(handler) as stub:
        stack.env.update(
            AGENTLAB_LLM_BASE_URL=stub.base_url, HEARTBEAT_S="1", TURN_STALE_S="30", AGENTLAB_MAX_STEPS="200"
        )
        stack.worker("w1", concurrency=32)
        ids = start_turns(stack, 32)
        started = time.monotonic()
        done = wait_for_status(stack, ids, {"succeeded", "failed", "cancelled"}, timeout=110, what="32 turns")
    log = stack.pg.log_text()[log_start:]
    assert set(done.values()) == {"succeeded"}, done
    assert "deadlock detected" not in log, log[-5000:]
    events = stack.sql("SELECT count(*) FROM turns_turnevent WHERE turn_id = ANY(%s)", ids)[0][0]
    waits = log.count("still waiting for")
    print(
        f"\n32 turns, HEARTBEAT_S=1, {time.monotonic() - started:.0f} s: {events} events, "
        f"0 deadlocks, {waits} lock waits over 200 ms"
    )
    assert_logs_exact(stack, ids)


def test_a_kill_between_a_tools_effect_and_its_result_reuses_the_idempotency_key(stack):
    count_file = stack.tmp / "count.txt"

    def handler(body: dict[str, Any]) -> StubReply:
        if tools_done(body) == 0:
            return tool_call_reply("count", {"label": "a"}, id="call_count_a", delay=0.2)
        return final_answer_reply("counted", "the count tool", "once", delay=0.2)

    with StubLLMServer(handler) as stub:
        stack.env.update(
            AGENTLAB_LLM_BASE_URL=stub.base_url,
            HEARTBEAT_S="0.5",
            TURN_STALE_S="2",
            AGENTLAB_PLUGINS="count",
            AGENTLAB_TEST_COUNT_FILE=str(count_file),
            AGENTLAB_TEST_COUNT_IDEMPOTENT="1",
            AGENTLAB_TEST_COUNT_AFTER_S="60",  # the effect is done; the result waits
        )
        first = stack.worker("w1", concurrency=2)
        (turn_id,) = start_turns(stack, 1, "Count a.")
        wait_until(
            lambda: count_file.exists() and count_file.read_text() == "a\n", timeout=60, what="the effect"
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        assert not stack.sql(
            "SELECT 1 FROM turns_turnevent WHERE turn_id = %s AND type = 'tool.result'", turn_id
        )

        def swept() -> bool:
            subprocess.run(
                [sys.executable, "manage.py", "sweep_turns"],
                cwd=ROOT, env=stack.env, capture_output=True, timeout=60, check=True,
            )  # fmt: skip
            return statuses(stack, [turn_id])[turn_id] == "interrupted"

        wait_until(swept, timeout=30, what="the sweeper to mark the turn interrupted", every=0.5)
        assert stack.django(RESUME, str(turn_id)).split() == ["queued"]
        stack.worker("w2", concurrency=2)
        assert wait_for_status(
            stack, [turn_id], {"succeeded", "failed"}, timeout=60, what="the resumed turn"
        ) == {turn_id: "succeeded"}
    started = [
        data
        for (data,) in stack.sql(
            "SELECT data FROM turns_turnevent WHERE turn_id = %s AND type = 'tool.started' ORDER BY seq",
            turn_id,
        )
    ]
    key = f"turn-{turn_id}/attempt-1/call_count_a"
    assert [(d["call_id"], d["idempotency_key"], d["repeat"]) for d in started] == [
        ("call_count_a", key, False),
        ("call_count_a", key, True),
    ]
    calls = count_file.with_name("count.txt.calls").read_text().splitlines()
    assert calls == [f"a {key} first", f"a {key} may-have-run"]  # the same key, and the tool was told
    assert count_file.read_text() == "a\n"  # the idempotent tool had its effect once
    assert_logs_exact(stack, [turn_id])

"""Traces from short-lived Celery children (issue 47, item 5): a worker
``--pool prefork --max-tasks-per-child 1`` with ``OTEL_EXPORTER_OTLP_ENDPOINT``
set exports every turn's spans — each child flushes its tracer as it exits
(``worker_process_shutdown``), bounded by a timeout — to a real OTLP/HTTP
receiver, through real PostgreSQL and Redis (the private servers of the
fault tests). The batch processor's own schedule is set to 60 s, so nothing
but the flush at exit can export a child's spans before it is gone."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from agentlab.testing.otlp_receiver import OTLPReceiver
from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply

from .servers import Stack, wait_until
from .test_restarts import start_turns, wait_for_status

pytestmark = pytest.mark.faults

TURNS = 8


def test_every_turn_s_spans_leave_a_prefork_child_that_exits_after_one_task(stack: Stack) -> None:
    receiver = OTLPReceiver().start()
    try:
        with StubLLMServer(lambda body: final_answer_reply("4", "sums", "2+2")) as stub:
            stack.env.update(
                AGENTLAB_LLM_BASE_URL=stub.base_url,
                OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                OTEL_SERVICE_NAME="agentlab-prefork",
                OTEL_BSP_SCHEDULE_DELAY="60000",
            )
            worker = stack.start(
                sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "prefork",
                "--concurrency", "2", "--max-tasks-per-child", "1", "--loglevel", "INFO",
                "--hostname", "prefork@faults", "--without-gossip", "--without-mingle",
                log="prefork.log",
            )  # fmt: skip
            turns = start_turns(stack, TURNS, "What is 2+2?")
            done = wait_for_status(stack, turns, {"succeeded", "failed"}, timeout=120, what="eight turns")
            assert set(done.values()) == {"succeeded"}, done
            # every child ran one task and exited: its spans were exported on the way out
            wait_until(
                lambda: (
                    len({s.attributes.get("agentlab.turn.id") for s in receiver.by_name("agentlab.turn")})
                    == TURNS
                ),
                timeout=30,
                what="the eight turns' root spans at the receiver",
            )
            assert worker.poll() is None, stack.log("prefork.log")[-3000:]
        roots = receiver.by_name("agentlab.turn")
        assert sorted(s.attributes["agentlab.turn.id"] for s in roots) == sorted(turns)
        assert {s.service for s in roots} == {"agentlab-prefork"}
        per_trace = Counter(s.trace_id for s in receiver.spans)
        assert len(per_trace) == TURNS and all(
            n >= 2 for n in per_trace.values()
        )  # the turn and its LLM call
        assert "Traceback" not in stack.log("prefork.log"), stack.log("prefork.log")[-3000:]
    finally:
        receiver.stop()

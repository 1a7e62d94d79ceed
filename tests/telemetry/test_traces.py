"""Turns exported as OpenTelemetry traces, checked through a real OTLP/HTTP
receiver (agentlab/testing/otlp_receiver.py): the span tree, the GenAI
semantic-convention attributes, content only when asked, and an exporter
that fails or blocks never failing or holding up a turn."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from agentlab.agent.providers.scripted import ScriptedProvider, final
from agentlab.telemetry import flush_tracing, reset_tracing
from agentlab.testing.net import free_port
from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, tool_call_reply
from turns.driver import EVALUATION, drive_turn
from turns.driver.extensions import Subject
from turns.models import Conversation, Turn, TurnKind
from turns.services import turn_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("stream_settings")]

CHAT_REPLIES = [
    tool_call_reply("calculator", {"expression": "2+3"}, usage=(20, 5)),
    final_answer_reply("5", "calc", "2+3", usage=(30, 6)),
]


def chat_turn(owner, settings, replies, question="What is 2+3?") -> Turn:
    """One chat turn driven by the Celery task against the stub server."""
    from turns.jobs.tasks import turn_run

    with StubLLMServer.script(replies) as stub:
        settings.AGENTLAB_LLM_BASE_URL = stub.base_url
        settings.AGENTLAB_MODEL = "stub-model"
        conversation = Conversation.objects.create(owner=owner)
        turn = turn_create(owner=owner, question=question, conversation=conversation)
        turn_run.apply(args=(turn.pk,), task_id=f"task-{turn.pk}")
    turn.refresh_from_db()
    return turn


def wait_for_spans(receiver, count: int, timeout: float = 10.0) -> None:
    assert flush_tracing(timeout)
    deadline = time.monotonic() + timeout
    while len(receiver.spans) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_chat_turn_is_a_trace_of_its_attempt_llm_calls_and_tool_calls(owner, settings, tracing):
    turn = chat_turn(owner, settings, CHAT_REPLIES)
    assert (turn.status, turn.answer) == ("succeeded", "5")
    wait_for_spans(tracing, 6)

    [root] = tracing.by_name("agentlab.turn")
    assert root.parent_id == "" and root.service == "agentlab-test"
    assert root.attributes["agentlab.turn.id"] == turn.pk
    assert root.attributes["agentlab.conversation.id"] == turn.conversation_id
    assert root.attributes["gen_ai.conversation.id"] == str(turn.conversation_id)
    assert root.attributes["agentlab.turn.kind"] == "chat"
    assert (root.attributes["agentlab.turn.outcome"], root.attributes["agentlab.turn.stop_reason"]) == (
        "answered",
        "final",
    )
    [attempt] = tracing.by_name("agentlab.attempt")
    assert (attempt.parent_id, attempt.trace_id) == (root.span_id, root.trace_id)
    assert attempt.attributes["agentlab.attempt.number"] == 1

    chats = sorted(tracing.by_name("chat stub-model"), key=lambda s: s.start_ns)
    assert len(chats) == 2
    assert {s.parent_id for s in chats} == {attempt.span_id}
    assert chats[0].kind == 3  # SPAN_KIND_CLIENT
    first = chats[0].attributes
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == first["gen_ai.system"] == "openai"
    assert first["gen_ai.request.model"] == "stub-model"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (20, 5)
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chats[1].attributes["gen_ai.usage.output_tokens"] == 6

    [calculator] = tracing.by_name("execute_tool calculator")
    assert calculator.parent_id == attempt.span_id
    assert calculator.attributes["gen_ai.operation.name"] == "execute_tool"
    assert calculator.attributes["gen_ai.tool.name"] == "calculator"
    assert calculator.attributes["gen_ai.tool.call.id"]
    assert chats[0].end_ns <= calculator.start_ns <= calculator.end_ns <= chats[1].start_ns
    [answer] = tracing.by_name("execute_tool final_answer")
    assert answer.parent_id == attempt.span_id
    assert root.start_ns <= attempt.start_ns and attempt.end_ns <= root.end_ns

    content_keys = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments"}
    assert not any(content_keys & span.attributes.keys() for span in tracing.spans)
    assert not any("2+3" in json.dumps(span.attributes) for span in tracing.spans)
    assert set(tracing.content_types) == {"application/x-protobuf"}


def test_content_is_on_the_spans_only_with_the_capture_flag(owner, settings, tracing, telemetry_env):
    telemetry_env["AGENTLAB_OTEL_CAPTURE_CONTENT"] = "true"
    reset_tracing()
    chat_turn(owner, settings, CHAT_REPLIES, question="What is 2+3, please?")
    wait_for_spans(tracing, 6)

    first = min(tracing.by_name("chat stub-model"), key=lambda s: s.start_ns).attributes
    messages = json.loads(first["gen_ai.input.messages"])
    assert messages[-1] == {"role": "user", "content": "What is 2+3, please?"}
    output = json.loads(first["gen_ai.output.messages"])
    assert output[0]["parts"][0]["name"] == "calculator"
    [calculator] = tracing.by_name("execute_tool calculator")
    assert json.loads(calculator.attributes["gen_ai.tool.call.arguments"]) == {"expression": "2+3"}
    assert calculator.attributes["gen_ai.tool.call.result"] == "5"


async def test_an_evaluation_turn_carries_its_run_and_example(owner, db_threads, tracing):
    turn = await db_threads.run(turn_create, owner=owner, question="q", kind=TurnKind.EVALUATION)
    provider = ScriptedProvider([final("42", usage=(11, 3))])
    subject = Subject(example={"question_id": "ex-7"}, run_id="run-abc", dataset="d")
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads, subject=subject)
    assert result is not None and result.outcome == "answered"
    await asyncio.to_thread(wait_for_spans, tracing, 4)

    [root] = tracing.by_name("agentlab.turn")
    assert root.attributes["agentlab.run.id"] == "run-abc"
    assert root.attributes["agentlab.example.id"] == "ex-7"
    assert root.attributes["agentlab.turn.kind"] == "evaluation"
    [chat] = [s for s in tracing.spans if s.name.startswith("chat")]
    assert chat.attributes["gen_ai.provider.name"] == "scripted"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 11


async def test_a_failed_turn_is_an_error_span_with_its_stop_reason(owner, db_threads, tracing):
    from agentlab.agent.types import ProviderError

    turn = await db_threads.run(turn_create, owner=owner, question="q", kind=TurnKind.EVALUATION)
    provider = ScriptedProvider([ProviderError("no quota", transient=False, kind="insufficient_quota")])
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads)
    assert result is not None and result.stop_reason == "provider_error"
    await asyncio.to_thread(wait_for_spans, tracing, 3)

    [root] = tracing.by_name("agentlab.turn")
    assert root.status_code == 2 and root.attributes["error.type"] == "provider_error"
    [chat] = [s for s in tracing.spans if s.name.startswith("chat")]
    assert chat.status_code == 2 and chat.attributes["error.type"] == "insufficient_quota"


def test_an_export_endpoint_that_is_down_fails_no_turn_and_is_logged_once(
    owner, settings, telemetry_env, caplog
):
    telemetry_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"  # nothing listens
    telemetry_env["OTEL_EXPORTER_OTLP_TIMEOUT"] = "1"
    telemetry_env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    reset_tracing()
    with caplog.at_level(logging.WARNING, logger="agentlab.telemetry.tracing"):
        for _ in range(2):
            turn = chat_turn(owner, settings, CHAT_REPLIES)
            assert (turn.status, turn.answer) == ("succeeded", "5")
            flush_tracing(5)  # its batch was tried (and failed) before the next turn
    warnings = [r for r in caplog.records if r.name == "agentlab.telemetry.tracing"]
    assert len(warnings) == 1 and "exporting spans to" in warnings[0].getMessage()
    sdk = [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    assert len(sdk) <= 1  # the SDK's own line for each failed batch, once


def test_a_turn_finishes_while_the_exporter_is_blocked(owner, settings, tracing, telemetry_env):
    telemetry_env["OTEL_EXPORTER_OTLP_TIMEOUT"] = "30"
    reset_tracing()
    tracing.hold()  # the collector takes each request and answers none
    chat_turn(owner, settings, CHAT_REPLIES)
    deadline = time.monotonic() + 10
    while tracing.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tracing.waiting == 1  # the exporter's thread is blocked in its request

    started = time.monotonic()
    turn = chat_turn(owner, settings, CHAT_REPLIES)
    took = time.monotonic() - started
    assert (turn.status, turn.answer) == ("succeeded", "5")
    assert tracing.waiting == 1 and not tracing.spans  # still blocked: the turn did not wait for it
    assert took < 30 / 3  # far inside the exporter's 30 s timeout
    tracing.release()
    wait_for_spans(tracing, 12)
    assert len(tracing.by_name("agentlab.turn")) == 2


def test_the_tracer_is_set_up_once_per_process(tracing, telemetry_env):
    from agentlab.telemetry import telemetry_start
    from agentlab.telemetry.tracing import tracer

    telemetry_start()  # daphne's start, a Celery worker's ready, run_eval's start
    first = tracer()
    telemetry_start()
    assert first is not None and tracer() is first
    telemetry_env["OTEL_SDK_DISABLED"] = "true"  # the standard switch turns it off
    reset_tracing()
    assert tracer() is None

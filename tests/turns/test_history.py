"""A conversation's turns given the turns before them (issue 41), driven by
the real driver against the stub OpenAI-compatible LLM over HTTP: what the
second turn's request holds, the budget, the ``history`` event, and that a
resume and a retry send the same requests byte for byte."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from agentlab.agent.history import MESSAGE_OVERHEAD_TOKENS
from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.testing.stub_llm import (
    StubLLMServer,
    StubReply,
    context_length_exceeded,
    error_reply,
    final_answer_reply,
    last_user_text,
    text_reply,
    tool_call_reply,
)
from turns.driver import CHAT, drive_turn
from turns.driver import record as record_module
from turns.llm_calls import turn_llm_calls
from turns.models import Conversation, Turn, TurnEvent
from turns.services import (
    conversation_create,
    turn_cancel,
    turn_create,
    turn_interrupt,
    turn_resume,
    turn_retry,
)

pytestmark = pytest.mark.django_db(transaction=True)


def asks_model(body: dict[str, Any]) -> StubReply:
    """The calculator for "What is 6*7?"; "double it" doubles the last number
    the assistant said earlier in the conversation (only the history has it),
    else says it cannot know; a question with "story" gets a long answer."""
    messages = body.get("messages") or []
    question = last_user_text(body)
    after_question = messages[max(i for i, m in enumerate(messages) if m.get("role") == "user") :]
    if any(m.get("role") == "tool" for m in after_question):
        return final_answer_reply("42", "calculator: 6*7 = 42", "multiplied")
    if question.startswith("What is 6*7"):
        return tool_call_reply("calculator", {"expression": "6*7"})
    if question == "double it":
        said = [m["content"] for m in messages if m.get("role") == "assistant" and m.get("content")]
        numbers = re.findall(r"-?\d+", said[-1]) if said else []
        return final_answer_reply(str(2 * int(numbers[-1])) if numbers else "double what?")
    if "story" in question:
        return final_answer_reply("once upon a time " * 40)
    return final_answer_reply("ok")


@pytest.fixture
def stub():
    with StubLLMServer(asks_model) as server:
        yield server


@pytest.fixture
async def provider(stub):
    made = OpenAICompatibleProvider(base_url=stub.base_url, api_key="x", model="stub-model")
    yield made
    await made.aclose()


async def ask(db_threads, conversation, question: str, provider) -> Turn:
    turn = await db_threads.run(
        turn_create, owner=conversation.owner, question=question, conversation=conversation
    )
    await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    return await db_threads.run(Turn.objects.get, pk=turn.pk)


async def history_event(db_threads, turn: Turn) -> TurnEvent:
    events = await db_threads.run(lambda: list(TurnEvent.objects.filter(turn_id=turn.pk, type="history")))
    assert len(events) == 1
    return events[0]


async def test_the_second_turn_s_request_holds_the_first_question_and_answer(
    owner, db_threads, stub, provider
):
    conversation = await db_threads.run(conversation_create, owner=owner)
    first = await ask(db_threads, conversation, "What is 6*7?", provider)
    assert first.answer == "42"
    assert not await db_threads.run(TurnEvent.objects.filter(turn_id=first.pk, type="history").exists)
    before = len(stub.requests)

    second = await ask(db_threads, conversation, "double it", provider)

    assert second.answer == "84"  # answered from the history
    request = stub.requests[before]
    assert [(m["role"], m["content"]) for m in request["messages"][1:]] == [
        ("user", "What is 6*7?"),
        ("assistant", "42"),
        ("user", "double it"),
    ]
    event = await history_event(db_threads, second)
    data = event.data
    assert (data["mode"], data["turns"], data["dropped"], data["counted"]) == (
        "answers",
        [first.pk],
        [],
        "estimate",
    )
    assert data["messages"] == request["messages"][1:3]
    assert data["tokens"] == (4 + 8) + (1 + 8)  # 12 and 2 characters, three to a token, plus the framing
    assert data["window"] == 8192 and data["reply_tokens"] == 512 and 0 < data["tokens"] <= data["budget"]
    # written before the first LLM call, and the turn page's rebuilt request holds it
    usage_seqs = await db_threads.run(
        lambda: list(
            TurnEvent.objects.filter(turn_id=second.pk, type="llm.usage").values_list("seq", flat=True)
        )
    )
    assert event.seq < min(usage_seqs)
    calls = await db_threads.run(turn_llm_calls, second.pk)
    assert calls[0].request is not None and calls[0].request["messages"] == request["messages"]


async def test_full_history_carries_the_tool_steps(owner, db_threads, stub, provider):
    conversation = await db_threads.run(conversation_create, owner=owner, history="full")
    first = await ask(db_threads, conversation, "What is 6*7?", provider)
    before = len(stub.requests)
    second = await ask(db_threads, conversation, "double it", provider)

    assert second.answer == "84"
    messages = stub.requests[before]["messages"][1:]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    call = messages[1]["tool_calls"][0]
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "6*7"}'}
    assert call["id"].startswith(f"t{first.pk}_") and messages[2]["tool_call_id"] == call["id"]
    assert messages[2]["content"] == "42" and messages[3]["content"] == "42"
    assert "final_answer" not in json.dumps(messages)  # the answer says it
    assert (await history_event(db_threads, second)).data["mode"] == "full"


async def test_the_setting_decides_when_the_conversation_does_not(
    owner, db_threads, stub, provider, settings
):
    settings.AGENTLAB_CHAT_HISTORY = "full"
    conversation = await db_threads.run(conversation_create, owner=owner)
    await ask(db_threads, conversation, "What is 6*7?", provider)
    second = await ask(db_threads, conversation, "double it", provider)
    assert (await history_event(db_threads, second)).data["mode"] == "full"


async def test_failed_and_cancelled_turns_are_left_out_and_said_so(owner, db_threads, stub, provider):
    conversation = await db_threads.run(conversation_create, owner=owner)
    first = await ask(db_threads, conversation, "What is 6*7?", provider)
    stub.handler = lambda body: error_reply(400, "bad request")
    failed = await ask(db_threads, conversation, "this one fails", provider)
    cancelled = await db_threads.run(
        turn_create, owner=owner, question="never mind", conversation=conversation
    )
    await db_threads.run(turn_cancel, turn_id=cancelled.pk)
    stub.handler = asks_model
    before = len(stub.requests)

    last = await ask(db_threads, conversation, "double it", provider)

    assert failed.status == "failed" and last.answer == "84"
    assert [m["content"] for m in stub.requests[before]["messages"][1:]] == [
        "What is 6*7?",
        "42",
        "double it",
    ]
    data = (await history_event(db_threads, last)).data
    assert data["turns"] == [first.pk]
    assert data["dropped"] == [
        {"turn": failed.pk, "position": 2, "reason": "failed"},
        {"turn": cancelled.pk, "position": 3, "reason": "cancelled"},
    ]


async def test_a_clarifying_question_and_the_reply_to_it_are_history_too(owner, db_threads, stub, provider):
    def booking(body: dict[str, Any]) -> StubReply:
        if last_user_text(body) == "book a table":
            return tool_call_reply("ask_user", {"question": "For how many people?"})
        return final_answer_reply("booked for four")

    stub.handler = booking
    conversation = await db_threads.run(conversation_create, owner=owner)
    asked = await ask(db_threads, conversation, "book a table", provider)
    replied = await ask(db_threads, conversation, "four of us", provider)

    assert (asked.outcome, asked.clarifying_question) == ("asked", "For how many people?")
    assert [(m["role"], m["content"]) for m in stub.requests[-1]["messages"][1:]] == [
        ("user", "book a table"),
        ("assistant", "For how many people?"),
        ("user", "four of us"),
    ]
    assert (await history_event(db_threads, replied)).data["turns"] == [asked.pk]


def server_tokens(body: dict[str, Any]) -> int:
    """The prompt's size as this stub's "server" counts it: as the driver's
    estimate does (three characters a token, the framing per message)."""
    return sum(
        math.ceil(len(m.get("content") or "") / 3)
        + math.ceil(len(json.dumps(m["tool_calls"])) / 3 if m.get("tool_calls") else 0)
        + MESSAGE_OVERHEAD_TOKENS
        for m in body["messages"]
    ) + math.ceil(len(json.dumps(body.get("tools") or [], ensure_ascii=False)) / 3)


async def test_a_long_conversation_drops_its_oldest_turns_within_the_budget(
    owner, db_threads, stub, provider, settings
):
    window = 2048
    settings.AGENTLAB_LLM_CONTEXT_WINDOW = window

    def windowed(body: dict[str, Any]) -> StubReply:
        if server_tokens(body) + body.get("max_tokens", 0) > window:
            return context_length_exceeded(window, server_tokens(body) + body.get("max_tokens", 0))
        return asks_model(body)

    stub.handler = windowed
    conversation = await db_threads.run(conversation_create, owner=owner)
    earlier = [await ask(db_threads, conversation, f"tell me story {i}", provider) for i in range(1, 9)]
    assert {t.status for t in earlier} == {"succeeded"}
    before = len(stub.requests)

    last = await ask(db_threads, conversation, "one more story", provider)

    assert last.status == "succeeded"  # no context_overflow at message 9
    data = (await history_event(db_threads, last)).data
    kept = data["turns"]
    assert 0 < len(kept) < 8 and kept == [t.pk for t in earlier[-len(kept) :]]  # the newest, in order
    assert data["dropped"] == [
        {"turn": t.pk, "position": t.position, "reason": "budget"} for t in earlier[: 8 - len(kept)]
    ]
    assert data["tokens"] <= data["budget"]
    request = stub.requests[before]
    # the budget is half of what the window leaves after the reply and the request without history
    without_history = server_tokens(
        {**request, "messages": [request["messages"][0], request["messages"][-1]]}
    )
    assert data["budget"] == (window - 512 - without_history) // 2
    assert server_tokens(request) + 512 <= window
    assert [m["content"] for m in request["messages"][1:-1:2]] == [
        f"tell me story {i}" for i in range(9 - len(kept), 9)
    ]
    # all eight would not have fitted
    one_turn = data["tokens"] // len(kept)
    assert without_history + 8 * one_turn + 512 > window


class Killed(BaseException):
    """A worker that died (not an ``Exception``: nothing catches it)."""


async def test_resume_and_retry_send_byte_identical_requests(owner, db_threads, stub, provider):
    conversation = await db_threads.run(conversation_create, owner=owner)
    first = await ask(db_threads, conversation, "What is 6*7?", provider)
    turn = await db_threads.run(
        turn_create, owner=owner, question="What is 6*7? again", conversation=conversation
    )

    # the worker dies while the second LLM call is in flight: the request went, the reply was lost
    real = record_module.Recorder.__call__

    async def dying(self, report):
        if getattr(report, "step", 0) == 2 and type(report).__name__ == "CompletionReport":
            raise Killed()
        await real(self, report)

    record_module.Recorder.__call__ = dying
    try:
        with pytest.raises(Killed):
            await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    finally:
        record_module.Recorder.__call__ = real
    lost = stub.requests[-1]
    first_request = stub.requests[-2]
    # meanwhile the conversation changes: read anew, the history would differ
    await db_threads.run(lambda: Turn.objects.filter(pk=first.pk).update(answer="41"))
    assert await db_threads.run(turn_interrupt, turn_id=turn.pk, reason="worker died")
    await db_threads.run(turn_resume, turn_id=turn.pk)
    before = len(stub.requests)
    stub.handler = lambda body: error_reply(400, "this time the server refuses")  # the turn fails
    await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)

    assert len(stub.requests) == before + 1  # only the lost call again
    assert json.dumps(stub.requests[before]) == json.dumps(lost)
    assert lost["messages"][2] == {"role": "assistant", "content": "42"}
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).status == "failed"

    # a retry is a new attempt with the same history: its first request is the first attempt's
    stub.handler = asks_model
    await db_threads.run(turn_retry, turn_id=turn.pk)
    before = len(stub.requests)
    await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    assert json.dumps(stub.requests[before]) == json.dumps(first_request)
    retried = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (retried.attempts, retried.status, retried.answer) == (2, "succeeded", "42")
    assert await db_threads.run(TurnEvent.objects.filter(turn_id=turn.pk, type="history").count) == 1


async def test_a_review_s_retry_is_given_the_same_history(owner, db_threads, stub, provider, settings):
    settings.AGENTLAB_REVIEW = True
    verdicts = iter(
        [
            '{"verdict": "retry", "note": "unsure", "retry_instruction": "check the earlier answer"}',
            '{"verdict": "accept", "note": "fine", "retry_instruction": null}',
        ]
    )

    def reviewed(body: dict[str, Any]) -> StubReply:
        if not body.get("tools"):  # the reviewer
            return text_reply(next(verdicts))
        return asks_model(body)

    conversation = await db_threads.run(conversation_create, owner=owner)
    settings.AGENTLAB_REVIEW = False
    await ask(db_threads, conversation, "What is 6*7?", provider)
    settings.AGENTLAB_REVIEW = True
    stub.handler = reviewed
    before = len(stub.requests)
    second = await ask(db_threads, conversation, "double it", provider)

    agent_calls = [r for r in stub.requests[before:] if r.get("tools")]
    assert second.attempts == 2 and len(agent_calls) == 2
    for request in agent_calls:  # each attempt: the same history before its question
        assert [m["content"] for m in request["messages"][1:3]] == ["What is 6*7?", "42"]
    assert "check the earlier answer" in agent_calls[1]["messages"][3]["content"]
    # the reviewer reads the conversation before the question too: "double it" means nothing alone
    reviews = [r for r in stub.requests[before:] if not r.get("tools")]
    assert len(reviews) == 2
    assert reviews[0]["messages"][1]["content"].startswith(
        "Earlier in the conversation:\nUser: What is 6*7?\nAssistant: 42\n\nQuestion:\ndouble it\n"
    )
    assert await db_threads.run(TurnEvent.objects.filter(turn_id=second.pk, type="history").count) == 1


async def test_a_turn_without_a_conversation_gets_no_history(owner, db_threads, stub, provider):
    turn = await db_threads.run(turn_create, owner=owner, question="double it")
    await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    assert [m["role"] for m in stub.requests[-1]["messages"]] == ["system", "user"]
    assert not await db_threads.run(TurnEvent.objects.filter(turn_id=turn.pk, type="history").exists)


def test_the_api_and_the_list_page_create_a_conversation_with_its_history_mode(client, owner):
    client.force_login(owner)
    created = client.post(
        "/api/conversations", {"title": "t", "history": "full"}, content_type="application/json"
    )
    assert created.status_code == 201 and created.json()["history"] == "full"
    assert client.post("/api/conversations", {}, content_type="application/json").json()["history"] == ""
    bad = client.post("/api/conversations", {"history": "everything"}, content_type="application/json")
    assert bad.status_code == 422 and "history" in json.dumps(bad.json())
    assert Conversation.objects.count() == 2

    page = client.get("/")
    assert b'name="history"' in page.content and b"the default (answers)" in page.content
    refused = client.post("/", {"question": "hi", "history": "everything"})
    assert refused.status_code == 200 and b"Choose what each turn is given" in refused.content
    assert Conversation.objects.count() == 2  # nothing written
    with pytest.raises(ValueError, match="history must be one of answers, full"):
        conversation_create(owner=owner, history="everything")


def test_the_admin_pages_show_the_history_a_turn_was_given(owner, staff, client, db_threads, stub):
    async def two_turns() -> tuple[Turn, Turn]:
        provider = OpenAICompatibleProvider(base_url=stub.base_url, api_key="x", model="stub-model")
        try:
            conversation = await db_threads.run(conversation_create, owner=owner, history="full")
            return (
                await ask(db_threads, conversation, "What is 6*7?", provider),
                await ask(db_threads, conversation, "double it", provider),
            )
        finally:
            await provider.aclose()

    first, second = async_to_sync(two_turns)()
    client.force_login(staff)
    page = client.get(reverse("admin:turns_turn_change", args=[second.pk])).content.decode()
    assert f"Mode full: earlier turns #{first.pk}" in page
    assert "The 4 messages given before the question" in page
    assert "What is 6*7?" in page and f"t{first.pk}_call" in page
    assert 'class="al-history-msg"><b>tool</b>' in page
    first_page = client.get(reverse("admin:turns_turn_change", args=[first.pk])).content.decode()
    assert "none recorded: the first turn of its conversation" in first_page
    conversation_page = client.get(
        reverse("admin:turns_conversation_change", args=[second.conversation_id])
    ).content.decode()
    assert ">full<" in conversation_page


@pytest.mark.local_model
async def test_the_embedded_model_gets_the_history_through_its_chat_template(owner, db_threads):
    from agentlab.agent.providers.local import LocalGGUFProvider, _plain_messages

    provider = LocalGGUFProvider(n_ctx=2048)
    conversation = await db_threads.run(conversation_create, owner=owner)
    first = await ask(db_threads, conversation, "What is 6*7?", provider)
    second = await ask(db_threads, conversation, "Double it.", provider)

    assert first.status == "succeeded" and first.answer
    data = (await history_event(db_threads, second)).data
    assert (data["turns"], data["counted"], data["window"]) == ([first.pk], "tokenizer", 2048)
    given = [{"role": "user", "content": "What is 6*7?"}, {"role": "assistant", "content": first.answer}]
    assert data["messages"] == given
    assert data["tokens"] == sum(provider.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in given)
    calls = await db_threads.run(turn_llm_calls, second.pk)
    request = calls[0].request
    assert request is not None and request["messages"][1:] == [
        *given,
        {"role": "user", "content": "Double it."},
    ]
    prompt = provider._loaded().render(_plain_messages(request["messages"]))
    assert (
        f"<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n{first.answer}<|im_end|>\n"
        "<|im_start|>user\nDouble it.<|im_end|>\n<|im_start|>assistant\n"
    ) in prompt


def test_the_list_page_refuses_a_question_longer_than_the_api_takes(client, owner):
    client.force_login(owner)
    assert b'maxlength="20000"' in client.get("/").content
    refused = client.post("/", {"question": "x" * 20_001})
    assert refused.status_code == 200
    assert b"A question is at most 20,000 characters; this one has 20,001" in refused.content
    assert not Conversation.objects.exists()  # nothing written

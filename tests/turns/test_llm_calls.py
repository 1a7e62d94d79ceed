"""What the model saw: each LLM call's request recorded in the event log
(``llm.usage``'s ``request``), rebuilt whole (``turns.llm_calls``) and shown
on the admin's turn page beside the event log read as a tree of steps.

The rebuilt requests are compared with what the scripted provider was
actually handed — its messages, tool specs and options — call by call.
"""

from __future__ import annotations

import re
from typing import Any, cast

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.urls import reverse

from agentlab.agent.providers.scripted import ScriptedProvider, final, text, tool_call
from common.db import DatabaseThreads
from turns.driver import EVALUATION, drive_turn
from turns.llm_calls import llm_calls_of, schema_tool_names, turn_llm_calls
from turns.models import EventType, Turn, TurnEvent
from turns.services import turn_create

pytestmark = pytest.mark.django_db


class ThreadDb:
    """The driver's ORM calls on the test's thread (they share its transaction)."""

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)


def drive(turn: Turn, provider: ScriptedProvider) -> Turn:
    async_to_sync(drive_turn)(
        turn.pk, policy=EVALUATION, provider=provider, db=cast(DatabaseThreads, ThreadDb())
    )
    turn.refresh_from_db()
    return turn


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


def native_turn(owner: Any) -> tuple[Turn, ScriptedProvider]:
    provider = ScriptedProvider(
        [
            tool_call("calculator", {"expression": "6*7"}, content="Let me compute.", usage=(20, 8)),
            final("42", evidence="calculator said 42", usage=(30, 6)),
        ]
    )
    return drive(turn_create(owner=owner, question="What is six times seven?"), provider), provider


def test_every_call_is_rebuilt_exactly_as_the_provider_got_it(owner):
    turn, provider = native_turn(owner)
    calls = turn_llm_calls(turn.pk)
    assert [(c.attempt, c.step) for c in calls] == [(1, 1), (1, 2)]
    for call, messages, tools, options in zip(
        calls, provider.calls, provider.tools_seen, provider.kwargs_seen, strict=True
    ):
        assert call.request is not None
        assert call.request["messages"] == messages
        assert call.request["tools"] == tools
        assert {k: call.request[k] for k in ("max_tokens", "temperature", "response_schema")} == options
    # step 2 sees the system prompt, the question, the call and its result
    second = calls[1].request
    assert second is not None
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["messages"][3]["content"] == "42"
    assert calls[0].tool_names == [spec["function"]["name"] for spec in provider.tools_seen[0]]
    assert "calculator" in calls[0].tool_names
    assert calls[0].reply_text == "Let me compute."
    assert [c["name"] for c in calls[0].reply_calls] == ["calculator"]


def test_the_log_keeps_each_message_once(owner):
    turn, provider = native_turn(owner)
    stored = [
        e.data["request"]
        for e in TurnEvent.objects.filter(turn=turn, type=EventType.LLM_USAGE).order_by("seq")
    ]
    assert [r["shared"] for r in stored] == [0, 2]  # step 2 repeats system + question
    assert len(stored[1]["messages"]) == 2  # and adds the call and its result
    assert stored[1]["messages"] == provider.calls[1][2:]


def test_a_constrained_model_s_tools_are_those_its_schema_allows(owner):
    provider = ScriptedProvider(
        [text('{"tool": "final_answer", "arguments": {"answer": "7"}}')],
        native_tools=False,
        constrained_decoding=True,
    )
    turn = drive(turn_create(owner=owner, question="What is 3 + 4?"), provider)
    [call] = turn_llm_calls(turn.pk)
    assert call.request is not None and call.request["tools"] is None
    schema = provider.kwargs_seen[0]["response_schema"]
    assert call.request["response_schema"] == schema
    assert call.tool_names == schema_tool_names(schema)
    # the page's "tools offered" are those the system prompt names (not the
    # registry's every tool); the step's schema allows some of them
    system = call.request["messages"][0]["content"]
    offered = [t["name"] for t in turn.meta["setup"]["tools"]]
    assert offered == ["calculator", "ask_user", "final_answer"]
    assert all(name in system for name in offered)
    assert "search_documents" not in system and "sql_query" not in system
    assert call.tool_names == ["calculator"]  # a math question's first step calls it


def test_schema_tool_names_reads_one_or_any_of():
    one = {"properties": {"tool": {"const": "calculator"}, "arguments": {}}}
    assert schema_tool_names(one) == ["calculator"]
    assert schema_tool_names({"anyOf": [one, {"properties": {"tool": {"const": "final_answer"}}}]}) == [
        "calculator",
        "final_answer",
    ]
    assert schema_tool_names(None) == [] and schema_tool_names({"type": "string"}) == []


def test_a_log_without_requests_gives_calls_without_them():
    old = TurnEvent(
        seq=3,
        type=EventType.LLM_USAGE,
        data={"attempt": 1, "step": 1, "model": "m", "input_tokens": 1, "output_tokens": 2, "cost": None,
              "finish_reason": "stop"},
    )  # fmt: skip
    [call] = llm_calls_of([old])
    assert (
        call.request is None and call.tool_names == [] and (call.input_tokens, call.output_tokens) == (1, 2)
    )


def test_the_turn_page_shows_each_request_and_the_log_as_steps(staff_client, owner):
    turn, _ = native_turn(owner)
    body = staff_client.get(reverse("admin:turns_turn_change", args=[turn.pk])).content.decode()
    assert "What the model saw · 2 LLM calls" in body
    assert body.count('class="al-call"') == 2
    # the second call's messages: the tool result the model read, and the tool specs sent
    second = body[body.index('id="call-1-2"') :]
    assert re.search(r'<span class="al-role">tool</span>\s*<pre>42</pre>', second)
    assert "tool specs sent" in second and "&quot;calculator&quot;" in second
    assert "Tools offered:</strong> <code>" in body
    # the event log as a tree: each step's events under its heading, JSON indented
    assert body.count('<div class="al-step"><h3>Attempt 1 · step 1</h3>') == 1
    assert body.count('<div class="al-step"><h3>Attempt 1 · step 2</h3>') == 1
    step1 = body[body.index("Attempt 1 · step 1</h3>") : body.index("Attempt 1 · step 2</h3>")]
    assert re.findall(r'<span class="al-type">([^<]+)</span>', step1) == [
        "thinking",
        "llm.usage",
        "tool.call",
        "tool.started",
        "tool.result",
    ]
    assert "{\n  &quot;attempt&quot;: 1," in body  # pretty-printed, not one line
    # no cancel was asked for: said in words, not the admin's red ✖
    assert re.search(r'<div class="readonly">no</div>', body)
    assert "icon-no.svg" not in body

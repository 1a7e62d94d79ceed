"""Plugins and MCP servers in driven turns (turns/driver/extensions.py), with a
scripted model against the real database and the real MCP test server."""

from __future__ import annotations

import pytest

from agentlab.agent.extensions import Extensions
from agentlab.agent.providers.scripted import ScriptedProvider, final, tool_call
from turns.driver import CHAT, EVALUATION, drive_turn
from turns.driver.extensions import Subject
from turns.models import EventType, Turn
from turns.selectors import events_after
from turns.services import turn_create

pytestmark = pytest.mark.django_db(transaction=True)

SAMPLES = "tests.agent.plugins.sample_plugins"
DOCS = [
    {"title": "Scott Derrickson", "text": "Scott Derrickson (born July 16, 1966) is an American director."},
    {"title": "Ed Wood", "text": "Edward Davis Wood Jr. was an American filmmaker."},
]


def checks(turn_id: int) -> list[dict]:
    return [e.data for e in events_after(turn_id=turn_id) if e.type == EventType.CHECK]


async def test_plugins_of_the_setting_add_a_tool_and_record_step_and_turn_checks(owner, db_threads, settings):
    settings.AGENTLAB_PLUGINS = ["example"]
    turn = await db_threads.run(
        turn_create, owner=owner, question="Same nationality?", context={"documents": DOCS}
    )
    provider = ScriptedProvider(
        [
            tool_call("word_count", {"text": "Same nationality?"}, id="w1"),
            tool_call("search_documents", {"query": "nationality"}, id="s1"),
            final("yes", evidence="Derrickson (born July 16, 1966) is an American director"),
        ]
    )

    result = await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)

    assert result is not None and result.answer == "yes"
    events = await db_threads.run(events_after, turn_id=turn.pk)
    results = [e.data["result"] for e in events if e.type == EventType.TOOL_RESULT]
    assert results[0] == {"call_id": "w1", "name": "word_count", "output": '{"words": 2}', "is_error": False}
    assert await db_threads.run(checks, turn.pk) == [
        {
            "attempt": 1,
            "scope": "step",
            "step": 2,
            "name": "search_found_documents",
            "passed": True,
            "detail": {"empty_calls": []},
            "plugin": "example",
        },
        {
            "attempt": 1,
            "scope": "turn",
            "step": None,
            "name": "evidence_quotes_a_document",
            "passed": True,
            "detail": {"quote": "derrickson born july 16 1966", "documents_retrieved": 2},
            "plugin": "example",
        },
    ]
    # the checks come after the step events, before the end of the turn
    kinds = [e.type for e in events]
    assert kinds[-4:] == [EventType.CHECK, EventType.CHECK, EventType.PHASE, EventType.TURN_ANSWERED]
    stored = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert stored.meta["extensions"] == {"plugins": ["example"], "mcp_servers": [], "system_prompt": None}


async def test_a_dataset_system_prompt_reaches_the_model_and_the_turn_records_whose(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="Hi?")
    provider = ScriptedProvider([final("hello")])
    extensions = Extensions(plugins=(f"{SAMPLES}:Prompt", "example_prompt"))
    subject = Subject(example={"question_id": "q1", "question": "Hi?"}, run_id="r1", dataset="greetings")

    await drive_turn(
        turn.pk, policy=EVALUATION, provider=provider, db=db_threads, extensions=extensions, subject=subject
    )

    system = provider.calls[0][0]["content"]
    assert "copy, word for word, the sentence of a document" in system
    stored = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert stored.meta["extensions"]["system_prompt"] == "example_prompt"


async def test_a_raising_plugin_is_a_failed_check_and_the_turn_still_answers(owner, db_threads):
    raising = f"{SAMPLES}:Raising"
    turn = await db_threads.run(turn_create, owner=owner, question="2+2?")
    provider = ScriptedProvider([tool_call("calculator", {"expression": "2+2"}), final("4")])

    result = await drive_turn(
        turn.pk,
        policy=EVALUATION,
        provider=provider,
        db=db_threads,
        extensions=Extensions(plugins=(raising,)),
    )

    assert result is not None and (result.status, result.answer) == ("succeeded", "4")
    recorded = await db_threads.run(checks, turn.pk)
    assert [(c["scope"], c["step"], c["name"], c["passed"], c["error"]) for c in recorded] == [
        ("turn", None, f"plugin_error:{raising}", False, "agentlab_tools: RuntimeError: no tools today"),
        (
            "turn",
            None,
            f"plugin_error:{raising}",
            False,
            "agentlab_system_prompt: RuntimeError: no prompt today",
        ),
        (
            "step",
            1,
            f"plugin_error:{raising}",
            False,
            "agentlab_step_checked: ValueError: cannot check this step",
        ),
        (
            "step",
            2,
            f"plugin_error:{raising}",
            False,
            "agentlab_step_checked: ValueError: cannot check this step",
        ),
        ("turn", None, f"plugin_error:{raising}", False, "agentlab_turn_finished: KeyError: 'answer'"),
    ]


async def test_a_plugin_that_cannot_be_loaded_fails_the_turn_naming_it(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="2+2?")

    result = await drive_turn(
        turn.pk,
        policy=EVALUATION,
        provider=ScriptedProvider([]),
        db=db_threads,
        extensions=Extensions(plugins=("no_such_plugin",)),
    )

    assert result is not None and result.status == "failed"
    assert "PluginError: no plugin 'no_such_plugin'" in (result.error or "")


async def test_an_mcp_server_unreachable_at_the_start_fails_the_turn(owner, db_threads):
    from agentlab.agent.mcp import parse_server

    turn = await db_threads.run(turn_create, owner=owner, question="2+2?")
    provider = ScriptedProvider([final("4")])
    extensions = Extensions(mcp_servers=(parse_server("ghost", "/nonexistent/mcp-server"),))

    result = await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads, extensions=extensions)

    assert result is not None and (result.status, result.stop_reason) == ("failed", "error")
    assert result.error.startswith("MCP server 'ghost' (stdio /nonexistent/mcp-server) is unavailable: ")
    assert provider.calls == []  # nothing was asked of the model
    failed = [
        e.data for e in await db_threads.run(events_after, turn_id=turn.pk) if e.type == EventType.TURN_FAILED
    ]
    assert failed[0]["cause"] == "error" and failed[0]["error"] == result.error

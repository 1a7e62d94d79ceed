"""The example plugin package (examples/agentlab_example_plugin), installed with
``pip install -e`` and found through its entry points. No Django."""

from __future__ import annotations

import json

from agentlab.agent.plugins import PluginContext, TurnSummary, plugin_set
from agentlab.agent.tools import ToolContext, ToolRegistry
from agentlab.agent.types import Completion, Step, ToolCall, ToolResult

DOCS = [
    {"title": "Scott Derrickson", "text": "Scott Derrickson (born July 16, 1966) is an American director."},
    {"title": "Ed Wood", "text": "Edward Davis Wood Jr. was an American filmmaker, actor, and author."},
]


def search_step(index: int, output: str) -> Step:
    call = ToolCall(id=f"s{index}", name="search_documents", arguments={"query": "nationality"})
    return Step(
        index=index,
        completion=Completion(text=None, tool_calls=(call,)),
        results=[ToolResult(f"s{index}", "search_documents", output)],
    )


async def turn_check(
    evidence: str, steps: list[Step], stop_reason: str = "final"
) -> list[tuple[str, bool, object]]:
    turn = TurnSummary(stop_reason=stop_reason, answer="yes", evidence=evidence, steps=steps)
    return [
        (c.name, c.passed, c.detail) for c in await plugin_set(["example"]).turn_checks(turn, PluginContext())
    ]


async def test_evidence_that_quotes_a_retrieved_document_passes():
    steps = [search_step(1, json.dumps(DOCS))]

    checks = await turn_check("Derrickson (born July 16, 1966) is an American director; Wood too.", steps)

    assert checks == [
        (
            "evidence_quotes_a_document",
            True,
            {"quote": "derrickson born july 16 1966", "documents_retrieved": 2},
        )
    ]


async def test_evidence_in_the_models_own_words_fails():
    steps = [search_step(1, json.dumps(DOCS))]

    checks = await turn_check("Both men were from the United States.", steps)

    assert checks == [("evidence_quotes_a_document", False, {"quote": None, "documents_retrieved": 2})]


async def test_evidence_without_any_search_fails_and_an_unanswered_turn_is_not_judged():
    assert await turn_check("an American director", []) == [
        ("evidence_quotes_a_document", False, {"quote": None, "documents_retrieved": 0})
    ]
    assert await turn_check("", [], stop_reason="max_steps") == []


async def test_step_check_flags_a_search_that_found_nothing():
    plugins = plugin_set(["example"])

    found = await plugins.step_checks(search_step(1, json.dumps(DOCS)), PluginContext())
    empty = await plugins.step_checks(
        search_step(2, "No documents are available for this question."), PluginContext()
    )
    other = await plugins.step_checks(Step(index=3, completion=Completion(text="hm")), PluginContext())

    assert [(c.name, c.passed, c.detail) for c in found] == [
        ("search_found_documents", True, {"empty_calls": []})
    ]
    assert [(c.name, c.passed, c.detail) for c in empty] == [
        ("search_found_documents", False, {"empty_calls": ["s2"]})
    ]
    assert other == []


async def test_word_count_tool_runs_through_the_registry():
    tools, errors = await plugin_set(["example"]).tools(PluginContext())
    registry = ToolRegistry(tools)

    result = await registry.execute(
        ToolCall(id="c1", name="word_count", arguments={"text": "three little words"}), ToolContext()
    )

    assert errors == []
    assert (result.output, result.is_error) == ('{"words": 3}', False)


async def test_prompt_plugin_extends_the_default_prompt():
    choice = await plugin_set(["example_prompt"]).system_prompt(None, "Be careful.")

    assert choice.plugin == "example_prompt"
    assert choice.prompt.startswith("Be careful.\nSearch the documents before you answer")

"""Loading plugins and calling their hooks (agentlab/agent/plugins/manager.py). No Django."""

from __future__ import annotations

import pytest

from agentlab.agent.plugins import (
    ERROR_CHECK_PREFIX,
    PluginContext,
    PluginError,
    PluginSet,
    TurnSummary,
    load_plugin,
    plugin_set,
)
from agentlab.agent.plugins.records import json_detail
from agentlab.agent.tools import ToolContext, ToolRegistry, default_registry
from agentlab.agent.types import Completion, Step, ToolCall, ToolResult

SAMPLES = "tests.agent.plugins.sample_plugins"


def a_step(text: str | None = "thinking") -> Step:
    call = ToolCall(id="c1", name="calculator", arguments={"expression": "1+1"})
    return Step(
        index=2,
        completion=Completion(text=text, tool_calls=(call,)),
        results=[ToolResult("c1", "calculator", "2")],
    )


def test_entry_point_plugin_loads_with_its_distribution_and_version():
    plugin = load_plugin("example")

    assert plugin.describe() == {
        "name": "example",
        "target": "agentlab_example_plugin",
        "distribution": "agentlab-example-plugin",
        "version": "0.1.0",
    }


def test_dotted_path_plugin_loads_a_class_instance_with_or_without_the_colon():
    with_colon = load_plugin(f"{SAMPLES}:Prompt")
    with_dot = load_plugin(f"{SAMPLES}.OtherPrompt")

    assert type(with_colon.obj).__name__ == "Prompt"
    assert type(with_dot.obj).__name__ == "OtherPrompt"
    assert with_colon.target == f"{SAMPLES}:Prompt"
    # the tests are not an installed distribution: no version to record
    assert with_colon.distribution is None and with_colon.version is None


def test_unknown_plugin_is_an_error_naming_the_installed_ones():
    with pytest.raises(PluginError) as caught:
        load_plugin("no_such_plugin")

    message = str(caught.value)
    assert "no plugin 'no_such_plugin'" in message
    assert "example" in message and "example_prompt" in message


def test_plugin_whose_import_fails_is_an_error_with_the_cause():
    with pytest.raises(PluginError, match=r"could not be imported: AttributeError"):
        load_plugin(f"{SAMPLES}:NoSuchClass")


def test_misspelt_hook_is_refused_when_the_set_is_built():
    with pytest.raises(PluginError, match="agentlab_step_check"):
        plugin_set([f"{SAMPLES}:Misspelt"])


async def test_last_system_prompt_in_configured_order_wins_and_names_its_plugin():
    first, second = f"{SAMPLES}:Prompt", f"{SAMPLES}:OtherPrompt"

    forward = await plugin_set([first, second]).system_prompt(None, "default")
    backward = await plugin_set([second, first]).system_prompt(None, "default")

    assert (forward.prompt, forward.plugin) == ("You are the second plugin's agent.", second)
    assert (backward.prompt, backward.plugin) == ("You are the first plugin's agent.", first)
    assert forward.errors == ()


async def test_no_prompt_plugin_leaves_the_default():
    choice = await plugin_set(["example"]).system_prompt(None, "default")

    assert (choice.prompt, choice.plugin) == (None, None)


async def test_a_raising_plugin_is_a_failed_check_and_the_others_still_run():
    raising = f"{SAMPLES}:Raising"
    plugins = plugin_set([raising, f"{SAMPLES}:AsyncChecks"])

    checks = await plugins.step_checks(a_step(), PluginContext())

    assert [c.to_dict() for c in checks] == [
        {
            "name": f"{ERROR_CHECK_PREFIX}{raising}",
            "passed": False,
            "detail": "agentlab_step_checked: ValueError: cannot check this step",
            "plugin": raising,
            "error": "agentlab_step_checked: ValueError: cannot check this step",
        },
        {"name": "has_text", "passed": True, "detail": {"step": 2}, "plugin": f"{SAMPLES}:AsyncChecks"},
    ]


async def test_raising_tools_prompt_and_turn_hooks_are_failures_not_exceptions():
    raising = f"{SAMPLES}:Raising"
    plugins = plugin_set([raising])

    tools, tool_errors = await plugins.tools(PluginContext())
    prompt = await plugins.system_prompt(None, "default")
    turn = await plugins.turn_checks(TurnSummary(stop_reason="final"), PluginContext())

    assert tools == []
    assert [e.detail for e in tool_errors] == ["agentlab_tools: RuntimeError: no tools today"]
    assert prompt.prompt is None
    assert [e.detail for e in prompt.errors] == ["agentlab_system_prompt: RuntimeError: no prompt today"]
    assert [(c.name, c.passed, c.error) for c in turn] == [
        (f"{ERROR_CHECK_PREFIX}{raising}", False, "agentlab_turn_finished: KeyError: 'answer'")
    ]


async def test_a_hook_past_its_timeout_is_a_failed_check():
    slow = f"{SAMPLES}:Slow"
    plugins = PluginSet([load_plugin(slow)], timeout_s=0.2)

    checks = await plugins.step_checks(a_step(), PluginContext())

    assert [(c.name, c.error) for c in checks] == [
        (f"{ERROR_CHECK_PREFIX}{slow}", "agentlab_step_checked: timed out after 0.2 s")
    ]


async def test_unreadable_return_values_are_failed_checks_naming_what_was_wrong():
    bad = f"{SAMPLES}:BadReturns"
    plugins = plugin_set([bad])

    checks = await plugins.step_checks(a_step(), PluginContext())
    tools, tool_errors = await plugins.tools(PluginContext())
    prompt = await plugins.system_prompt(None, "default")

    assert [(c.name, c.passed) for c in checks] == [
        (f"{ERROR_CHECK_PREFIX}{bad}", False),
        (f"{ERROR_CHECK_PREFIX}{bad}", False),
        (f"{ERROR_CHECK_PREFIX}{bad}", False),
        ("fine", False),
    ]
    errors = [c.error or "" for c in checks]
    assert "check 'ok': passed is 'yes'" in errors[0]
    assert "check name None" in errors[1]
    assert "returned 'plain text'" in errors[2]
    assert tools == []
    assert [e.error for e in tool_errors] == [
        "agentlab_tools: returned 42: expected an agentlab Tool or a dict",
        "agentlab_tools: tool 'no fn': missing ['fn']",
    ]
    assert prompt.errors[0].error == "agentlab_system_prompt: returned 7, not text or None"


async def test_plugin_tools_from_dicts_run_through_the_registry_and_taken_names_are_refused():
    maker = f"{SAMPLES}:ToolMaker"
    builtins = default_registry()

    tools, errors = await plugin_set([maker]).tools(PluginContext(), taken=builtins.names)
    registry = ToolRegistry([*builtins, *tools])
    result = await registry.execute(ToolCall(id="c1", name="shout", arguments={"text": "hi"}), ToolContext())
    refused = await registry.execute(ToolCall(id="c2", name="shout", arguments={"text": 3}), ToolContext())

    assert [(t.name, t.needs_approval) for t in tools] == [("shout", True)]
    assert [e.error for e in errors] == ["agentlab_tools: tool name 'calculator' is taken"]
    assert (result.output, result.is_error) == ("HI", False)
    assert refused.is_error and "text: 3 is not of type 'string'" in refused.output


async def test_async_turn_check_takes_only_the_arguments_it_names():
    checks = await plugin_set([f"{SAMPLES}:AsyncChecks"]).turn_checks(
        TurnSummary(stop_reason="max_steps"), PluginContext()
    )

    assert [(c.name, c.passed) for c in checks] == [("answered", False)]


def test_the_same_plugin_named_twice_counts_once():
    plugins = plugin_set(["example", "example", "agentlab_example_plugin"])

    assert plugins.names == ["example"]


def test_long_or_odd_check_details_are_kept_as_json():
    assert json_detail({"a": (1, 2), "b": {1, 2}.__class__}) == {"a": [1, 2], "b": "<class 'set'>"}
    cut = json_detail("x" * 5000)
    assert cut.startswith('"xxx') and cut.endswith("…[cut: 5002 characters]")

"""Plugins and MCP servers in ``run_eval`` (evaluation/extensions.py): real HTTP
to a stub OpenAI-compatible model, the example plugin package found through its
entry points, the real MCP test server over stdio and streamable HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, tool_call_reply
from evaluation.models import Dataset, Prediction, Run
from evaluation.selectors import prediction_list
from tests.mcp_support import http_server, starts, stdio_spec
from tests.shared_data import dataset_path
from turns.models import EventType, TurnEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("process_hub")]

HOTPOT = dataset_path("hotpotqa-dev-distractor-52.jsonl")
SAMPLES = "tests.agent.plugins.sample_plugins"
QUOTE_INSTRUCTION = "copy, word for word, the sentence of a document that supports the answer"


def hotpot(tmp_path: Path, n: int, *, name: str = "hotpot", **per_line) -> tuple[Path, list[dict]]:
    """The first ``n`` HotpotQA rows as a file; ``per_line[i]`` updates row i."""
    rows = [json.loads(line) for line in HOTPOT.read_text(encoding="utf-8").splitlines()[:n]]
    for i, extra in per_line.items():
        rows[int(i.removeprefix("line"))].update(extra)
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, rows


def researcher(rows: list[dict], *, quoting: set[int]):
    """A stub model: searches the documents first, then answers with the gold
    answer; its evidence quotes the first document found for examples in
    ``quoting`` and is its own words for the others."""
    index = {r["question"]: i for i, r in enumerate(rows)}

    def handler(body):
        messages = body["messages"]
        question = next(m["content"] for m in messages if m["role"] == "user")
        i = index[question]
        if messages[-1]["role"] == "user":
            return tool_call_reply("search_documents", {"query": question, "k": 2})
        found = json.loads(messages[-1]["content"])
        evidence = found[0]["text"][:120] if i in quoting else "I recall this from memory."
        return final_answer_reply(rows[i]["answer"], evidence, "looked it up")

    return handler


def test_a_run_plugin_records_checks_aggregated_per_run_with_its_version_in_the_config(
    endpoint, tmp_path, capsys
):
    path, rows = hotpot(tmp_path, 4, line3={"task_type": "bridge", "scorer": "exact"})
    with StubLLMServer(researcher(rows, quoting={0, 1, 3})) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", "checked", "--plugin", "example")
        offered = {t["function"]["name"] for t in server.requests[0]["tools"]}

    run = Run.objects.get(run_id="checked")
    assert "word_count" in offered  # the plugin's tool is offered like a built-in one
    assert run.config["plugins"] == [
        {
            "name": "example",
            "target": "agentlab_example_plugin",
            "distribution": "agentlab-example-plugin",
            "version": "0.1.0",
        }
    ]
    assert run.config["run_plugins"] == ["example"]
    checks = run.metrics["checks"]
    assert checks["evidence_quotes_a_document"] == {
        "scope": "turn",
        "ran": 4,
        "passed": 3,
        "failed": 1,
        "pass_rate": 0.75,
        "turns": 4,
        "turns_failed": 1,
        "per_task_type": {
            "bridge": {"ran": 1, "passed": 1, "failed": 0, "pass_rate": 1.0, "turns": 1, "turns_failed": 0},
            "document_qa": {
                "ran": 3,
                "passed": 2,
                "failed": 1,
                "pass_rate": 2 / 3,
                "turns": 3,
                "turns_failed": 1,
            },
        },
    }
    assert (checks["search_found_documents"]["scope"], checks["search_found_documents"]["ran"]) == ("step", 4)
    assert run.metrics["accuracy"] == 1.0
    # one check event per step that searched and one per turn, in every turn's log
    assert TurnEvent.objects.filter(turn__predictions__run=run, type=EventType.CHECK).count() == 8
    # the predictions that failed the check, as the API and the admin filter them
    failing = prediction_list(run=run, failed_check="evidence_quotes_a_document")
    assert [p.example.external_id for p in failing] == [rows[2]["question_id"]]
    assert "Checks" in capsys.readouterr().out


def test_a_dataset_plugin_gives_the_dataset_its_own_system_prompt(endpoint, tmp_path):
    path, rows = hotpot(tmp_path, 2)
    call_command("import_dataset", str(path), "--name", "quoting", "--plugin", "example_prompt")
    with StubLLMServer(researcher(rows, quoting={0, 1})) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", "quoting", "--run-id", "prompted")
        systems = [body["messages"][0]["content"] for body in server.requests]

    assert Dataset.objects.get(name="quoting").plugins == ["example_prompt"]
    assert all(QUOTE_INSTRUCTION in system for system in systems)
    run = Run.objects.get(run_id="prompted")
    assert [p["name"] for p in run.config["plugins"]] == ["example_prompt"]
    assert {p.turn.meta["extensions"]["system_prompt"] for p in Prediction.objects.filter(run=run)} == {
        "example_prompt"
    }


def test_a_line_switches_a_plugin_on_for_its_example_only(endpoint, tmp_path):
    path, rows = hotpot(tmp_path, 2, line1={"plugins": ["example"]})
    with StubLLMServer(researcher(rows, quoting={0, 1})) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", "per-line")

    run = Run.objects.get(run_id="per-line")
    by_example = {
        p.example.external_id: TurnEvent.objects.filter(turn=p.turn, type=EventType.CHECK).count()
        for p in Prediction.objects.filter(run=run).select_related("example")
    }
    assert by_example == {rows[0]["question_id"]: 0, rows[1]["question_id"]: 2}
    assert [p["name"] for p in run.config["plugins"]] == ["example"]


def test_a_plugin_of_the_setting_that_raises_is_counted_as_failed_checks_not_failed_examples(
    endpoint, tmp_path, settings
):
    settings.AGENTLAB_PLUGINS = [f"{SAMPLES}:Raising"]
    path, rows = hotpot(tmp_path, 2)
    with StubLLMServer(researcher(rows, quoting={0, 1})) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", "raising")

    run = Run.objects.get(run_id="raising")
    assert run.metrics["accuracy"] == 1.0 and run.metrics["stop_reasons"] == {"final": 2}
    broken = run.metrics["checks"][f"plugin_error:{SAMPLES}:Raising"]
    # per turn: tools, system prompt, two steps and the turn hook
    assert (broken["ran"], broken["failed"], broken["turns"]) == (10, 10, 2)
    assert run.config["plugins"][0] == {
        "name": f"{SAMPLES}:Raising",
        "target": f"{SAMPLES}:Raising",
        "distribution": None,
        "version": None,
    }


def calculator_then_echo(rows: list[dict]):
    """Calls ``calc__add``, then ``web__echo`` with the sum, then answers it."""

    def handler(body):
        messages = body["messages"]
        tools_done = [m for m in messages if m["role"] == "tool"]
        if not tools_done:
            return tool_call_reply("calc__add", {"a": 20, "b": 22})
        if len(tools_done) == 1:
            return tool_call_reply("web__echo", {"text": tools_done[0]["content"]})
        return final_answer_reply(tools_done[1]["content"], "the MCP tools said so")

    return handler


def test_run_eval_offers_mcp_tools_over_stdio_and_streamable_http_with_results_in_the_log(endpoint, tmp_path):
    path = tmp_path / "sums.jsonl"
    lines = [
        {"question_id": f"q{i}", "question": f"What is 20 + 22? ({i})", "answer": "42", "task_type": "math"}
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    stdio = json.dumps(stdio_spec(tmp_path / "starts"))
    with http_server() as url, StubLLMServer(calculator_then_echo(lines)) as server:
        endpoint(server)
        call_command(
            "run_eval",
            "--no-review",
            str(path),
            "--run-id",
            "mcp",
            "--mcp",
            f"calc={stdio}",
            "--mcp",
            f"web={url}",
        )

    run = Run.objects.get(run_id="mcp")
    assert (run.metrics["accuracy"], run.metrics["correct"]) == (1.0, 3)
    results = [
        e.data["result"]
        for e in TurnEvent.objects.filter(turn__predictions__run=run, type=EventType.TOOL_RESULT).order_by(
            "turn", "seq"
        )
    ]
    assert [(r["name"], r["output"]) for r in results if r["name"] != "final_answer"] == [
        ("calc__add", "42"),
        ("web__echo", "42"),
    ] * 3
    assert starts(tmp_path / "starts") == 1  # one stdio server for the whole run
    assert [(s["name"], s["transport"]) for s in run.config["mcp_servers"]] == [
        ("calc", "stdio"),
        ("web", "streamable-http"),
    ]
    assert run.config["mcp_servers"][0]["env"] == ["AGENTLAB_TEST_MCP_STARTS_FILE", "PYTHONPATH"]
    assert run.config["run_mcp_servers"] == ["calc", "web"]


def test_resuming_with_other_plugins_is_refused_and_without_them_keeps_the_run_s(endpoint, tmp_path):
    path, rows = hotpot(tmp_path, 2)
    with StubLLMServer(researcher(rows, quoting={0, 1})) as server:
        endpoint(server)
        call_command(
            "run_eval", "--no-review", str(path), "--run-id", "same", "--limit", "1", "--plugin", "example"
        )
        with pytest.raises(CommandError) as refused:
            call_command(
                "run_eval", "--no-review", str(path), "--run-id", "same", "--plugin", "example_prompt"
            )
        call_command("run_eval", "--no-review", str(path), "--run-id", "same")

    assert refused.value.returncode == 2
    assert "run 'same' was started with --plugin ['example'], not ['example_prompt']" in str(refused.value)
    run = Run.objects.get(run_id="same")
    assert run.metrics["checks"]["evidence_quotes_a_document"]["turns"] == 2  # the resumed example too


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--plugin", "no_such_plugin"], "--plugin no_such_plugin: no plugin 'no_such_plugin'"),
        (["--mcp", "calc"], "--mcp 'calc': expected NAME=URL"),
        (["--mcp", "a=http://127.0.0.1:1/mcp", "--mcp", "a=srv"], "--mcp names a server twice: a, a"),
    ],
)
def test_bad_plugin_and_mcp_options_are_exit_2_before_any_llm_call(endpoint, tmp_path, argv, message):
    path, _ = hotpot(tmp_path, 1)
    with StubLLMServer(lambda body: final_answer_reply("x")) as server:
        endpoint(server)
        with pytest.raises(CommandError) as refused:
            call_command("run_eval", "--no-review", str(path), *argv)
        assert server.request_count == 0

    assert refused.value.returncode == 2
    assert message in str(refused.value)
    assert Run.objects.count() == 0


def test_an_mcp_tool_that_needs_approval_stops_an_evaluated_example(endpoint, tmp_path):
    path = tmp_path / "sum.jsonl"
    line = {"question_id": "q0", "question": "What is 20 + 22?", "answer": "42", "task_type": "math"}
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    guarded = json.dumps({**stdio_spec(), "approval": ["add"]})
    with StubLLMServer(lambda body: tool_call_reply("calc__add", {"a": 20, "b": 22})) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", "guarded", "--mcp", f"calc={guarded}")

    prediction = Prediction.objects.get(run__run_id="guarded")
    assert prediction.stop_reason == "approval_required"
    assert not TurnEvent.objects.filter(turn=prediction.turn, type=EventType.TOOL_RESULT).exists()
    assert Run.objects.get(run_id="guarded").config["mcp_servers"][0]["approval"] == ["add"]


def _sum_file(tmp_path: Path) -> Path:
    path = tmp_path / "sum.jsonl"
    line = {"question_id": "q0", "question": "What is 20 + 22?", "answer": "42", "task_type": "math"}
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return path


def test_an_mcp_server_that_cannot_start_stops_the_run_before_any_example(endpoint, tmp_path):
    """Before: every example failed one by one, the run ended success (exit
    0) and the child's raw traceback was printed."""
    broken = "python -c \"import sys; sys.stderr.write('Traceback ...\\nKeyError: TOKEN\\n'); sys.exit(3)\""
    with StubLLMServer(lambda body: final_answer_reply("42")) as server:
        endpoint(server)
        with pytest.raises(CommandError) as refused:
            call_command("run_eval", "--no-review", str(_sum_file(tmp_path)), "--mcp", f"calc={broken}")
        assert server.request_count == 0
    assert refused.value.returncode == 2
    message = str(refused.value)
    assert message.startswith("MCP server 'calc' (stdio python -c ")
    assert message.endswith("; it said: KeyError: TOKEN; no example was run")
    assert "\n" not in message and Run.objects.count() == 0


def test_the_readme_s_mcp_example_runs_without_an_activated_virtualenv(endpoint, tmp_path, monkeypatch):
    """``python -m …`` is the interpreter running AgentLab, whatever PATH says;
    a server gets AgentLab's variables only when ``inherit_env`` names them."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no virtualenv's python on PATH, nor any python
    monkeypatch.setenv("AGENTLAB_TEST_MCP_STARTS_FILE", str(tmp_path / "inherited"))
    spec = json.dumps(
        {"command": "python -m agentlab.testing.mcp_server", "inherit_env": ["AGENTLAB_TEST_MCP_STARTS_FILE"]}
    )
    with StubLLMServer(lambda body: tool_call_reply("calc__add", {"a": 20, "b": 22})) as server:
        endpoint(server)
        call_command(
            "run_eval", "--no-review", str(_sum_file(tmp_path)), "--run-id", "readme", "--mcp", f"calc={spec}"
        )
    assert starts(tmp_path / "inherited") == 1  # started once, and it saw the variable
    result = TurnEvent.objects.filter(
        turn__predictions__run__run_id="readme", type=EventType.TOOL_RESULT
    ).first()
    assert result is not None and result.data["result"]["output"] == "42"
    assert Run.objects.get(run_id="readme").config["mcp_servers"][0]["inherit_env"] == [
        "AGENTLAB_TEST_MCP_STARTS_FILE"
    ]

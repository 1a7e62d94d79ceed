"""``run_eval``'s ``--sample N --seed S`` (a seeded random subset, in the
run's config), ``--temperature`` and ``--system-prompt`` /
``--system-prompt-file`` (as an experiment's variant has them), and their bad
input: exit 2 with the reason, nothing written (issue 49)."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply
from evaluation.models import Prediction, Run
from tests.evaluation.run.process_support import subprocess_env
from tests.evaluation.run.test_run_eval import ROOT, rows
from tests.shared_data import dataset_path
from turns.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)

ARC = dataset_path("arc-challenge-test-100.jsonl")


def answer_a(body):
    return final_answer_reply("A", "stub evidence", "stub reasoning", usage=(10, 5))


def test_sample_draws_the_seeded_subset_and_records_it(endpoint):
    with StubLLMServer(answer_a) as server:
        endpoint(server)
        call_command("run_eval", str(ARC), "--no-review", "--run-id", "s7", "--sample", "5", "--seed", "7")
        call_command(
            "run_eval", str(ARC), "--no-review", "--run-id", "s7-again", "--sample", "5", "--seed", "7"
        )
        call_command("run_eval", str(ARC), "--no-review", "--run-id", "s8", "--sample", "5", "--seed", "8")
    every = [r["question_id"] for r in rows(ARC, 100)]
    # what random.Random(7) picks from the file's positions, in the file's order
    expected = [every[i] for i in sorted(random.Random(7).sample(range(len(every)), 5))]

    def ids(run_id: str) -> list[str]:
        return list(
            Prediction.objects.filter(run__run_id=run_id).order_by("example__position")
            .values_list("example__external_id", flat=True)
        )  # fmt: skip

    assert ids("s7") == expected == ids("s7-again")
    assert ids("s8") != expected and len(ids("s8")) == 5
    assert Run.objects.get(run_id="s7").config["sample"] == {"n": 5, "seed": 7}


def test_temperature_and_system_prompt_reach_every_call(endpoint, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("You answer science questions with one letter.", encoding="utf-8")
    with StubLLMServer(answer_a) as server:
        endpoint(server)
        call_command(
            "run_eval", str(ARC), "--no-review", "--run-id", "t", "--limit", "2",
            "--temperature", "0.7", "--system-prompt-file", str(prompt),
        )  # fmt: skip
        bodies = list(server.requests)
    assert len(bodies) == 2
    for body in bodies:
        assert body["temperature"] == 0.7
        assert body["messages"][0]["content"].startswith("You answer science questions with one letter.")
    run = Run.objects.get(run_id="t")
    assert run.config["agent_options"] == {
        "system_prompt": "You answer science questions with one letter.",
        "temperature": 0.7,
    }
    assert {tuple(sorted(t.agent_options)) for t in Turn.objects.all()} == {("system_prompt", "temperature")}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sample", "0"], "--sample must be between 1 and 2147483647, got 0"),
        (["--sample", "3", "--limit", "2"], "give --limit (the first N examples) or --sample"),
        (["--seed", "3"], "--seed goes with --sample"),
        (["--temperature", "2.5"], "--temperature must be between 0 and 2, got 2.5"),
        (["--temperature", "-0.1"], "--temperature must be between 0 and 2, got -0.1"),
        (
            ["--system-prompt-file", "/no/such/prompt.txt"],
            "--system-prompt-file /no/such/prompt.txt: cannot read it",
        ),
        (["--system-prompt", "  "], "--system-prompt is blank"),
        (
            ["--system-prompt", "x", "--system-prompt-file", "y"],
            "give --system-prompt or --system-prompt-file",
        ),
    ],
)
def test_bad_options_exit_2_and_write_nothing(endpoint, argv, message):
    with StubLLMServer(answer_a) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", str(ARC), "--no-review", "--run-id", "bad", *argv)
        assert server.request_count == 0
    assert excinfo.value.returncode == 2 and message in str(excinfo.value)
    assert Run.objects.count() == 0 and Turn.objects.count() == 0


def test_a_seed_that_is_not_an_integer_is_refused_by_the_command_line():
    with StubLLMServer(answer_a) as server:
        done = subprocess.run(
            [sys.executable, "manage.py", "run_eval", "demo", "--sample", "3", "--seed", "abc"],
            cwd=ROOT, env=subprocess_env(server), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert server.request_count == 0
    assert done.returncode == 2
    assert "argument --seed: invalid int value: 'abc'" in done.stderr
    assert Run.objects.count() == 0


def test_the_demo_ends_with_what_it_got_wrong_and_the_next_steps(endpoint, capsys):
    with StubLLMServer(answer_a) as server:
        endpoint(server)
        call_command("run_eval", "demo", "--no-review", "--run-id", "demo-next")
    out = capsys.readouterr().out
    run = Run.objects.get(run_id="demo-next")
    wrong = Prediction.objects.filter(run=run, correct=False).select_related("example")
    assert wrong.exists()
    assert f"Wrong answers ({wrong.count()}):" in out
    for p in wrong:
        assert f"  {p.example.external_id} ({p.task_type}, epoch 1): answered 'A'; gold " in out
    assert "  .venv/bin/python manage.py createsuperuser" in out
    assert f"http://127.0.0.1:8000/admin/evaluation/run/{run.pk}/report/ (this run's report)" in out
    assert out.rstrip().endswith("(the chat)")

"""Scorer plugins (``agentlab_scorers``): a plugin's scorer named by a dataset's
lines, by ``import_dataset --scorer`` for an experiment, and by ``rescore
--scorer``, against a stub OpenAI-compatible model over real HTTP; a scorer
that raises or returns no verdict leaves its prediction unscored with the
reason; an unknown scorer or one that does not load is exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from evaluation.models import Dataset, Prediction, Run

pytestmark = pytest.mark.django_db(transaction=True)

SCORERS = "tests.agent.plugins.sample_plugins:Scorers"
BROKEN = "tests.agent.plugins.sample_plugins:BrokenScorers"

#: question → (gold, the agent's answer, the line's scorer)
CASES = {
    "Which city hosted the 1900 Olympics?": ("Paris", "Paris, France", "first_word"),
    "Who wrote Hamlet?": ("William Shakespeare", "Shakespeare", "first_word"),
    "What is the capital of Spain?": ("Madrid", "Madrid", "raises"),
    "Which river flows through Vienna?": ("Danube", "Danube", "garbled"),
    "What is the largest planet?": ("Jupiter", "Jupiter", "exact"),
}


def agent(body: dict):
    return final_answer_reply(CASES[last_user_text(body)][1], "e", "r", usage=(10, 5))


def write_dataset(tmp_path: Path, *, scorers: bool = True, name: str = "plugged") -> Path:
    path = tmp_path / f"{name}.jsonl"
    lines = [
        {
            "question_id": f"q{i}",
            "question": q,
            "answer": gold,
            "task_type": "document_qa",
            **({"scorer": scorer} if scorers else {}),
        }
        for i, (q, (gold, _, scorer)) in enumerate(CASES.items())
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def verdicts(run_id: str) -> dict[str, tuple[str, float | None, bool | None, str]]:
    rows = Prediction.objects.filter(run__run_id=run_id).select_related("example")
    return {p.example.external_id: (p.scorer, p.score, p.correct, p.score_explanation) for p in rows}


def test_run_eval_scores_each_line_with_the_plugin_scorer_it_names(endpoint, settings, tmp_path):
    settings.AGENTLAB_PLUGINS = [SCORERS]
    with StubLLMServer(agent) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(write_dataset(tmp_path)), "--run-id", "plugged")
    run = Run.objects.get(run_id="plugged")
    assert run.status == "success"
    got = verdicts("plugged")
    assert got["q0"] == ("first_word", 1.0, True, "'paris' against 'paris'")
    assert got["q1"] == ("first_word", 0.0, False, "'shakespeare' against 'william'")
    assert got["q2"] == ("raises", None, None, "scorer 'raises' raised ZeroDivisionError: scorer bug")
    assert got["q3"] == ("garbled", None, None, "scorer 'garbled' returned 42, not a verdict with a score")
    assert got["q4"][:3] == ("exact", 1.0, True)
    # the unscored two are out of the denominator: 2 right of 3 scored
    assert run.metrics["scored"] == 3 and run.metrics["unscored"] == 2
    assert run.metrics["accuracy"] == pytest.approx(2 / 3)
    described = {s["scorer"]: s for s in run.config["scorer_plugins"]}
    assert set(described) == {"first_word", "raises", "garbled"}
    assert described["first_word"]["plugin"] == SCORERS
    assert described["first_word"]["version"] == "2.1.0"


def test_rescore_with_a_plugin_scorer_gets_the_answer_steps_and_usage(endpoint, settings, tmp_path):
    settings.AGENTLAB_PLUGINS = [SCORERS]
    with StubLLMServer(agent) as server:
        endpoint(server)
        call_command(
            "run_eval", "--no-review", str(write_dataset(tmp_path, scorers=False)), "--run-id", "src"
        )
    call_command("rescore", "src", "--scorer", "step_budget", "--run-id", "budget")
    run = Run.objects.get(run_id="budget")
    assert run.config["scorer"] == "step_budget"
    assert run.config["scorer_plugin"]["plugin"] == SCORERS
    assert run.config["scorer_plugin"]["version"] == "2.1.0"
    assert {v for v in verdicts("budget").values()} == {("step_budget", 1.0, True, "1 steps, 10 tokens in")}
    call_command("rescore", "src", "--scorer", "first_word", "--run-id", "words")
    assert Run.objects.get(run_id="words").metrics["accuracy"] == pytest.approx(4 / 5)


def test_an_experiment_on_a_dataset_scored_by_a_plugin(endpoint, settings, tmp_path):
    settings.AGENTLAB_PLUGINS = [SCORERS]
    data = write_dataset(tmp_path, scorers=False)
    call_command("import_dataset", str(data), "--name", "words", "--scorer", "first_word")
    assert Dataset.objects.get(name="words").scorer == "first_word"
    path = tmp_path / "experiment.toml"
    path.write_text(
        'name = "plugin scorer"\ndataset = "words"\nreview = false\n'
        '\n[[variant]]\nname = "one"\nmodel = "m"\n',
        encoding="utf-8",
    )
    with StubLLMServer(agent) as server:
        endpoint(server)
        call_command("run_experiment", str(path))
    run = Run.objects.get(experiment__name="plugin scorer")
    assert {v[0] for v in verdicts(run.run_id).values()} == {"first_word"}
    assert run.metrics["accuracy"] == pytest.approx(4 / 5)
    assert [s["scorer"] for s in run.config["scorer_plugins"]] == ["first_word"]


def test_unknown_or_unloadable_scorers_are_exit_2_and_nothing_is_written(endpoint, settings, tmp_path):
    data = write_dataset(tmp_path)
    with StubLLMServer(agent) as server:
        endpoint(server)
        with pytest.raises(CommandError, match="unknown scorer 'first_word'") as excinfo:
            call_command("run_eval", "--no-review", str(data), "--run-id", "none")
        assert excinfo.value.returncode == 2
        settings.AGENTLAB_PLUGINS = [BROKEN]
        with pytest.raises(CommandError, match="scorer registry is down") as excinfo:
            call_command("run_eval", "--no-review", str(data), "--run-id", "none")
        assert excinfo.value.returncode == 2
        assert server.request_count == 0
    assert not Run.objects.exists() and not Dataset.objects.filter(name="plugged").exists()


SHORT = "tests.agent.plugins.sample_plugins:ShortAnswer"


def test_fail_on_check_gates_the_run_on_the_checks_pass_rate(endpoint, tmp_path):
    data = write_dataset(tmp_path, scorers=False)  # 4 of the 5 answers are one word
    with StubLLMServer(agent) as server:
        endpoint(server)
        argv = ["run_eval", "--no-review", str(data), "--plugin", SHORT]
        call_command(*argv, "--run-id", "lenient", "--fail-on-check", "short_answer:0.8")
        with pytest.raises(CommandError) as excinfo:
            call_command(*argv, "--run-id", "strict", "--fail-on-check", "short_answer")
        with pytest.raises(CommandError) as never:
            call_command(*argv, "--run-id", "typo", "--fail-on-check", "short_anwser:0.5")
    assert Run.objects.get(run_id="lenient").metrics["checks"]["short_answer"]["pass_rate"] == 0.8
    assert excinfo.value.returncode == 1
    # statsmodels' proportion_confint(4, 5, method="wilson") = (0.3755, 0.9638)
    assert str(excinfo.value) == (
        "check 'short_answer' passed 4/5 (0.800, 95% Wilson interval 0.376–0.964), "
        "below --fail-on-check short_answer:1"
    )
    assert never.value.returncode == 1
    assert "check 'short_anwser' never ran" in str(never.value)


def test_an_experiments_fail_on_check_gates_its_variants(endpoint, tmp_path):
    call_command("import_dataset", str(write_dataset(tmp_path, scorers=False)), "--name", "words")
    path = tmp_path / "experiment.toml"
    path.write_text(
        f'name = "gated"\ndataset = "words"\nreview = false\nplugins = ["{SHORT}"]\n'
        'fail_on_check = ["short_answer:0.9"]\n\n[[variant]]\nname = "one"\nmodel = "m"\n',
        encoding="utf-8",
    )
    with StubLLMServer(agent) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_experiment", str(path))
    assert excinfo.value.returncode == 1
    assert "check 'short_answer' passed 4/5" in str(excinfo.value)


def test_fail_on_check_without_a_check_giving_plugin_or_with_a_bad_min_is_exit_2(endpoint, tmp_path):
    data = write_dataset(tmp_path, scorers=False)
    with StubLLMServer(agent) as server:
        endpoint(server)
        for extra, message in (
            ([], "no plugin of this run provides checks"),
            (["--plugin", SCORERS], "no plugin of this run provides checks"),
            (["--plugin", SHORT, "--fail-on-check", "short_answer:1.5"], "MIN must be a pass rate in [0, 1]"),
        ):
            with pytest.raises(CommandError, match=message.replace("[", r"\[").replace("]", r"\]")) as err:
                call_command("run_eval", "--no-review", str(data), "--fail-on-check", "short_answer", *extra)
            assert err.value.returncode == 2
        assert server.request_count == 0
    # no run is written (the file itself is registered as a dataset first, as for a bad --plugin)
    assert not Run.objects.exists()

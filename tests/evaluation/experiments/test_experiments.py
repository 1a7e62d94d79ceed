"""``run_experiment FILE.toml``: every variant one run, driven at once against
a stub endpoint whose accuracy depends on the model name; resume, adding a
variant, a changed variant, the baseline gate, and every bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.stub_llm import StubLLMServer, error_reply, final_answer_reply, last_user_text
from evaluation.models import Experiment, Prediction, Run
from tests.api_support import ApiClient
from tests.evaluation.run.process_support import subprocess_env
from tests.shared_data import dataset_path
from turns.models import Turn, TurnEvent

pytestmark = pytest.mark.django_db(transaction=True)

GSM8K = dataset_path("gsm8k-test-200.jsonl")
ROOT = Path(__file__).resolve().parents[3]
#: how many of the first 40 examples each model answers right (the first N)
RIGHT = {"strong": 30, "good": 29, "weak": 5}


class ModelOracle:
    """A stub handler: model M answers the first ``RIGHT[M]`` examples right
    and the rest wrong; it records each request's model, system prompt and
    temperature."""

    def __init__(self, latency: float = 0.0) -> None:
        with GSM8K.open(encoding="utf-8") as f:
            lines = [json.loads(line) for _, line in zip(range(40), f, strict=False)]
        self.by_question = {row["question"]: (i, row) for i, row in enumerate(lines)}
        self.latency = latency
        self.seen: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Any:
        i, row = self.by_question[last_user_text(body)]
        model = body["model"]
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        self.seen.append({"model": model, "system": system, "temperature": body.get("temperature")})
        answer = row["answer"] if i < RIGHT.get(model, 0) else str(int(row["answer"]) + 1)
        return final_answer_reply(answer, "stub evidence", "", usage=(10, 5), delay=self.latency)


@pytest.fixture
def gsm40(tmp_path: Path) -> str:
    """The first 40 GSM8K examples registered as dataset ``gsm40``."""
    with GSM8K.open(encoding="utf-8") as f:
        lines = [line for _, line in zip(range(40), f, strict=False)]
    path = tmp_path / "gsm40.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    call_command("import_dataset", str(path), "--name", "gsm40")
    return "gsm40"


def experiment_file(tmp_path: Path, variants: str, *, head: str = "", name: str = "Models A/B") -> Path:
    path = tmp_path / "experiment.toml"
    path.write_text(
        f'name = "{name}"\ndataset = "gsm40"\nreview = false\nconcurrency = 4\n{head}\n{variants}',
        encoding="utf-8",
    )
    return path


THREE = """
[[variant]]
name = "Strong"
model = "strong"
system_prompt = "You are the strong variant."

[[variant]]
name = "good"
model = "good"
temperature = 0.5

[[variant]]
name = "weak"
model = "weak"
"""


def test_every_variant_is_one_run_with_its_own_options(endpoint, gsm40, tmp_path, capsys, owner):
    oracle = ModelOracle()
    with StubLLMServer(oracle) as server:
        endpoint(server)
        call_command("run_experiment", str(experiment_file(tmp_path, THREE)))
    experiment = Experiment.objects.get(name="Models A/B")
    assert experiment.slug == "models-a-b"
    assert (experiment.dataset.name, experiment.dataset_version) == ("gsm40", 1)
    runs = {run.variant: run for run in Run.objects.filter(experiment=experiment)}
    assert {v: r.run_id for v, r in runs.items()} == {
        "Strong": "models-a-b.strong",
        "good": "models-a-b.good",
        "weak": "models-a-b.weak",
    }
    for variant, run in runs.items():
        assert run.status == "success"
        assert (run.metrics["total"], run.metrics["correct"]) == (40, RIGHT[run.config["model"]]), variant
        assert run.config["variant"]["name"] == variant
    assert runs["Strong"].config["variant"]["options"] == {
        "model": "strong",
        "system_prompt": "You are the strong variant.",
    }
    assert runs["good"].config["agent_options"] == {"temperature": 0.5}
    # the variant's system prompt replaced the default job description; its temperature was sent
    by_model: dict[str, list[dict[str, Any]]] = {}
    for request in oracle.seen:
        by_model.setdefault(request["model"], []).append(request)
    assert all(r["system"].startswith("You are the strong variant.") for r in by_model["strong"])
    assert not any("strong variant" in r["system"] for r in by_model["good"] + by_model["weak"])
    assert {r["temperature"] for r in by_model["good"]} == {0.5}
    assert {r["temperature"] for r in by_model["weak"]} == {None}
    assert len(oracle.seen) == 120
    out = capsys.readouterr()
    assert "run models-a-b.weak on gsm40@1: 40 to do" in out.err
    # the runs API names each run's experiment and variant, and filters by experiment
    listed = ApiClient(owner).get("/api/runs?experiment=Models%20A/B").json()
    assert sorted((r["run_id"], r["experiment"], r["variant"]) for r in listed["items"]) == [
        ("models-a-b.good", "Models A/B", "good"),
        ("models-a-b.strong", "Models A/B", "Strong"),
        ("models-a-b.weak", "Models A/B", "weak"),
    ]


def test_again_drives_nothing_and_a_new_variant_only_itself(endpoint, gsm40, tmp_path, capsys):
    oracle = ModelOracle()
    with StubLLMServer(oracle) as server:
        endpoint(server)
        call_command("run_experiment", str(experiment_file(tmp_path, THREE)))
        assert server.request_count == 120
        call_command("run_experiment", str(experiment_file(tmp_path, THREE)))
        assert server.request_count == 120
        err = capsys.readouterr().err
        assert "variant weak: run models-a-b.weak is finished; nothing to do" in err
        added = THREE + '\n[[variant]]\nname = "weak, again"\nmodel = "weak"\nmax_steps = 3\n'
        call_command("run_experiment", str(experiment_file(tmp_path, added)))
        assert server.request_count == 160
    assert {m["model"] for m in oracle.seen[120:]} == {"weak"}
    run = Run.objects.get(run_id="models-a-b.weak-again")
    assert (run.variant, run.config["max_steps"], run.metrics["correct"]) == ("weak, again", 3, 5)
    assert Prediction.objects.filter(run__experiment__name="Models A/B").count() == 160


def test_a_changed_variant_is_refused_and_nothing_is_driven(endpoint, gsm40, tmp_path):
    with StubLLMServer(ModelOracle()) as server:
        endpoint(server)
        call_command("run_experiment", str(experiment_file(tmp_path, THREE)))
        changed = THREE.replace('model = "weak"', 'model = "strong"')
        with pytest.raises(CommandError) as excinfo:
            call_command("run_experiment", str(experiment_file(tmp_path, changed)))
        assert server.request_count == 120
    message = str(excinfo.value)
    assert excinfo.value.returncode == 2
    assert "experiment.toml: variant 'weak': its options changed since its run (model 'weak' → 'strong')" in (
        message
    )
    assert Run.objects.get(run_id="models-a-b.weak").config["model"] == "weak"


def test_the_baseline_gates_every_other_variant(endpoint, gsm40, tmp_path):
    with StubLLMServer(ModelOracle()) as server:
        endpoint(server)
        path = experiment_file(tmp_path, THREE, head='baseline = "good"')
        with pytest.raises(CommandError) as excinfo:
            call_command(
                "run_experiment", str(path), "--fail-on-regression", "--json", str(tmp_path / "b.json")
            )
    assert excinfo.value.returncode == 1
    # the leaderboard is written before the gate's exit
    board = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))
    assert [v["name"] for v in board["variants"]] == ["Strong", "good", "weak"]
    assert board["top_group"] == ["Strong", "good"]
    assert {(p["a"], p["b"]) for p in board["pairs"]} == {
        ("Strong", "good"),
        ("Strong", "weak"),
        ("good", "weak"),
    }
    assert "variant 'weak': significant regression against baseline models-a-b.good" in str(excinfo.value)
    weak, strong = Run.objects.get(run_id="models-a-b.weak"), Run.objects.get(run_id="models-a-b.strong")
    assert (weak.regression, weak.baseline.run_id) == (True, "models-a-b.good")
    assert (strong.regression, strong.baseline.run_id) == (False, "models-a-b.good")
    assert Run.objects.get(run_id="models-a-b.good").regression is None


BAD = [
    ("name = [unclosed", "not a TOML file"),
    (
        'name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "a"\nmodle = "m"\n',
        "unknown key 'modle' (did you mean 'model'?)",
    ),
    (
        'name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "a"\nmodel = "m"\n'
        '[[variant]]\nname = "a"\nmodel = "n"\n',
        "variant 'a': two variants have the name",
    ),
    (
        'name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "A b"\nmodel = "m"\n'
        '[[variant]]\nname = "a-B"\nmodel = "n"\n',
        "two variants have the run id of 'A b' (both 'a-b')",
    ),
    (
        'name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "bare"\n',
        "variant 'bare': the variant overrides nothing",
    ),
    (
        'name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "a"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "AGENTLAB_TEST_UNSET_KEY"\n',
        "api_key_env names 'AGENTLAB_TEST_UNSET_KEY', which is not set in the environment",
    ),
    ('name = "x"\ndataset = "nope"\n[[variant]]\nname = "a"\nmodel = "m"\n', "dataset: "),
    (
        'name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "a"\nmax_steps = "3"\n',
        "max_steps: expected an integer",
    ),
    (
        'name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "a"\napi_key = "sk-1"\n',
        "name its environment variable",
    ),
    ('name = "x"\ndataset = "gsm40"\nconcurrency = 0\n[[variant]]\nname = "a"\nmodel = "m"\n', "concurrency"),
    ('dataset = "gsm40"\n[[variant]]\nname = "a"\nmodel = "m"\n', "name: a name is required"),
    ('name = "x"\ndataset = "gsm40"\nbaseline = "z"\n[[variant]]\nname = "a"\nmodel = "m"\n', "baseline 'z'"),
    (
        'name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "a"\nmax_steps = 99999999999\n',
        "variant 'a': max_steps must be between 1 and 1000, got 99999999999",
    ),
    (
        'name = "x"\ndataset = "gsm40"\nlimit = 99999999999\n[[variant]]\nname = "a"\nmodel = "m"\n',
        "limit must be",
    ),
    ('name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "a"\nmodel = ""\n', "model is empty"),
    ('name = "x\\ty"\ndataset = "gsm40"\n[[variant]]\nname = "a"\nmodel = "m"\n', "control character"),
    (
        'name = "x"\ndataset = "gsm40"\n[[variant]]\nname = "a"\nmcp = ["calc=/nonexistent/binary"]\n',
        "variant 'a': MCP server 'calc'",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[f"bad-{i}" for i in range(len(BAD))])
def test_bad_input_is_exit_2_naming_the_file_and_key_and_writes_nothing(
    endpoint, gsm40, tmp_path, text, expected
):
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    os.environ.pop("AGENTLAB_TEST_UNSET_KEY", None)
    with StubLLMServer(ModelOracle()) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_experiment", str(path))
        assert server.request_count == 0
    assert excinfo.value.returncode == 2
    assert str(excinfo.value).startswith(str(path)), str(excinfo.value)
    assert expected in str(excinfo.value)
    assert (Experiment.objects.count(), Run.objects.count(), Turn.objects.count()) == (0, 0, 0)


def test_a_missing_file_is_exit_2(tmp_path):
    with pytest.raises(CommandError) as excinfo:
        call_command("run_experiment", str(tmp_path / "none.toml"))
    assert excinfo.value.returncode == 2
    assert "none.toml: cannot read the experiment file" in str(excinfo.value)


def test_resume_after_a_kill_mid_experiment_is_exact(gsm40, tmp_path):
    path = experiment_file(tmp_path, THREE)
    done = Prediction.objects.filter(run__experiment__name="Models A/B", completed_at__isnull=False)
    with StubLLMServer(ModelOracle(latency=0.1)) as server:
        cmd = [sys.executable, "manage.py", "run_experiment", str(path)]
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=subprocess_env(server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 60
            while done.count() < 30:
                assert time.monotonic() < deadline, "the experiment made no progress"
                assert proc.poll() is None, "the experiment ended before it was killed"
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        before = done.count()
        assert 30 <= before < 120
        # all three variants were under way at once (one budget, shared)
        assert set(done.values_list("run__variant", flat=True)) == {"Strong", "good", "weak"}
        resumed = subprocess.run(
            cmd, cwd=ROOT, env=subprocess_env(server), capture_output=True, text=True, timeout=120
        )
        assert resumed.returncode == 0, resumed.stderr
        # a request in flight at the kill is asked again; nothing else is
        assert 120 <= server.request_count <= 120 + 4
    for run in Run.objects.filter(experiment__name="Models A/B"):
        assert run.predictions.count() == 40
        assert run.predictions.filter(completed_at__isnull=True).count() == 0
        assert (run.metrics["total"], run.metrics["correct"]) == (40, RIGHT[run.config["model"]])
        assert run.metrics["tokens"] == {"input": 400, "output": 200, "unknown_rows": 0}
        for turn in Turn.objects.filter(predictions__run=run):
            seqs = list(TurnEvent.objects.filter(turn=turn).values_list("seq", flat=True))
            assert seqs == list(range(1, len(seqs) + 1))


def test_a_changed_shared_option_is_refused_and_a_free_one_is_not(endpoint, gsm40, tmp_path):
    two = THREE.split('[[variant]]\nname = "weak"')[0]
    with StubLLMServer(ModelOracle()) as server:
        endpoint(server)
        call_command("run_experiment", str(experiment_file(tmp_path, two, head="limit = 10")))
        with pytest.raises(CommandError) as excinfo:
            call_command(
                "run_experiment", str(experiment_file(tmp_path, two, head="limit = 10\nmax_steps = 4"))
            )
        assert excinfo.value.returncode == 2
        assert "experiment.toml: max_steps: the shared options changed since the experiment's runs" in str(
            excinfo.value
        )
        assert server.request_count == 20
        # more examples change how much is run, not what is measured
        call_command("run_experiment", str(experiment_file(tmp_path, two, head="limit = 12")))
        assert server.request_count == 24
    assert {r.config["max_steps"] for r in Run.objects.all()} == {6}


def test_a_jsonl_dataset_resumes_and_review_follows_the_provider_default(endpoint, tmp_path, settings):
    settings.AGENTLAB_REVIEW = False
    lines = GSM8K.read_text(encoding="utf-8").splitlines(keepends=True)[:40]
    (tmp_path / "sums.jsonl").write_text("".join(lines), encoding="utf-8")
    path = tmp_path / "file.toml"
    variant = '[[variant]]\nname = "a"\nmodel = "strong"\n'
    path.write_text(
        f'name = "File"\ndataset = "{tmp_path / "sums.jsonl"}"\nlimit = 3\n{variant}', encoding="utf-8"
    )
    with StubLLMServer(ModelOracle()) as server:
        endpoint(server)
        call_command("run_experiment", str(path))
        call_command("run_experiment", str(path))  # the same path again: the same experiment, nothing to do
        assert server.request_count == 3
    run = Run.objects.get(run_id="file.a")
    # no review key: AGENTLAB_REVIEW's (the file did not turn review on behind the user's back)
    assert (run.dataset.name, run.config["review"]) == ("sums", False)


def test_run_eval_refuses_a_variant_s_run_and_retry_errors_runs_its_errors_again(endpoint, gsm40, tmp_path):
    oracle = ModelOracle()
    broken = {"on": True}

    def flaky(body: dict[str, Any]) -> Any:
        if broken["on"] and last_user_text(body).startswith(oracle_questions()[0]):
            return error_reply(400, "broken for now", type="invalid_request_error")
        return oracle(body)

    def oracle_questions() -> list[str]:
        return [q for q, (i, _) in oracle.by_question.items() if i == 0]

    path = experiment_file(tmp_path, '[[variant]]\nname = "one"\nmodel = "strong"\n', head="limit = 4")
    with StubLLMServer(flaky) as server:
        endpoint(server)
        call_command("run_experiment", str(path))
        run = Run.objects.get(run_id="models-a-b.one")
        assert (run.metrics["correct"], run.metrics["errors"]) == (3, 1)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "gsm40", "--run-id", "models-a-b.one", "--no-review")
        assert excinfo.value.returncode == 2
        assert "is variant 'one' of experiment 'Models A/B'" in str(excinfo.value)
        broken["on"] = False
        call_command("run_experiment", str(path), "--retry-errors")
    run.refresh_from_db()
    assert (run.metrics["correct"], run.metrics["errors"], run.predictions.count()) == (4, 0, 4)

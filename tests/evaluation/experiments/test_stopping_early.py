"""``run_experiment --stop-when-decided``: rounds of a batch of examples on the
stub endpoint, stopped once the confidence sequence decides the top group;
the examples not reached are not run (no prediction, not in any accuracy
or comparison); a later run without the flag runs them; bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from evaluation.experiments.ranking import experiment_get, leaderboard, leaderboard_json
from evaluation.experiments.sequential import confidence_sequence
from evaluation.models import Experiment, Prediction, Run
from tests.api_support import ApiClient
from tests.shared_data import dataset_path

pytestmark = pytest.mark.django_db(transaction=True)

GSM8K = dataset_path("gsm8k-test-200.jsonl")
#: which examples (by position) each model answers right
RIGHT = {
    "strong": lambda i: i % 10 < 9,  # 90 %
    "twin": lambda i: i % 10 < 9,  # the same answers: equal to strong
    "weak": lambda i: i % 10 < 2,  # 20 %
}


class Oracle:
    """Model M answers example i right when ``RIGHT[M](i)``; counts requests per model."""

    def __init__(self) -> None:
        with GSM8K.open(encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        self.by_question = {row["question"]: (i, row) for i, row in enumerate(rows)}
        self.asked: dict[str, set[int]] = {}

    def __call__(self, body: dict[str, Any]) -> Any:
        i, row = self.by_question[last_user_text(body)]
        self.asked.setdefault(body["model"], set()).add(i)
        right = RIGHT[body["model"]](i)
        answer = row["answer"] if right else str(int(row["answer"]) + 1)
        return final_answer_reply(answer, "stub evidence", "", usage=(10, 5))


@pytest.fixture
def gsm200() -> str:
    call_command("import_dataset", str(GSM8K), "--name", "gsm200")
    return "gsm200"


def write(tmp_path: Path, *models: str, head: str = "") -> Path:
    path = tmp_path / "seq.toml"
    variants = "".join(f'\n[[variant]]\nname = "{m}"\nmodel = "{m}"\n' for m in models)
    path.write_text(
        f'name = "Sequential"\ndataset = "gsm200"\nreview = false\nconcurrency = 4\n{head}\n{variants}',
        encoding="utf-8",
    )
    return path


def test_a_clearly_better_variant_stops_early_and_the_rest_is_not_run(
    endpoint, gsm200, tmp_path, capsys, owner, admin_client
):
    oracle = Oracle()
    with StubLLMServer(oracle) as server:
        endpoint(server)
        call_command(
            "run_experiment",
            str(write(tmp_path, "strong", "weak")),
            "--stop-when-decided",
            "--batch-size",
            "10",
        )
    experiment = Experiment.objects.get(name="Sequential")
    record = experiment.spec["stopped_early"]
    n = record["examples"]
    assert record["stopped_early"] is True and record["of"] == 200
    assert n % 10 == 0 and 10 <= n < 200
    (pair,) = record["pairs"]
    assert (pair["a"], pair["b"], pair["verdict"], pair["decided_at"]) == ("strong", "weak", "different", n)
    assert pair["low"] > 0
    # exactly the first n examples were asked, of both variants: the rest was never sent
    assert oracle.asked == {"strong": set(range(n)), "weak": set(range(n))}
    for run in Run.objects.filter(experiment=experiment):
        # not run means no prediction: nothing counted wrong
        assert Prediction.objects.filter(run=run).count() == n
        assert run.config["limit"] == n
        assert run.status == "success"
        expected = sum(RIGHT[run.config["model"]](i) for i in range(n))
        assert (run.metrics["total"], run.metrics["correct"]) == (n, expected)
    board = leaderboard_json(leaderboard(experiment))
    assert [(p["a"], p["b"], p["n"], p["decided_early_at"]) for p in board["pairs"]] == [
        ("strong", "weak", n, n)
    ]
    assert board["stopped_early"]["examples"] == n
    out = capsys.readouterr()
    assert f"stopped early at {n} of 200 examples" in out.out
    assert f"decided early at {n} examples" in out.out
    assert f"stopped early at {n} of 200 examples; the other {200 - n} are not run" in out.err
    api = ApiClient(owner).get("/api/experiments/Sequential").json()
    assert api["pairs"][0]["decided_early_at"] == n
    assert api["stopped_early"]["examples"] == n
    page = admin_client.get(reverse("admin:evaluation_experiment_change", args=[experiment.pk]))
    assert page.status_code == 200
    assert f"decided early at {n} examples" in page.content.decode()

    # with the flag again it goes on from where it stopped: one more batch, then decided again
    more = Oracle()
    with StubLLMServer(more) as server:
        endpoint(server)
        call_command("run_experiment", str(write(tmp_path, "strong", "weak")), "--stop-when-decided")
    assert more.asked == {"strong": set(range(n, n + 20)), "weak": set(range(n, n + 20))}
    assert Experiment.objects.get(name="Sequential").spec["stopped_early"]["examples"] == n + 20
    n += 20
    # a later run of the file without the flag drives the examples not run, and only them
    again = Oracle()
    with StubLLMServer(again) as server:
        endpoint(server)
        call_command("run_experiment", str(write(tmp_path, "strong", "weak")))
    assert again.asked == {"strong": set(range(n, 200)), "weak": set(range(n, 200))}
    for run in Run.objects.filter(experiment=experiment):
        assert run.metrics["total"] == 200
    assert "stopped_early" not in experiment_get("Sequential").spec


def test_equal_variants_stop_on_the_margin(endpoint, gsm200, tmp_path):
    oracle = Oracle()
    head = "stop_when_decided = true\nmargin = 0.1\nbatch_size = 25"
    with StubLLMServer(oracle) as server:
        endpoint(server)
        call_command("run_experiment", str(write(tmp_path, "strong", "twin", head=head)))
    record = Experiment.objects.get(name="Sequential").spec["stopped_early"]
    (pair,) = record["pairs"]
    # the paired differences are all 0: the interval is symmetric about 0 and narrows;
    # the pair is equivalent at the first round (of 25) where it lies inside ±0.1
    high = confidence_sequence(np.zeros(200), alpha=0.05)[:, 1]
    expected = next(n for n in range(25, 201, 25) if high[n - 1] < 0.1)
    assert expected < 200
    assert (pair["verdict"], pair["decided_at"], record["examples"]) == ("equivalent", expected, expected)
    assert record["stopped_early"] is True and record["margin"] == 0.1 and record["batch_size"] == 25
    assert pair["low"] == pytest.approx(-pair["high"]) and 0 < pair["high"] < 0.1
    assert oracle.asked == {"strong": set(range(expected)), "twin": set(range(expected))}


@pytest.mark.parametrize(
    ("args", "head", "expected"),
    [
        (["--stop-when-decided", "--margin", "0"], "", "--margin must be a difference in accuracy in (0, 1)"),
        (
            ["--stop-when-decided", "--margin", "1.5"],
            "",
            "--margin must be a difference in accuracy in (0, 1)",
        ),
        (["--stop-when-decided", "--batch-size", "0"], "", "--batch-size must be at least 1"),
        ([], "stop_when_decided = true\nmargin = 1", "margin must be a difference in accuracy in (0, 1)"),
        ([], "stop_when_decided = true\nbatch_size = -3", "batch_size must be at least 1"),
        ([], 'stop_when_decided = "yes"', "stop_when_decided"),
    ],
)
def test_bad_input_is_exit_2_and_writes_nothing(endpoint, gsm200, tmp_path, args, head, expected):
    with StubLLMServer(Oracle()) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_experiment", str(write(tmp_path, "strong", "weak", head=head)), *args)
        assert server.request_count == 0
    assert excinfo.value.returncode == 2
    assert expected in str(excinfo.value)
    assert (Experiment.objects.count(), Run.objects.count()) == (0, 0)

"""``run_eval --epochs K``: independent turns per (example, epoch), metrics
with pass@k checked against the formula, and an exact resume per (example,
epoch) after a kill."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from math import comb

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from evaluation.models import Prediction, Run
from tests.evaluation.run.process_support import subprocess_env
from tests.evaluation.run.test_run_eval import GSM8K, ROOT, oracle, rows
from turns.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)

#: per example (of the first five GSM8K lines), whether epochs 1..3 answer right
PATTERN = [
    [True, True, True],
    [True, False, False],
    [False, False, False],
    [False, True, True],
    [True, False, True],
]
K = 3


def by_epoch(rows_: list[dict]):
    """A stub handler: the n-th call for example i answers right when
    ``PATTERN[i][n - 1]`` (a calculator-free final answer: one call per turn)."""
    index = {r["question"]: (i, r) for i, r in enumerate(rows_)}
    calls: Counter[int] = Counter()
    lock = threading.Lock()

    def handler(body):
        i, row = index[last_user_text(body)]
        with lock:
            calls[i] += 1
            n = calls[i]
        answer = row["answer"] if PATTERN[i][n - 1] else str(int(row["answer"]) + 1)
        return final_answer_reply(answer, "e", "r", usage=(10, 5))

    return handler


def chen(n: int, c: int, k: int) -> float:
    return 1 - comb(n - c, k) / comb(n, k)


def test_epochs_run_every_example_k_times_and_pass_at_k_follows_the_formula(endpoint, capsys, client, staff):
    gsm = rows(GSM8K, 5)
    with StubLLMServer(by_epoch(gsm)) as server:
        endpoint(server)
        call_command(
            "run_eval",
            "--no-review",
            str(GSM8K),
            "--run-id",
            "ep",
            "--limit",
            "5",
            "--epochs",
            "3",
            "--concurrency",
            "1",
        )
        assert server.request_count == 15
    run = Run.objects.get(run_id="ep")
    assert run.config["epochs"] == 3
    preds = list(run.predictions.order_by("example__position", "epoch"))
    assert [(p.example.position, p.epoch) for p in preds] == [(i, k) for i in range(5) for k in (1, 2, 3)]
    # independent turns: one per (example, epoch)
    assert len({p.turn_id for p in preds}) == 15
    got = [sum(1 for p in preds[i * 3 : i * 3 + 3] if p.correct) for i in range(5)]
    assert sorted(got) == sorted(map(sum, PATTERN))

    m = run.metrics
    assert (m["total"], m["correct"]) == (15, sum(map(sum, PATTERN)))
    e = m["epochs"]
    counts = [(K, sum(p)) for p in PATTERN]
    assert e["pass_at_k"]["1"] == pytest.approx(sum(chen(n, c, 1) for n, c in counts) / 5)
    assert e["pass_at_k"][str(K)] == pytest.approx(sum(chen(n, c, K) for n, c in counts) / 5)
    assert e["pass_at_k"][str(K)] == pytest.approx(4 / 5)  # every example but the third was right once
    assert e["majority_accuracy"] == pytest.approx(3 / 5)  # examples 0, 3 and 4 are right 2 or 3 times of 3
    assert e["disagreement"] == pytest.approx(3 / 5)
    assert e["per_task_type"]["math"]["pass_at_k"] == e["pass_at_k"]
    low, high = e["mean_accuracy_ci"]
    assert low < e["mean_accuracy"] < high
    out = capsys.readouterr().out
    assert "Epochs (3 per example)" in out and "pass@3" in out
    client.force_login(staff)
    page = client.get(f"/admin/evaluation/run/{run.pk}/change/").content.decode()
    assert "<th>pass@3</th>" in page and "<th>majority vote</th>" in page
    assert f"<td>{e['pass_at_k']['3'] * 100:.1f}%</td>" in page


def test_resuming_with_another_number_of_epochs_is_refused(endpoint):
    gsm = rows(GSM8K, 2)
    with StubLLMServer(oracle(gsm, right={0, 1})) as server:
        endpoint(server)
        call_command(
            "run_eval", "--no-review", str(GSM8K), "--run-id", "ep2", "--limit", "2", "--epochs", "2"
        )
        with pytest.raises(CommandError) as excinfo:
            call_command(
                "run_eval", "--no-review", str(GSM8K), "--run-id", "ep2", "--limit", "2", "--epochs", "3"
            )
        assert excinfo.value.returncode == 2
        assert "epochs" in str(excinfo.value)
        # without --epochs a resume keeps the run's: nothing left to do
        call_command("run_eval", "--no-review", str(GSM8K), "--run-id", "ep2", "--limit", "2")
        assert server.request_count == 4
    assert Run.objects.get(run_id="ep2").predictions.count() == 4


def test_epochs_out_of_range_are_bad_input(endpoint):
    with pytest.raises(CommandError) as excinfo:
        call_command("run_eval", "--no-review", str(GSM8K), "--epochs", "0")
    assert excinfo.value.returncode == 2
    assert "--epochs must be between 1 and 100" in str(excinfo.value)


def test_resume_mid_epoch_after_a_kill_drives_each_example_epoch_exactly_once():
    gsm = rows(GSM8K, 6)
    with StubLLMServer(oracle(gsm, right={0, 2, 4}, latency=0.15)) as server:
        cmd = [
            sys.executable,
            "manage.py",
            "run_eval",
            "--no-review",
            str(GSM8K),
            "--run-id",
            "ep-killed",
            "--limit",
            "6",
            "--epochs",
            "3",
            "--concurrency",
            "3",
        ]
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=subprocess_env(server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 60
            while Prediction.objects.filter(run__run_id="ep-killed", completed_at__isnull=False).count() < 5:
                assert time.monotonic() < deadline, "the first run made no progress"
                assert proc.poll() is None, "the first run ended before it was killed"
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        done_before = Prediction.objects.filter(run__run_id="ep-killed", completed_at__isnull=False).count()
        assert 5 <= done_before < 18
        resumed = subprocess.run(
            [*cmd[:-4], "--concurrency", "3"],  # no --epochs: the run's 3 are kept
            cwd=ROOT,
            env=subprocess_env(server),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert resumed.returncode == 0, resumed.stderr
        assert f"{18 - done_before} to do, {done_before} already done (resumed)" in resumed.stderr
        assert 18 <= server.request_count <= 18 + 3

    run = Run.objects.get(run_id="ep-killed")
    pairs = list(run.predictions.values_list("example_id", "epoch"))
    assert len(pairs) == len(set(pairs)) == 18
    assert Counter(epoch for _, epoch in pairs) == {1: 6, 2: 6, 3: 6}
    assert run.predictions.filter(completed_at__isnull=True).count() == 0
    assert Turn.objects.filter(predictions__run=run).count() == 18
    m = run.metrics
    assert (m["total"], m["correct"]) == (18, 9)
    assert m["tokens"] == {"input": 180, "output": 90, "unknown_rows": 0}
    assert m["epochs"]["pass_at_k"] == {"1": 0.5, "2": 0.5, "3": 0.5}
    assert m["epochs"]["disagreement"] == 0.0

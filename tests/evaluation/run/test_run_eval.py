"""``run_eval`` end to end: real HTTP to a stub OpenAI-compatible server, the
shared driver, the event log and predictions in the real database."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from agentlab.testing.stub_llm import (
    StubLLMServer,
    error_reply,
    final_answer_reply,
    last_user_text,
    text_reply,
)
from evaluation.models import Dataset, Example, Prediction, Run
from tests.evaluation.run.process_support import subprocess_env
from tests.shared_data import dataset_path
from turns.models import RESUMABLE_STATUSES, Turn, TurnEvent, TurnStatus

pytestmark = pytest.mark.django_db(transaction=True)

GSM8K = dataset_path("gsm8k-test-200.jsonl")
ARC = dataset_path("arc-challenge-test-100.jsonl")
ROOT = Path(__file__).resolve().parents[3]


def rows(path: Path, n: int) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f, strict=False)]


def oracle(
    rows_: list[dict],
    *,
    right: set[int],
    broken: frozenset[int] | set[int] = frozenset(),
    latency: float = 0.0,
):
    """A stub handler that answers example i's gold answer when i is in
    ``right``, a wrong answer otherwise, and an HTTP 400 when i is in ``broken``."""
    by_question = {r["question"]: (i, r) for i, r in enumerate(rows_)}

    def handler(body):
        i, row = by_question[last_user_text(body)]
        if i in broken:
            return error_reply(400, "this example breaks the model", type="invalid_request_error")
        if row["task_type"] == "multiple_choice":
            letters = "ABCDE"
            wrong = letters[(letters.index(row["answer"]) + 1) % len(row["choices"])]
            answer = row["answer"] if i in right else wrong
        else:
            answer = row["answer"] if i in right else str(int(row["answer"]) + 1)
        return final_answer_reply(answer, "stub evidence", "stub reasoning", usage=(10, 5), delay=latency)

    return handler


def refused_before_any_llm_call(endpoint, *argv: str) -> CommandError:
    """Run ``manage.py run_eval --no-review *argv`` against a stub endpoint;
    it must fail with ``CommandError`` before asking the LLM anything."""
    with StubLLMServer(lambda body: text_reply("2")) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "--no-review", *argv)
        assert server.request_count == 0
    return excinfo.value


def test_gsm8k_and_arc_scores_are_exact(endpoint, tmp_path, capsys):
    gsm = rows(GSM8K, 20)
    arc = rows(ARC, 20)
    right_gsm = {0, 1, 2, 3, 5, 8, 13, 17, 19}  # 9 of 20
    right_arc = set(range(0, 20, 2)) | {3}  # 11 of 20
    with StubLLMServer(oracle(gsm, right=right_gsm)) as server:
        endpoint(server)
        call_command(
            "run_eval",
            "--no-review",
            str(GSM8K),
            "--run-id",
            "gsm",
            "--limit",
            "20",
            "--concurrency",
            "8",
            "--json",
            str(tmp_path / "gsm.json"),
        )
        assert server.request_count == 20
    with StubLLMServer(oracle(arc, right=right_arc)) as server:
        endpoint(server)
        call_command(
            "run_eval", "--no-review", str(ARC), "--run-id", "arc", "--limit", "20", "--concurrency", "4"
        )

    gsm_run = Run.objects.get(run_id="gsm")
    assert gsm_run.status == "success"
    m = gsm_run.metrics
    assert (m["total"], m["correct"], m["scored"], m["accuracy"]) == (20, 9, 20, 0.45)
    assert m["per_task_type"]["math"]["accuracy"] == 0.45
    assert m["tokens"] == {"input": 200, "output": 100, "unknown_rows": 0}
    assert m["stop_reasons"] == {"final": 20}
    assert m["steps_mean"] == 1
    assert gsm_run.config["model"] == "stub-model" and gsm_run.config["provider"] == "openai"
    assert json.loads((tmp_path / "gsm.json").read_text())["metrics"]["correct"] == 9

    arc_metrics = Run.objects.get(run_id="arc").metrics
    assert (arc_metrics["total"], arc_metrics["correct"], arc_metrics["accuracy"]) == (20, 11, 0.55)

    correct_ids = set(
        Prediction.objects.filter(run__run_id="gsm", correct=True).values_list(
            "example__external_id", flat=True
        )
    )
    assert correct_ids == {gsm[i]["question_id"] for i in right_gsm}
    p = Prediction.objects.get(run__run_id="gsm", example__external_id=gsm[0]["question_id"])
    assert (
        p.prediction,
        p.gold_answer,
        p.score,
        p.steps,
        p.input_tokens,
        p.output_tokens,
        p.stop_reason,
    ) == (gsm[0]["answer"], gsm[0]["answer"], 1.0, 1, 10, 5, "final")
    assert p.turn.kind == "evaluation" and p.turn.status == "succeeded"
    assert [e.type for e in TurnEvent.objects.filter(turn=p.turn)] == [
        "turn.queued",
        "turn.started",
        "phase",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "turn.answered",
    ]
    out = capsys.readouterr().out
    assert "45.0%" in out and "run id: gsm" in out


def test_an_erroring_example_still_has_its_prediction(endpoint):
    gsm = rows(GSM8K, 6)
    with StubLLMServer(oracle(gsm, right=set(range(6)), broken={2, 4})) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(GSM8K), "--run-id", "broken", "--limit", "6")
    run = Run.objects.get(run_id="broken")
    assert run.predictions.count() == 6
    assert (run.metrics["total"], run.metrics["correct"], run.metrics["accuracy"]) == (6, 4, 4 / 6)
    assert run.metrics["errors"] == 2
    assert run.metrics["stop_reasons"] == {"final": 4, "provider_error": 2}
    bad = Prediction.objects.get(run=run, example__external_id=gsm[2]["question_id"])
    assert (bad.correct, bad.score, bad.stop_reason, bad.prediction) == (False, 0.0, "provider_error", "")
    assert "this example breaks the model" in bad.error
    assert bad.turn.status == "failed"
    assert TurnEvent.objects.filter(turn=bad.turn).last().type == "turn.failed"


def test_a_bad_line_is_exit_2_names_the_line_and_writes_nothing(tmp_path, endpoint):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"question_id": "1", "question": "1+1?", "answer": "2", "task_type": "math"})
    path.write_text(good + "\n" + good.replace('"1"', '"2"', 1) + "\n{not json\n", encoding="utf-8")
    error = refused_before_any_llm_call(endpoint, str(path), "--run-id", "bad")
    assert error.returncode == 2
    assert "bad.jsonl, line 3" in str(error)
    assert (Dataset.objects.count(), Example.objects.count(), Run.objects.count(), Turn.objects.count()) == (
        0,
        0,
        0,
        0,
    )


def test_a_database_file_outside_the_dataset_folder_is_exit_2_and_writes_nothing(tmp_path, endpoint):
    folder = tmp_path / "set"
    folder.mkdir()
    path = folder / "escape.jsonl"
    good = {"question_id": "1", "question": "How many users?", "answer": "1", "task_type": "sql"}
    bad = {**good, "question_id": "2", "context": {"database_file": "../a.sqlite3"}}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    error = refused_before_any_llm_call(endpoint, str(path), "--run-id", "escape")
    assert error.returncode == 2
    assert (
        "escape.jsonl, line 2: field 'context.database_file' '../a.sqlite3' is outside the dataset's folder"
        in (str(error))
    )
    assert (Dataset.objects.count(), Example.objects.count(), Run.objects.count(), Turn.objects.count()) == (
        0,
        0,
        0,
        0,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--limit", "0"],
        ["--concurrency", "0"],
        ["--run-id", " "],
        ["--fail-under", "2"],
        ["--queue", "q"],  # goes with --celery
        ["--max-in-flight", "2"],  # goes with --celery
        ["--celery"],  # no broker configured in the tests
    ],
)
def test_bad_options_are_exit_2(args):
    with pytest.raises(CommandError) as excinfo:
        call_command("run_eval", "--no-review", "demo", *args)
    assert excinfo.value.returncode == 2
    assert Run.objects.count() == 0


def test_fail_under_is_exit_1_and_the_run_is_still_stored(endpoint):
    gsm = rows(GSM8K, 4)
    with StubLLMServer(oracle(gsm, right={0})) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command(
                "run_eval",
                "--no-review",
                str(GSM8K),
                "--run-id",
                "low",
                "--limit",
                "4",
                "--fail-under",
                "0.5",
            )
    assert excinfo.value.returncode == 1
    assert "0.250 is below --fail-under 0.5" in str(excinfo.value)
    assert Run.objects.get(run_id="low").metrics["accuracy"] == 0.25


def test_same_run_id_again_skips_finished_examples(endpoint):
    gsm = rows(GSM8K, 8)
    with StubLLMServer(oracle(gsm, right=set(range(8)))) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(GSM8K), "--run-id", "again", "--limit", "5")
        call_command("run_eval", "--no-review", str(GSM8K), "--run-id", "again", "--limit", "8")
        call_command("run_eval", "--no-review", str(GSM8K), "--run-id", "again", "--limit", "8")
        assert server.request_count == 8
    run = Run.objects.get(run_id="again")
    assert (run.metrics["total"], run.metrics["correct"]) == (8, 8)
    assert run.metrics["tokens"] == {"input": 80, "output": 40, "unknown_rows": 0}
    assert len(run.config["resumes"]) == 2


def test_resume_after_a_kill_part_way_never_doubles_rows_or_tokens():
    gsm = rows(GSM8K, 20)
    with StubLLMServer(oracle(gsm, right=set(range(0, 20, 2)), latency=0.15)) as server:
        cmd = [
            sys.executable,
            "manage.py",
            "run_eval",
            "--no-review",
            str(GSM8K),
            "--run-id",
            "killed",
            "--limit",
            "20",
            "--concurrency",
            "3",
        ]
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=subprocess_env(server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 60
            while Prediction.objects.filter(run__run_id="killed", completed_at__isnull=False).count() < 6:
                assert time.monotonic() < deadline, "the first run made no progress"
                assert proc.poll() is None, "the first run ended before it was killed"
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        done_before = Prediction.objects.filter(run__run_id="killed", completed_at__isnull=False).count()
        assert 6 <= done_before < 20
        # what a resume takes up again: the turns of unfinished predictions
        # that were running (their process is gone) or had already stopped
        # (interrupted, failed); a queued one is simply claimed
        cut_off = dict(
            Turn.objects.filter(
                predictions__run__run_id="killed",
                predictions__completed_at__isnull=True,
                status__in=[TurnStatus.RUNNING, TurnStatus.WAITING, *RESUMABLE_STATUSES],
            ).values_list("pk", "status")
        )

        resumed = subprocess.run(
            cmd, cwd=ROOT, env=subprocess_env(server), capture_output=True, text=True, timeout=120
        )
        assert resumed.returncode == 0, resumed.stderr
        assert f"{20 - done_before} to do, {done_before} already done (resumed)" in resumed.stderr
        # a request in flight at the kill is asked again; nothing else is
        assert 20 <= server.request_count <= 20 + 3

    run = Run.objects.get(run_id="killed")
    assert run.predictions.count() == 20
    assert run.predictions.filter(completed_at__isnull=True).count() == 0
    assert (run.metrics["total"], run.metrics["correct"], run.metrics["accuracy"]) == (20, 10, 0.5)
    assert run.metrics["tokens"] == {"input": 200, "output": 100, "unknown_rows": 0}
    assert Turn.objects.filter(predictions__run=run).count() == 20
    # turns cut off by the kill were interrupted and resumed, with contiguous seqs
    for turn in Turn.objects.filter(predictions__run=run):
        seqs = list(TurnEvent.objects.filter(turn=turn).values_list("seq", flat=True))
        assert seqs == list(range(1, len(seqs) + 1))
        assert turn.status == "succeeded"
    resumes = TurnEvent.objects.filter(turn__predictions__run=run, type="turn.resumed")
    assert set(resumes.values_list("turn_id", flat=True)) == set(cut_off), cut_off


def test_a_file_named_like_a_registered_dataset_is_refused_not_merged(tmp_path, endpoint):
    call_command("import_dataset", str(ARC), "--name", "arc")
    clash = tmp_path / "arc.jsonl"
    clash.write_text(
        json.dumps({"question_id": "x1", "question": "1+1?", "answer": "2", "task_type": "math"}) + "\n",
        encoding="utf-8",
    )
    with StubLLMServer(lambda body: text_reply("2")) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", str(clash), "--run-id", "clash", "--no-review")
    assert excinfo.value.returncode == 2
    assert "a dataset named 'arc' already exists with different examples" in str(excinfo.value)
    assert Dataset.objects.get(name="arc").examples.count() == 100
    assert Run.objects.count() == 0
    call_command("import_dataset", str(ARC), "--name", "arc")  # the same file again is a no-op
    assert Dataset.objects.get(name="arc").examples.count() == 100


def test_a_run_id_taken_on_another_dataset_registers_no_dataset(tmp_path, endpoint):
    gsm = rows(GSM8K, 1)
    other = tmp_path / "fresh_file.jsonl"
    other.write_text(json.dumps(gsm[0]) + "\n", encoding="utf-8")
    with StubLLMServer(oracle(gsm, right={0})) as server:
        endpoint(server)
        call_command("run_eval", str(GSM8K), "--run-id", "taken", "--limit", "1", "--no-review")
        datasets = Dataset.objects.count()
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", str(other), "--run-id", "taken", "--no-review")
    assert excinfo.value.returncode == 2
    assert "run 'taken' exists on dataset 'gsm8k-test-200', not 'fresh_file'" in str(excinfo.value)
    assert Dataset.objects.count() == datasets and not Dataset.objects.filter(name="fresh_file").exists()


def test_resuming_with_another_model_is_refused(endpoint, settings):
    gsm = rows(GSM8K, 2)
    with StubLLMServer(oracle(gsm, right={0, 1})) as server:
        endpoint(server)
        call_command("run_eval", str(GSM8K), "--run-id", "one-model", "--limit", "1", "--no-review")
        settings.AGENTLAB_MODEL = "another-model"
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", str(GSM8K), "--run-id", "one-model", "--limit", "2", "--no-review")
    assert excinfo.value.returncode == 2
    assert "was started with model 'stub-model', not 'another-model'" in str(excinfo.value)
    assert Run.objects.get(run_id="one-model").predictions.count() == 1


@pytest.mark.parametrize(
    ("run_id", "message"),
    [
        ("a/b", "contains '/'"),
        ("tab\there", "contains '\\t'"),
        ("x" * 201, "at most 200"),
    ],
)
def test_run_ids_that_cannot_live_in_a_url_are_exit_2(run_id, message):
    with pytest.raises(CommandError) as excinfo:
        call_command("run_eval", "demo", "--run-id", run_id)
    assert excinfo.value.returncode == 2 and message in str(excinfo.value)
    assert Run.objects.count() == 0


def test_a_json_file_in_a_missing_folder_is_refused_before_running(tmp_path):
    with pytest.raises(CommandError) as excinfo:
        call_command("run_eval", "demo", "--json", str(tmp_path / "nope" / "x.json"))
    assert excinfo.value.returncode == 2 and "does not exist" in str(excinfo.value)
    assert Run.objects.count() == 0 and Turn.objects.count() == 0


def test_retry_errors_runs_failed_examples_again_as_a_new_attempt(endpoint):
    gsm = rows(GSM8K, 4)
    with StubLLMServer(oracle(gsm, right=set(range(4)), broken={1, 2})) as server:
        endpoint(server)
        call_command("run_eval", str(GSM8K), "--run-id", "outage", "--limit", "4", "--no-review")
    assert Run.objects.get(run_id="outage").metrics["correct"] == 2
    with StubLLMServer(oracle(gsm, right=set(range(4)))) as server:
        endpoint(server)
        call_command("run_eval", str(GSM8K), "--run-id", "outage", "--limit", "4", "--no-review")
        assert server.request_count == 0  # without the flag, errored rows stay as they are
        call_command(
            "run_eval", str(GSM8K), "--run-id", "outage", "--limit", "4", "--no-review", "--retry-errors"
        )
        assert server.request_count == 2
    run = Run.objects.get(run_id="outage")
    assert (run.metrics["total"], run.metrics["correct"], run.metrics["errors"]) == (4, 4, 0)
    assert run.predictions.count() == 4
    retried = Prediction.objects.get(run=run, example__external_id=gsm[1]["question_id"])
    assert (retried.correct, retried.error, retried.turn.attempts) == (True, "", 2)
    assert retried.turn.attempt_rows.get(number=1).stop_reason == "provider_error"


@pytest.mark.local_model  # the model file is checked after llama-cpp-python is found
def test_a_missing_model_file_is_exit_2_not_a_traceback(settings):
    settings.AGENTLAB_LLM_BASE_URL = None
    with pytest.raises(CommandError) as excinfo:
        call_command("run_eval", "--no-review", "demo", "--model", "/nonexistent/model.gguf", "--limit", "1")
    assert excinfo.value.returncode == 2
    assert "GGUF model file not found: /nonexistent/model.gguf" in str(excinfo.value)
    assert Run.objects.count() == 0


def test_resuming_with_the_review_switched_is_refused(endpoint):
    with StubLLMServer(oracle(rows(GSM8K, 2), right={0, 1})) as server:
        endpoint(server)
        call_command("run_eval", str(GSM8K), "--run-id", "reviewed-or-not", "--limit", "1", "--no-review")
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", str(GSM8K), "--run-id", "reviewed-or-not", "--limit", "2", "--review")
    assert excinfo.value.returncode == 2
    assert "was started with review False, not True" in str(excinfo.value)
    assert Prediction.objects.filter(run__run_id="reviewed-or-not").count() == 1


def test_a_dataset_name_that_cannot_make_a_run_id_is_refused_at_import(tmp_path):
    path = tmp_path / "tiny.jsonl"
    path.write_text(
        json.dumps({"question_id": "q1", "question": "1+1?", "answer": "2", "task_type": "math"}) + "\n"
    )
    with pytest.raises(CommandError) as excinfo:
        call_command("import_dataset", str(path), "--name", "a/b")
    assert excinfo.value.returncode == 2
    assert "dataset name 'a/b' contains '/'" in str(excinfo.value)
    assert Dataset.objects.count() == 0


def test_an_unmigrated_database_is_exit_2_with_a_hint(monkeypatch, settings):
    from django.db import ProgrammingError

    # an endpoint, so that the test does not depend on the local model's package (make test LOCAL=0)
    settings.AGENTLAB_LLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.AGENTLAB_LLM_API_KEY = "k"
    settings.AGENTLAB_MODEL = "stub-model"

    import evaluation.run.opening as command

    def unmigrated(**_):
        raise ProgrammingError('relation "evaluation_dataset" does not exist')

    monkeypatch.setattr(command, "dataset_resolve_ref", unmigrated)
    with pytest.raises(CommandError) as excinfo:
        call_command("run_eval", "--no-review", "demo")
    assert excinfo.value.returncode == 2
    assert "run `manage.py migrate` first" in str(excinfo.value)


def test_task_types_without_a_scorer_of_their_own_are_pointed_out(tmp_path, endpoint, capsys):
    path = tmp_path / "typos.jsonl"
    path.write_text(
        "".join(
            json.dumps(row) + "\n"
            for row in [
                {
                    "question_id": "a",
                    "question": "6*7?",
                    "answer": "42",
                    "task_type": "maths",
                },  # a typo: exact, not numeric
                {"question_id": "b", "question": "6*8?", "answer": "48", "task_type": "math"},
                {"question_id": "c", "question": "Who?", "answer": "Ada", "task_type": "trivia"},
                {
                    "question_id": "d",
                    "question": "Why?",
                    "answer": "x",
                    "task_type": "essay",
                    "scorer": "contains",
                },
            ]
        ),
        encoding="utf-8",
    )

    call_command("import_dataset", str(path), "--name", "typos")
    err = capsys.readouterr().err
    assert (
        "task type(s) 'maths', 'trivia' have no scorer of their own" in err and "scored with 'exact'" in err
    )
    with StubLLMServer(lambda body: text_reply("42")) as server:
        endpoint(server)
        call_command("run_eval", "typos", "--run-id", "typos-run", "--no-review")
    assert "task type(s) 'maths', 'trivia' have no scorer of their own" in capsys.readouterr().err
    scorers = dict(
        Prediction.objects.filter(run__run_id="typos-run").values_list("example__external_id", "scorer")
    )
    assert scorers == {"a": "exact", "b": "numeric", "c": "exact", "d": "contains"}

    call_command("import_dataset", str(GSM8K), "--name", "gsm")  # known task types: no note
    assert "no scorer of their own" not in capsys.readouterr().err


def _evaluation_migrations() -> int:
    """How many migrations the evaluation app has (each round adds some)."""
    from django.db.migrations.loader import MigrationLoader

    return sum(
        1
        for app, _ in MigrationLoader(None, ignore_no_migrations=True).disk_migrations
        if app == "evaluation"
    )


def test_a_database_behind_the_code_is_exit_2_naming_the_migrations():
    call_command("migrate", "evaluation", "0003", verbosity=0)  # as if the code was upgraded
    try:
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "--no-review", "demo")
    finally:
        call_command("migrate", "evaluation", verbosity=0)
    assert excinfo.value.returncode == 2
    assert (
        f"{_evaluation_migrations() - 3} migration(s) not applied: evaluation.0004_run_lease, "
        "evaluation.0005_dataset_plugins, "
        "evaluation.0006_gold_answer_json_prediction_usage, evaluation.0007_scoring_depth, "
        "evaluation.0008_schedules_regression_flag …)" in str(excinfo.value)
    )
    assert "run `manage.py migrate` first" in str(excinfo.value)
    assert Run.objects.count() == 0 and Dataset.objects.count() == 0


def test_a_run_that_another_process_is_driving_is_refused_and_resumed_once_that_process_is_gone(endpoint):
    import subprocess as sp

    from evaluation.run.lifecycle import run_start
    from evaluation.run.plan import run_plan
    from turns.driver import turn_claim
    from turns.jobs.ids import local_job_id

    call_command("import_dataset", str(GSM8K), "--name", "gsm-busy")
    run, _ = run_start(run_id="busy", dataset=Dataset.objects.get(name="gsm-busy"), config={"review": False})
    planned, _ = run_plan(run=run, limit=2, max_steps=4, model="stub")
    # a run_eval of this machine is driving the first example right now (this
    # very process stands in for it: its pid is alive)
    turn_claim(turn_id=planned[0].turn_id, job_id=local_job_id("eval", 1))
    gsm = rows(GSM8K, 2)
    with StubLLMServer(oracle(gsm, right={0, 1})) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "gsm-busy", "--run-id", "busy", "--limit", "2", "--no-review")
        assert excinfo.value.returncode == 2
        assert "run 'busy' is being driven by another process right now" in str(excinfo.value)
        assert f"its turn {planned[0].turn_id} is running" in str(excinfo.value)
        assert "resumes" not in Run.objects.get(run_id="busy").config  # nothing was written
        assert server.request_count == 0

        # that process dies (killed on this machine): the run resumes at once
        dead = sp.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        host = local_job_id("eval", 1).split("-")[1]
        Turn.objects.filter(pk=planned[0].turn_id).update(job_id=f"eval-{host}-{dead.pid}-1:0123abcd")
        call_command("run_eval", "gsm-busy", "--run-id", "busy", "--limit", "2", "--no-review")
    run = Run.objects.get(run_id="busy")
    assert (run.metrics["total"], run.metrics["correct"]) == (2, 2)
    assert set(Turn.objects.filter(predictions__run=run).values_list("status", flat=True)) == {"succeeded"}
    assert Turn.objects.get(pk=planned[0].turn_id).job_id.startswith(f"eval-{host}-")


def test_a_json_path_that_is_a_folder_is_refused_before_running(tmp_path, endpoint):
    error = refused_before_any_llm_call(endpoint, str(GSM8K), "--limit", "1", "--json", str(tmp_path))
    assert error.returncode == 2
    assert f"--json {tmp_path} is a folder" in str(error)
    assert (Dataset.objects.count(), Run.objects.count(), Turn.objects.count()) == (0, 0, 0)


@pytest.mark.local_model  # the model file is read by llama-cpp-python
def test_a_model_file_that_is_not_a_gguf_is_exit_2_naming_it(settings, tmp_path):
    """llama.cpp refuses a file without the GGUF header at once, so this never
    loads the real model."""
    settings.AGENTLAB_LLM_BASE_URL = None
    not_gguf = tmp_path / "README.md"
    not_gguf.write_text("# not a model\n", encoding="utf-8")
    with pytest.raises(CommandError) as excinfo:
        call_command("run_eval", "--no-review", "demo", "--model", str(not_gguf), "--limit", "1")
    assert excinfo.value.returncode == 2
    assert f"could not load the GGUF model {not_gguf}" in str(excinfo.value)
    assert (Dataset.objects.count(), Run.objects.count(), Turn.objects.count()) == (0, 0, 0)


def test_a_database_that_cannot_be_reached_is_exit_2_naming_it(endpoint, tmp_path):
    """A database that does not exist (PostgreSQL) or a file that cannot be
    opened (SQLite): the real driver's connect error, said in one line."""
    settings_dict = connection.settings_dict
    real_name = settings_dict["NAME"]
    missing = (
        str(tmp_path / "no-such-folder" / "db.sqlite3")
        if connection.vendor == "sqlite"
        else "agentlab_no_such_database"
    )
    connection.close()
    settings_dict["NAME"] = missing
    try:
        error = refused_before_any_llm_call(endpoint, str(GSM8K), "--limit", "1")
    finally:
        connection.close()
        settings_dict["NAME"] = real_name
    assert error.returncode == 2
    assert f"cannot connect to the database {connection.vendor}/{missing}: " in str(error)
    assert (Dataset.objects.count(), Run.objects.count()) == (0, 0)


def test_import_dataset_on_an_unmigrated_database_is_exit_2_with_a_hint():
    call_command("migrate", "evaluation", "zero", verbosity=0)  # as if `migrate` was never run for it
    try:
        with pytest.raises(CommandError) as excinfo:
            call_command("import_dataset", str(ARC), "--name", "arc")
    finally:
        call_command("migrate", verbosity=0)
    assert excinfo.value.returncode == 2
    assert f"{_evaluation_migrations()} migration(s) not applied: evaluation.0001_initial" in str(
        excinfo.value
    )
    assert "run `manage.py migrate` first" in str(excinfo.value)
    assert Dataset.objects.count() == 0


def test_max_steps_from_the_environment_is_named_as_such(settings):
    settings.AGENTLAB_MAX_STEPS = 0
    with pytest.raises(CommandError) as excinfo:
        call_command("run_eval", "--no-review", "demo")
    assert excinfo.value.returncode == 2
    assert str(excinfo.value) == "AGENTLAB_MAX_STEPS must be between 1 and 1000, got 0"
    with pytest.raises(CommandError) as excinfo:
        call_command("run_eval", "--no-review", "demo", "--max-steps", "0")
    assert str(excinfo.value) == "--max-steps must be between 1 and 1000, got 0"
    assert Run.objects.count() == 0


def test_a_resume_that_drives_nothing_keeps_the_throughput_and_says_what_the_metrics_cover(
    endpoint, tmp_path, capsys
):
    gsm = rows(GSM8K, 12)
    with StubLLMServer(oracle(gsm, right=set(range(12)))) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(GSM8K), "--run-id", "whole", "--limit", "12")
        first = Run.objects.get(run_id="whole").metrics["throughput"]
        capsys.readouterr()
        call_command(
            "run_eval",
            "--no-review",
            str(GSM8K),
            "--run-id",
            "whole",
            "--limit",
            "5",
            "--json",
            str(tmp_path / "whole.json"),
        )
        assert server.request_count == 12
    err = capsys.readouterr().err
    assert "0 to do, 5 already done (resumed)" in err
    assert "the metrics cover all 12 predictions of the run, not only these 5" in err
    assert first["examples"] == 12
    run = Run.objects.get(run_id="whole")
    assert run.metrics["throughput"] == first and run.metrics["total"] == 12
    assert json.loads((tmp_path / "whole.json").read_text())["metrics"]["throughput"] == first


def test_fail_under_with_nothing_scored_says_no_example_could_be_scored(tmp_path, endpoint):
    path = tmp_path / "ungradable.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"question_id": f"q{i}", "question": f"Say {i}.", "answer": "The.", "task_type": "trivia"}
            )
            + "\n"
            for i in range(2)
        ),
        encoding="utf-8",
    )
    with StubLLMServer(lambda body: final_answer_reply("anything", "e", "r")) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "--no-review", str(path), "--run-id", "ungradable", "--fail-under", "0")
    assert excinfo.value.returncode == 1
    message = str(excinfo.value)
    assert "no example could be scored (2 unscored of 2)" in message and "n/a" not in message
    run = Run.objects.get(run_id="ungradable")
    assert (run.metrics["scored"], run.metrics["accuracy"]) == (0, None)


def test_a_run_leased_by_a_live_run_eval_is_refused_and_resumed_once_the_lease_is_dead(endpoint, settings):
    import subprocess as sp
    from datetime import timedelta

    from django.utils import timezone

    from evaluation.run.lifecycle import run_lease_tag

    call_command("import_dataset", str(GSM8K), "--name", "gsm-lease")
    argv = ["run_eval", "gsm-lease", "--run-id", "lease", "--limit", "2", "--no-review"]
    with StubLLMServer(oracle(rows(GSM8K, 2), right={0, 1})) as server:
        endpoint(server)
        call_command(*argv)
        run = Run.objects.get(run_id="lease")
        assert (run.driver, run.heartbeat_at) == ("", None)  # released when the invocation ended

        # another run_eval of this machine holds it (this process stands in: alive)
        Run.objects.filter(pk=run.pk).update(driver=run_lease_tag(), heartbeat_at=timezone.now())
        with pytest.raises(CommandError) as excinfo:
            call_command(*argv)
        assert excinfo.value.returncode == 2
        assert "run 'lease' is being driven by another process right now (run_eval eval-" in str(
            excinfo.value
        )
        assert "resumes" not in Run.objects.get(pk=run.pk).config  # nothing was written

        # its heartbeat has been silent for longer than TURN_STALE_S: resumable
        Run.objects.filter(pk=run.pk).update(
            heartbeat_at=timezone.now() - timedelta(seconds=float(settings.TURN_STALE_S) + 5)
        )
        call_command(*argv)
        assert len(Run.objects.get(pk=run.pk).config["resumes"]) == 1

        # a live heartbeat, but from a process of this machine that has exited: resumable at once
        dead = sp.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        host = run_lease_tag().split("-")[1]
        Run.objects.filter(pk=run.pk).update(
            driver=f"eval-{host}-{dead.pid}-0:run", heartbeat_at=timezone.now()
        )
        call_command(*argv)
        run = Run.objects.get(pk=run.pk)
        assert len(run.config["resumes"]) == 2 and (run.driver, run.status) == ("", "success")
        assert server.request_count == 2  # the resumes had nothing left to ask


def test_the_lease_is_renewed_while_held_and_its_thread_stops_when_taken_over():
    import time as _time
    from datetime import timedelta

    from django.utils import timezone

    from evaluation.run.lifecycle import RunLease, run_start

    ds = Dataset.objects.create(name="lease-ds")
    run, _ = run_start(run_id="renewed", dataset=ds, config={}, driver="eval-h-1-0:run")
    old = timezone.now() - timedelta(seconds=60)
    Run.objects.filter(pk=run.pk).update(heartbeat_at=old)
    lease = RunLease(run_pk=run.pk, driver="eval-h-1-0:run", every=0.05).start()
    try:
        deadline = _time.monotonic() + 5
        while Run.objects.get(pk=run.pk).heartbeat_at == old:
            assert _time.monotonic() < deadline, "the lease was never renewed"
            _time.sleep(0.02)
        Run.objects.filter(pk=run.pk).update(driver="eval-other-2-0:run")  # taken over
        lease._thread.join(5)
        assert not lease._thread.is_alive()  # it gave up instead of renewing someone else's lease
    finally:
        lease.stop()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_json_file_that_cannot_be_written_is_exit_2_and_the_run_is_kept(endpoint):
    with StubLLMServer(oracle(rows(GSM8K, 1), right={0})) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command(
                "run_eval",
                str(GSM8K),
                "--run-id",
                "full",
                "--limit",
                "1",
                "--no-review",
                "--json",
                "/dev/full",
            )
    assert excinfo.value.returncode == 2
    assert "could not write --json /dev/full" in str(excinfo.value) and "run id full" in str(excinfo.value)
    run = Run.objects.get(run_id="full")
    assert (run.status, run.metrics["total"], run.metrics["correct"]) == ("success", 1, 1)


def test_a_database_file_that_is_not_a_database_is_exit_2_naming_it(tmp_path):
    if connection.vendor != "sqlite":
        pytest.skip("a file that is not a database is a SQLite case")
    settings_dict = connection.settings_dict
    real_name = settings_dict["NAME"]
    broken = tmp_path / "broken.sqlite3"
    broken.write_text('{"run_id": "x"}' * 100, encoding="utf-8")  # e.g. a --json written over it
    connection.close()
    settings_dict["NAME"] = str(broken)
    try:
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "--no-review", "demo", "--limit", "1")
    finally:
        connection.close()
        settings_dict["NAME"] = real_name
    assert excinfo.value.returncode == 2
    assert str(excinfo.value) == f"cannot read the database sqlite/{broken}: file is not a database"


def test_the_demo_datasets_name_is_reserved(capsys):
    with pytest.raises(CommandError) as excinfo:
        call_command("import_dataset", str(GSM8K), "--name", "demo")
    assert excinfo.value.returncode == 2
    assert "dataset name 'demo' is reserved for the project's demo dataset" in str(excinfo.value)
    assert Dataset.objects.count() == 0


def test_review_and_no_review_together_are_refused(endpoint):
    error = refused_before_any_llm_call(endpoint, "demo", "--review")  # the helper gives --no-review
    assert "give --review or --no-review once" in str(error)
    assert Run.objects.count() == 0

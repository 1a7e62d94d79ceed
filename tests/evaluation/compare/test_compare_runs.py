"""Comparing real runs: ``manage.py compare_runs``, ``GET
/api/runs/{base}/compare/{candidate}`` and ``run_eval --baseline``, over runs
written by ``run_eval`` against a stub OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.stub_llm import StubLLMServer, error_reply, final_answer_reply, last_user_text
from apikeys.services import apikey_create
from evaluation.compare.services import run_compare_ids
from evaluation.compare.statistics import mcnemar_exact_p
from evaluation.models import Prediction, Run
from tests.api_support import ApiClient, assert_error

pytestmark = pytest.mark.django_db(transaction=True)

#: 12 math examples (q0..q11) and 4 document questions (d0..d3)
ROWS = [
    {"question_id": f"q{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i), "task_type": "math"}
    for i in range(12)
] + [
    {
        "question_id": f"d{i}",
        "question": f"Whose code is {i}?",
        "answer": f"agent {i}",
        "task_type": "document_qa",
    }
    for i in range(4)
]


class Oracle:
    """Answers every example right, except the ids in ``wrong`` (a wrong
    answer) and ``broken`` (an HTTP 400: the turn errors)."""

    def __init__(self) -> None:
        self.wrong: set[str] = set()
        self.broken: set[str] = set()
        self.by_question = {r["question"]: r for r in ROWS}

    def __call__(self, body):
        row = self.by_question[last_user_text(body)]
        if row["question_id"] in self.broken:
            return error_reply(400, "this example breaks the model", type="invalid_request_error")
        answer = row["answer"] + " nope" if row["question_id"] in self.wrong else row["answer"]
        if row["task_type"] == "math" and row["question_id"] in self.wrong:
            answer = str(int(row["answer"]) + 1)
        return final_answer_reply(answer, "stub evidence", "stub reasoning", usage=(10, 5))


@pytest.fixture
def lab(tmp_path, settings):
    """``lab(run_id, wrong=…, broken=…, *args)`` runs ``run_eval`` on the
    16 examples; returns ``(stdout, stderr, error)``."""
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    oracle = Oracle()
    with StubLLMServer(oracle) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "test-key"
        settings.AGENTLAB_MODEL = "stub-model"

        def run(run_id, *args, wrong=(), broken=(), dataset=None, capsys=None):
            oracle.wrong, oracle.broken = set(wrong), set(broken)
            argv = ["--no-review", dataset or str(path), "--run-id", run_id, "--concurrency", "4", *args]
            try:
                call_command("run_eval", *argv)
            except CommandError as exc:
                return exc
            return None

        yield run


def test_compare_runs_prints_the_table_and_writes_the_comparison(lab, tmp_path, capsys):
    lab("base")
    lab("cand", wrong={"q1", "q2", "q3"}, broken={"d0"})
    capsys.readouterr()
    out = tmp_path / "cmp.json"
    call_command("compare_runs", "base", "cand", "--json", str(out))
    printed = capsys.readouterr().out
    document = json.loads(out.read_text(encoding="utf-8"))

    overall = document["overall"]
    assert (overall["examples"], overall["fixed"], overall["broken"]) == (16, 0, 4)
    assert overall["base_accuracy"] == 1.0 and overall["candidate_accuracy"] == pytest.approx(12 / 16)
    assert overall["p_value"] == pytest.approx(mcnemar_exact_p(fixed=0, broken=4)) == pytest.approx(0.125)
    assert document["per_task_type"]["math"]["broken"] == 3
    assert document["per_task_type"]["document_qa"]["broken"] == 1
    # the errored example is wrong, as in the run's own accuracy, and listed
    assert document["candidate"]["accuracy"] == pytest.approx(12 / 16)
    assert [p["example_id"] for p in document["broken"]] == ["q1", "q2", "q3", "d0"]
    assert [p["example_id"] for p in document["errored"]] == ["d0"]
    assert "breaks the model" in document["errored"][0]["candidate"]["error"]
    # each side links to the turn that produced it
    q1 = document["broken"][0]
    for run_id, side in (("base", q1["base"]), ("cand", q1["candidate"])):
        prediction = Prediction.objects.get(pk=side["prediction_id"])
        assert prediction.run.run_id == run_id and prediction.example.external_id == "q1"
        assert prediction.turn_id == side["turn_id"]
    assert document["stop_reasons"]["provider_error"]["difference"] == 1.0
    assert document["metrics"]["input_tokens"]["difference"] < 0  # the errored turn used no tokens

    assert "Paired accuracy" in printed and "Broken: right → wrong (4)" in printed
    assert "0.1250" in printed
    assert "Fixed: wrong → right" not in printed  # an empty list is left out, not an empty table


def test_compare_runs_fits_120_columns_without_cutting_run_ids_or_models(lab, capsys):
    base = "nightly-2026-12-07-embedded-smollm2-review-off-base"
    cand = "nightly-2026-12-07-embedded-smollm2-review-off-candidate"
    lab(base)
    lab(cand, wrong={"q1"})
    Run.objects.filter(run_id=cand).update(
        config={"model": "a-very-long-provider/model-name-v2.5-instruct-q4"}
    )
    capsys.readouterr()
    call_command("compare_runs", base, cand)
    printed = capsys.readouterr().out
    assert max(len(line) for line in printed.splitlines()) <= 120
    runs = printed[: printed.index("Paired accuracy")]
    assert "…" not in runs
    # folded onto more lines, never cut: the cells of each column read back whole
    cells = "".join(line.split("│")[2].strip() for line in runs.splitlines() if line.count("│") > 3)
    assert base in cells and cand in cells
    model_cells = "".join(line.split("│")[5].strip() for line in runs.splitlines() if line.count("│") > 3)
    assert "a-very-long-provider/model-name-v2.5-instruct-q4" in model_cells


def test_compare_runs_refuses_runs_on_different_datasets(lab, tmp_path):
    lab("base")
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    lab("elsewhere", dataset=str(other))
    with pytest.raises(CommandError) as excinfo:
        call_command("compare_runs", "base", "elsewhere")
    assert excinfo.value.returncode == 2
    assert "different datasets ('pairs' and 'other')" in str(excinfo.value)
    with pytest.raises(CommandError, match="run 'nope' not found") as excinfo:
        call_command("compare_runs", "base", "nope")
    assert excinfo.value.returncode == 2


def test_an_unwritable_json_is_refused_before_the_comparison_is_printed(lab, tmp_path, capsys):
    lab("base")
    lab("cand", wrong={"q1"})
    capsys.readouterr()
    missing = tmp_path / "no-such-folder" / "cmp.json"
    with pytest.raises(CommandError) as excinfo:
        call_command("compare_runs", "base", "cand", "--json", str(missing))
    assert excinfo.value.returncode == 2
    assert f"folder {missing.parent} does not exist" in str(excinfo.value)
    assert capsys.readouterr().out == ""  # nothing compared, nothing printed


def test_run_ids_with_spaces_are_printed_quoted_by_rescore(lab, capsys):
    lab("nightly run")
    capsys.readouterr()
    call_command("rescore", "nightly run", "--scorer", "exact", "--run-id", "nightly run exact")
    captured = capsys.readouterr()
    assert "predictions of 'nightly run' with exact" in captured.err
    assert "run id: 'nightly run exact'" in captured.out


def test_api_returns_the_same_comparison_as_the_service(lab, owner, tmp_path):
    lab("base", wrong={"q5"})
    lab("cand", wrong={"q1"})
    body = ApiClient(owner).get("/api/runs/base/compare/cand")
    assert body.status_code == 200, body.content
    assert body.json() == json.loads(json.dumps(run_compare_ids(base_run_id="base", candidate_run_id="cand")))
    assert [p["example_id"] for p in body.json()["fixed"]] == ["q5"]
    assert [p["example_id"] for p in body.json()["broken"]] == ["q1"]
    _, raw = apikey_create(name="ci")
    assert ApiClient(api_key=raw).get("/api/runs/cand/compare/base").json()["overall"]["fixed"] == 1


def test_api_errors_unknown_run_different_dataset_and_no_login(lab, owner, tmp_path):
    lab("base")
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    lab("elsewhere", dataset=str(other))
    client = ApiClient(owner)
    assert "not found" in assert_error(client.get("/api/runs/base/compare/nope"), 404, "not_found")["message"]
    message = assert_error(client.get("/api/runs/base/compare/elsewhere"), 400, "bad_input")["message"]
    assert "different datasets" in message
    assert_error(client.get("/api/runs/base/compare/base"), 400, "bad_input")
    assert_error(ApiClient().get("/api/runs/base/compare/elsewhere"), 401, "unauthenticated")


def test_fail_on_regression_exits_1_on_a_real_regression(lab, tmp_path):
    lab("base")
    out = tmp_path / "gate.json"
    error = lab(
        "worse",
        "--baseline",
        "base",
        "--fail-on-regression",
        "--json",
        str(out),
        wrong={f"q{i}" for i in range(12)},
    )
    assert error is not None and error.returncode == 1
    message = str(error)
    assert "significant regression against baseline base" in message
    assert "overall: accuracy 1.000 → 0.250" in message and "task type 'math'" in message
    assert "document_qa" not in message
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["baseline"] == "base" and document["comparison"]["overall"]["broken"] == 12
    assert document["comparison"]["per_task_type"]["math"]["p_holm"] == pytest.approx(2 * 2 / 4096)
    assert len(document["regressions"]) == 2
    assert Run.objects.get(run_id="worse").status == "success"  # the run itself is stored


def test_fail_on_regression_exits_0_on_noise(lab, tmp_path, capsys):
    lab("base", wrong={"q4"})
    capsys.readouterr()
    error = lab("noisy", "--baseline", "base", "--fail-on-regression", wrong={"q1", "q2"})
    assert error is None
    printed = capsys.readouterr().out
    assert "Comparison on dataset pairs" in printed and "Broken: right → wrong (2)" in printed


def test_a_tighter_alpha_lets_a_borderline_regression_pass(lab):
    lab("base")
    broken = {f"q{i}" for i in range(6)}  # 6 broken, 0 fixed: p = 2/64 = 0.03125
    assert lab("worse", "--baseline", "base", "--fail-on-regression", wrong=broken).returncode == 1
    assert (
        lab("worse2", "--baseline", "base", "--fail-on-regression", "--alpha", "0.01", wrong=broken) is None
    )


def test_baseline_previous_is_the_latest_finished_run_with_the_same_config(lab, tmp_path, capsys):
    assert lab("first", "--baseline", "previous") is None
    assert "--baseline previous: no earlier finished run" in capsys.readouterr().err
    lab("second", wrong={"q0"})
    lab("other-steps", "--max-steps", "3", wrong={"q0", "q1"})  # another config: not comparable
    out = tmp_path / "prev.json"
    assert lab("third", "--baseline", "previous", "--json", str(out)) is None
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["baseline"] == "second"
    assert document["comparison"]["base"]["run_id"] == "second"
    assert [p["example_id"] for p in document["comparison"]["fixed"]] == ["q0"]


def test_baseline_options_are_checked_before_the_run(lab, tmp_path):
    error = lab("x", "--fail-on-regression")
    assert error.returncode == 2 and "--fail-on-regression needs --baseline" in str(error)
    error = lab("x", "--baseline", "base", "--alpha", "1.5")
    assert error.returncode == 2 and "--alpha" in str(error)
    error = lab("x", "--baseline", "nope")
    assert error.returncode == 2 and "run 'nope' not found" in str(error)
    assert not Run.objects.filter(run_id="x").exists()
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    lab("elsewhere", dataset=str(other))
    error = lab("x", "--baseline", "elsewhere")
    assert error.returncode == 2 and "on dataset 'other', not 'pairs'" in str(error)
    assert not Run.objects.filter(run_id="x").exists()
    lab("stopped")
    Run.objects.filter(run_id="stopped").update(status="cancelled")
    error = lab("x", "--baseline", "stopped")
    assert error.returncode == 2 and "--baseline stopped ended cancelled: a baseline must be" in str(error)
    assert not Run.objects.filter(run_id="x").exists()


def test_a_comparison_with_a_run_that_did_not_finish_says_so(lab, capsys):
    lab("base")
    lab("cand")
    Run.objects.filter(run_id="cand").update(status="cancelled")
    capsys.readouterr()
    call_command("compare_runs", "base", "cand")
    out = " ".join(capsys.readouterr().out.split())  # rich wraps the caption
    assert (
        "warning: the candidate run cand ended cancelled: its examples that did not run count as "
        "errored (wrong) in the pairs below" in out
    )
    call_command("compare_runs", "cand", "base")
    assert "warning: the base run cand ended cancelled" in " ".join(capsys.readouterr().out.split())

"""CI reports (docs/evaluating.md#ci-reports): ``--junit-xml`` read back by a
real JUnit parser (junitparser) and validated against AgentLab's own schema
of the JUnit format as Jenkins and GitLab read it (``tests/junit/agentlab-junit.xsd``,
with xmlschema), which also refuses malformed reports, and ``--summary-md``
rendered as CommonMark with tables (markdown-it-py, what GitHub's renderer
follows) — for ``run_eval``, ``compare_runs`` and ``run_experiment``."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import junitparser
import pytest
import xmlschema
from django.core.management import CommandError, call_command
from markdown_it import MarkdownIt

from agentlab.testing.stub_llm import StubLLMServer, error_reply, final_answer_reply, last_user_text
from evaluation.ci.junit import CaseVerdict, JunitCase, JunitSuite, junit_bytes
from evaluation.models import Prediction, Run
from tests.evaluation.experiments.test_experiments import ModelOracle, experiment_file, gsm40  # noqa: F401 - a fixture
from tests.shared_data import dataset_path

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = Path(__file__).resolve().parents[2] / "junit" / "agentlab-junit.xsd"
GSM8K = dataset_path("gsm8k-test-200.jsonl")
ARC = dataset_path("arc-challenge-test-100.jsonl")

#: of the mixed dataset's 20 examples (12 GSM8K, 8 ARC): which are answered
#: wrong, which break the model (HTTP 400: an errored turn), which cannot be scored
WRONG = {1, 4, 7, 13}
BROKEN = {9, 15}
UNSCORED = {11}


def _first(path: Path, n: int) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f, strict=False)]


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """20 examples, 12 GSM8K (math) then 8 ARC (multiple choice); example 11's
    gold is not a number, so the numeric scorer cannot score it."""
    rows = _first(GSM8K, 12) + _first(ARC, 8)
    rows[11] = {**rows[11], "answer": "see the worked solution"}
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, rows


def _oracle(
    rows: list[dict[str, Any]], wrong: set[int], broken: set[int], unscored: frozenset[int] = frozenset()
):
    by_question = {r["question"]: (i, r) for i, r in enumerate(rows)}

    def handler(body: dict[str, Any]) -> Any:
        i, row = by_question[last_user_text(body)]
        if i in broken:
            return error_reply(400, "this example breaks the model", type="invalid_request_error")
        answer = row["answer"]
        if row["task_type"] == "multiple_choice":
            letters = "ABCDE"
            answer = letters[(letters.index(answer) + 1) % len(row["choices"])] if i in wrong else answer
        elif i in unscored:
            answer = "42"
        elif i in wrong:
            answer = str(int(answer) + 1)
        return final_answer_reply(answer, "stub evidence", "", usage=(10, 5), delay=0.01)

    return handler


def _validate(path: Path) -> None:
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(path))  # raises on any departure from the schema


def _suites(path: Path) -> dict[str, junitparser.TestSuite]:
    xml = junitparser.JUnitXml.fromfile(str(path))
    return {suite.name: suite for suite in xml}


def test_run_eval_junit_has_the_runs_counts_and_is_valid_against_the_schema(endpoint, mixed, tmp_path):
    path, rows = mixed
    junit, summary = tmp_path / "run.xml", tmp_path / "summary.md"
    with StubLLMServer(_oracle(rows, WRONG, BROKEN, frozenset(UNSCORED))) as server:
        endpoint(server)
        call_command(
            "run_eval", "--no-review", str(path), "--run-id", "ci", "--concurrency", "4",
            "--junit-xml", str(junit), "--summary-md", str(summary),
        )  # fmt: skip
    _validate(junit)
    suites = _suites(junit)
    assert sorted(suites) == ["ci/math", "ci/multiple_choice"]
    math, choice = suites["ci/math"], suites["ci/multiple_choice"]
    # math: 12 cases, wrong 1, 4, 7 → failures; 9 broke → error; 11 unscored → skipped
    assert (math.tests, math.failures, math.errors, math.skipped) == (12, 3, 1, 1)
    # multiple choice (examples 12..19): 13 wrong → failure; 15 broke → error
    assert (choice.tests, choice.failures, choice.errors, choice.skipped) == (8, 1, 1, 0)
    run = Run.objects.get(run_id="ci")
    metrics = run.metrics
    assert metrics["total"] == math.tests + choice.tests == 20
    assert metrics["errors"] == math.errors + choice.errors == 2
    assert metrics["unscored"] == math.skipped + choice.skipped == 1
    # wrong and errored both count as wrong in the accuracy
    assert metrics["scored"] - metrics["correct"] == math.failures + choice.failures + 2

    properties = {p.name: p.value for p in math.properties()}
    assert properties["run_id"] == "ci" and properties["model"] == "stub-model"
    assert properties["dataset"] == "mixed" and properties["task_type"] == "math"
    block = metrics["per_task_type"]["math"]
    assert float(properties["accuracy"]) == pytest.approx(block["accuracy"])  # 7 of 11
    assert [float(properties["accuracy_ci_low"]), float(properties["accuracy_ci_high"])] == pytest.approx(
        block["accuracy_ci"], rel=1e-5
    )

    cases = {case.name: case for case in math}
    wrong = Prediction.objects.select_related("example").get(
        run=run, example__external_id=rows[1]["question_id"]
    )
    failure = cases[rows[1]["question_id"]].result[0]
    assert isinstance(failure, junitparser.Failure)
    assert failure.message == wrong.score_explanation != ""
    assert failure.text == (
        f"question: {rows[1]['question']}\ngold: {rows[1]['answer']}\nanswer: {int(rows[1]['answer']) + 1}"
    )
    assert cases[rows[1]["question_id"]].classname == "mixed.math"
    assert wrong.latency_ms is not None
    assert cases[rows[1]["question_id"]].time == pytest.approx(wrong.latency_ms / 1000, abs=1e-3)
    error = cases[rows[9]["question_id"]].result[0]
    errored = Prediction.objects.get(run=run, example__external_id=rows[9]["question_id"])
    assert isinstance(error, junitparser.Error)
    assert error.message == f"stop reason: {errored.stop_reason}" and error.type == errored.stop_reason
    assert errored.error and error.text.startswith(errored.error)
    skipped = cases[rows[11]["question_id"]].result[0]
    assert isinstance(skipped, junitparser.Skipped)
    assert skipped.message == "gold 'see the worked solution' is not a number"
    assert cases[rows[0]["question_id"]].is_passed


def _tables(markdown: str) -> list[list[list[str]]]:
    """Every table of ``markdown`` as rendered (CommonMark with GitHub's table
    extension): rows of cells' text, the header row first."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    tables: list[list[list[str]]] = []
    for previous, token in itertools.pairwise(tokens):
        if token.type == "table_open":
            tables.append([])
        elif token.type == "tr_open":
            tables[-1].append([])
        elif token.type == "inline" and previous.type in ("th_open", "td_open"):
            # the cell's text as rendered: code spans and emphasis without their marks
            tables[-1][-1].append(
                "".join(c.content for c in token.children or [] if c.type in ("text", "code_inline"))
            )
    return tables


@pytest.fixture
def gsm24(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    rows = _first(GSM8K, 24)
    path = tmp_path / "gsm24.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, rows


def _run(endpoint, path: Path, rows: list[dict[str, Any]], run_id: str, wrong: set[int], *argv: str) -> None:
    with StubLLMServer(_oracle(rows, wrong, set())) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", run_id, "--concurrency", "4", *argv)


def test_a_failed_gate_still_writes_both_reports_and_the_summary_says_why(
    endpoint, gsm24, tmp_path, settings, monkeypatch
):
    """A significant regression: exit 1, and the summary (also appended to
    $GITHUB_STEP_SUMMARY) has the metrics table, the verdict with its exact
    McNemar p-value, 20 of the 22 broken examples then their count, and the
    links under AGENTLAB_BASE_URL."""
    path, rows = gsm24
    _run(endpoint, path, rows, "before", set())
    step_summary = tmp_path / "step-summary.md"
    step_summary.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    settings.AGENTLAB_BASE_URL = "https://agentlab.example.org"
    junit, summary = tmp_path / "after.xml", tmp_path / "after.md"
    with pytest.raises(CommandError) as excinfo:
        _run(
            endpoint, path, rows, "after", set(range(2, 24)),
            "--baseline", "before", "--fail-on-regression",
            "--junit-xml", str(junit), "--summary-md", str(summary),
        )  # fmt: skip
    assert excinfo.value.returncode == 1
    _validate(junit)
    assert _suites(junit)["after/math"].failures == 22
    text = summary.read_text(encoding="utf-8")
    assert step_summary.read_text(encoding="utf-8") == "earlier step\n" + text + "\n"

    tables = _tables(text)
    assert tables[0] == [
        ["task type", "accuracy", "95% CI", "correct / scored", "unscored", "total"],
        ["math", "8.3%", "2.3–25.8%", "2 / 24", "0", "24"],
        ["all", "8.3%", "2.3–25.8%", "2 / 24", "0", "24"],
    ]
    # exact McNemar with 22 broken, 0 fixed: p = 2 · 0.5^22
    p = 2 * 0.5**22
    assert f"exact McNemar p = {p:.3g}" in text and "**significant regression** at α = 0.05" in text
    assert "**Gate: ❌ failed** — significant regression against baseline before" in text
    broken = tables[3]
    assert broken[0] == ["example", "task type", "gold", "base answer", "candidate answer"]
    assert len(broken) == 1 + 20 and broken[1][2:] == [
        rows[2]["answer"],
        rows[2]["answer"],
        str(int(rows[2]["answer"]) + 1),
    ]
    assert "… and 2 more." in text
    before, after = Run.objects.get(run_id="before"), Run.objects.get(run_id="after")
    assert (
        f"[Run report](https://agentlab.example.org/admin/evaluation/run/{after.pk}/report/) · "
        f"[Comparison](https://agentlab.example.org/admin/evaluation/run/compare/{before.pk}/{after.pk}/)"
    ) in text


def test_compare_runs_writes_the_candidates_junit_and_the_comparisons_summary(endpoint, gsm24, tmp_path):
    path, rows = gsm24
    _run(endpoint, path, rows, "one", {0, 1, 2})
    _run(endpoint, path, rows, "two", {3})  # 3 fixed (0, 1, 2), 1 broken (3)
    junit, summary = tmp_path / "cmp.xml", tmp_path / "cmp.md"
    call_command("compare_runs", "one", "two", "--junit-xml", str(junit), "--summary-md", str(summary))
    _validate(junit)
    suite = _suites(junit)["two/math"]
    assert (suite.tests, suite.failures, suite.errors) == (24, 1, 0)
    properties = {p.name: p.value for p in suite.properties()}
    assert properties["baseline"] == "one" and float(properties["difference"]) == pytest.approx(2 / 24)
    assert float(properties["p_value"]) == pytest.approx(0.625)  # exact McNemar, 3 vs 1
    failure = next(case for case in suite if case.name == rows[3]["question_id"]).result[0]
    assert failure.message.endswith("(broken: right in one)")
    text = summary.read_text(encoding="utf-8")
    assert "### AgentLab comparison `one` → `two`" in text
    assert "no significant regression at α = 0.05" in text
    fixed, broken = _tables(text)[1:3]
    assert [row[0] for row in fixed[1:]] == [rows[i]["question_id"] for i in (0, 1, 2)]
    assert [row[0] for row in broken[1:]] == [rows[3]["question_id"]]


def test_run_experiment_writes_one_suite_per_variant_and_the_leaderboard(endpoint, gsm40, tmp_path):
    junit, summary = tmp_path / "exp.xml", tmp_path / "exp.md"
    variants = """
baseline = "weak"

[[variant]]
name = "strong"
model = "strong"

[[variant]]
name = "weak"
model = "weak"
"""
    with StubLLMServer(ModelOracle()) as server:
        endpoint(server)
        call_command(
            "run_experiment", str(experiment_file(tmp_path, variants)),
            "--junit-xml", str(junit), "--summary-md", str(summary),
        )  # fmt: skip
    _validate(junit)
    suites = _suites(junit)
    assert {name: (s.tests, s.failures) for name, s in suites.items()} == {
        "strong": (40, 10),
        "weak": (40, 35),
    }
    assert {p.name: p.value for p in suites["strong"].properties()}["variant"] == "strong"
    text = summary.read_text(encoding="utf-8")
    board = _tables(text)[0]
    assert board[0][:5] == ["rank", "variant", "accuracy", "95% CI", "correct / n"]
    assert [row[:5] for row in board[1:]] == [
        ["1", "strong ★", "75.0%", "59.8–85.8%", "30 / 40"],
        ["2", "weak", "12.5%", "5.5–26.1%", "5 / 40"],
    ]
    assert "#### Variant `strong`" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--junit-xml", "{tmp}/no-such-folder/run.xml"], "--junit-xml {tmp}/no-such-folder/run.xml: folder"),
        (["--summary-md", "{tmp}"], "--summary-md {tmp} is a folder"),
        (
            ["--junit-xml", "{tmp}/same", "--summary-md", "{tmp}/same"],
            "--junit-xml and --summary-md are both",
        ),
    ],
)
def test_an_unwritable_report_is_exit_2_before_anything_runs(endpoint, gsm24, tmp_path, argv, message):
    path, _ = gsm24
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with StubLLMServer(lambda body: final_answer_reply("1", "", "")) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "--no-review", str(path), "--run-id", "never", *argv)
        assert server.request_count == 0
    assert excinfo.value.returncode == 2
    assert message.replace("{tmp}", str(tmp_path)) in str(excinfo.value)
    assert not Run.objects.filter(run_id="never").exists()
    assert not (tmp_path / "same").exists()


def _report_with_each_verdict() -> bytes:
    """A report from the writer itself: one suite with a passed, a failed, an
    errored and a skipped case and two properties."""
    cases = [
        JunitCase("q1", "gsm.math", 0.5, CaseVerdict.PASSED),
        JunitCase("q2", "gsm.math", 1.25, CaseVerdict.FAILURE, "expected 4, got 5", text="question: 2+2"),
        JunitCase("q3", "gsm.math", None, CaseVerdict.ERROR, "stop reason: error", "error", "HTTP 400"),
        JunitCase("q4", "gsm.math", 0.1, CaseVerdict.SKIPPED, "gold is not a number"),
    ]
    suite = JunitSuite("r/math", cases, (("run_id", "r"), ("model", "m")), "2026-12-07T19:00:00+00:00")
    return junit_bytes([suite], name="r")


#: (what is wrong, the well-formed report's text, its malformed replacement)
MALFORMED = [
    ("a negative count", 'failures="1"', 'failures="-1"'),
    ("a time with an exponent", 'time="1.250"', 'time="1.25e0"'),
    ("a testcase with no name", '<testcase name="q1" ', "<testcase "),
    ("a skipped and a failure in one case", "<failure ", "<skipped /><failure "),
    ("an unknown element", "<properties>", "<properties><note>x</note>"),
    ("a property with no value", ' value="m"', ""),
    ("a timestamp that is not a date", "2026-12-07T19:00:00+00:00", "yesterday"),
    ("properties after a case", "</properties>\n", "</properties>\n<testcase name='x' />\n<properties />\n"),
]


def test_the_schema_accepts_each_verdict_and_rejects_malformed_reports(tmp_path):
    schema = xmlschema.XMLSchema(str(SCHEMA))
    good = _report_with_each_verdict().decode()
    schema.validate(good)  # the writer's own output, every verdict, is valid
    for what, before, after in MALFORMED:
        assert before in good, what
        with pytest.raises(xmlschema.XMLSchemaValidationError):
            schema.validate(good.replace(before, after, 1))

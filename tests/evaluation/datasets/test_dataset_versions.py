"""Dataset versions: imports that make versions, rows shared not copied, runs
pinned to a version, comparisons across versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from common.errors import BadInput, StateConflict
from evaluation.compare.pairing import versions_note
from evaluation.compare.services import run_compare
from evaluation.datasets.services import dataset_import
from evaluation.datasets.spec import ExampleSpec
from evaluation.datasets.versions import dataset_change, examples_at
from evaluation.models import Dataset, DatasetVersion, Example, Prediction, Run
from tests.shared_data import dataset_path

pytestmark = pytest.mark.django_db(transaction=True)

GSM8K = dataset_path("gsm8k-test-200.jsonl")


def gsm_lines(n: int) -> list[dict]:
    with GSM8K.open(encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f, strict=False)]


def write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def edited(lines: list[dict]) -> list[dict]:
    """Version 2 of the first 10 GSM8K lines: the 4th gold answer corrected,
    the 10th removed, three new questions added."""
    out = [dict(line) for line in lines[:9]]
    out[3]["answer"] = str(int(out[3]["answer"]) + 1)
    out += [
        {
            "question_id": f"new-{i}",
            "question": f"What is {i} + {i}?",
            "answer": str(2 * i),
            "task_type": "math",
        }
        for i in range(1, 4)
    ]
    return out


def test_an_import_with_different_examples_makes_the_next_version_and_shares_the_unchanged_rows(
    tmp_path, capsys
):
    lines = gsm_lines(10)
    call_command("import_dataset", str(write(tmp_path / "v1.jsonl", lines)), "--name", "gsm")
    assert (
        capsys.readouterr().out.strip()
        == "dataset gsm: version 1 — 10 added, 0 changed, 0 removed (10 examples)"
    )

    call_command("import_dataset", str(write(tmp_path / "same.jsonl", lines)), "--name", "gsm")
    assert capsys.readouterr().out.strip() == "dataset gsm: unchanged, still version 1 (10 examples)"

    call_command("import_dataset", str(write(tmp_path / "v2.jsonl", edited(lines))), "--name", "gsm")
    assert (
        capsys.readouterr().out.strip()
        == "dataset gsm: version 2 — 3 added, 1 changed, 1 removed (12 examples)"
    )

    dataset = Dataset.objects.get(name="gsm")
    assert dataset.version == 2
    # 10 rows of version 1, plus one new content and three new examples: nothing copied
    assert Example.objects.filter(dataset=dataset).count() == 14
    v1 = list(examples_at(dataset, 1).values_list("external_id", "answer"))
    assert v1 == [(line["question_id"], line["answer"]) for line in lines]
    v2 = {e.external_id: e for e in examples_at(dataset, 2)}
    assert len(v2) == 12 and lines[9]["question_id"] not in v2
    assert v2[lines[3]["question_id"]].answer == str(int(lines[3]["answer"]) + 1)
    # an unchanged example is one row, valid in both versions
    shared = Example.objects.get(dataset=dataset, external_id=lines[0]["question_id"])
    assert (shared.valid_from, shared.valid_to) == (1, None)
    assert list(
        dataset.versions.order_by("number").values_list("number", "added", "changed", "removed", "total")
    ) == [
        (1, 10, 0, 0, 10),
        (2, 3, 1, 1, 12),
    ]


def test_a_bad_line_in_a_new_version_writes_nothing(tmp_path):
    lines = gsm_lines(5)
    call_command("import_dataset", str(write(tmp_path / "v1.jsonl", lines)), "--name", "gsm")
    bad = [*edited(lines)[:4], {"question_id": "x", "question": "", "answer": "1", "task_type": "math"}]
    with pytest.raises(CommandError) as excinfo:
        call_command("import_dataset", str(write(tmp_path / "bad.jsonl", bad)), "--name", "gsm")
    assert excinfo.value.returncode == 2 and "line 5" in str(excinfo.value)
    assert Dataset.objects.get(name="gsm").version == 1
    assert Example.objects.count() == 5 and DatasetVersion.objects.count() == 1


def test_a_one_example_edit_of_a_large_dataset_writes_two_example_rows_in_a_few_queries():
    specs = [
        ExampleSpec(external_id=f"q{i}", question=f"What is {i} + 1?", answer=str(i + 1), task_type="math")
        for i in range(3000)
    ]
    dataset = dataset_import(name="big", examples=specs)
    fixed = ExampleSpec(external_id="q1500", question="What is 1500 + 1?", answer="1501.0", task_type="math")
    with CaptureQueriesContext(connection) as queries:
        change = dataset_change(dataset, upserts=[fixed], source="test edit")
    assert (change.number, change.added, change.changed, change.removed) == (2, [], ["q1500"], [])
    assert Example.objects.filter(dataset=dataset).count() == 3001
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(("INSERT", "UPDATE"))]
    # close the old row, insert the new one, the version row, the dataset's number
    assert len(writes) == 4, writes
    assert len(queries.captured_queries) <= 12
    assert examples_at(dataset).get(external_id="q1500").answer == "1501.0"
    assert examples_at(dataset, 1).get(external_id="q1500").answer == "1501"


def test_changes_that_are_refused_write_nothing():
    dataset = dataset_import(
        name="two",
        examples=[ExampleSpec(external_id=i, question=f"q{i}", answer="1", task_type="math") for i in "ab"],
    )
    with pytest.raises(BadInput, match="would leave it with no examples"):
        dataset_change(dataset, remove=["a", "b"])
    with pytest.raises(BadInput, match="no current example with question_id 'c'"):
        dataset_change(dataset, remove=["c"])
    with pytest.raises(BadInput, match="question_id 'a' is given twice"):
        spec = ExampleSpec(external_id="a", question="q", answer="2", task_type="math")
        dataset_change(dataset, upserts=[spec, spec])
    assert Dataset.objects.get(pk=dataset.pk).version == 1 and Example.objects.count() == 2
    assert dataset_change(dataset, remove=["a"]).number == 2
    assert list(examples_at(dataset).values_list("external_id", flat=True)) == ["b"]


def test_a_change_that_meets_another_at_the_same_moment_is_a_conflict_and_writes_nothing():
    dataset = dataset_import(
        name="race", examples=[ExampleSpec(external_id="a", question="q", answer="1", task_type="math")]
    )
    # what a second change committed meanwhile leaves where the row lock does not serialise (SQLite)
    DatasetVersion.objects.create(dataset=dataset, number=2, source="the other change", total=1)
    spec = ExampleSpec(external_id="a", question="q", answer="2", task_type="math")
    with pytest.raises(StateConflict, match="was changed by someone else at the same moment"):
        dataset_change(dataset, upserts=[spec])
    assert list(Example.objects.values_list("answer", "valid_to")) == [("1", None)]
    assert Dataset.objects.get(pk=dataset.pk).version == 1


def versioned_gsm(tmp_path: Path) -> tuple[list[dict], list[dict]]:
    lines = gsm_lines(10)
    call_command("import_dataset", str(write(tmp_path / "v1.jsonl", lines)), "--name", "gsm")
    call_command("import_dataset", str(write(tmp_path / "v2.jsonl", edited(lines))), "--name", "gsm")
    return lines, edited(lines)


def answers_gold(*versions: list[dict]):
    """A stub that answers each question with the gold answer of the latest
    ``versions`` holding it (so the corrected example is right on version 2
    and wrong on version 1)."""
    gold = {line["question"]: line["answer"] for lines in versions for line in lines}
    return lambda body: final_answer_reply(gold[last_user_text(body)], "e", "r", usage=(10, 5))


def test_runs_are_pinned_to_a_version_and_compared_across_versions(tmp_path, endpoint, capsys):
    v1_lines, v2_lines = versioned_gsm(tmp_path)
    with StubLLMServer(answers_gold(v1_lines, v2_lines)) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", "gsm@1", "--run-id", "on-v1")
        call_command("run_eval", "--no-review", "gsm", "--run-id", "on-v2", "--baseline", "previous")
    out = capsys.readouterr()
    assert "run on-v1 on gsm@1: 10 to do" in out.err and "run on-v2 on gsm@2: 12 to do" in out.err
    on_v1, on_v2 = Run.objects.get(run_id="on-v1"), Run.objects.get(run_id="on-v2")
    assert (on_v1.dataset_version, on_v2.dataset_version) == (1, 2)
    assert set(Prediction.objects.filter(run=on_v1).values_list("example__valid_from", flat=True)) == {1}
    # version 1's gold for the corrected example is one less than the stub's answer
    assert (on_v1.metrics["correct"], on_v2.metrics["correct"]) == (9, 12)

    comparison = run_compare(base=on_v1, candidate=on_v2)
    corrected, removed = v1_lines[3]["question_id"], v1_lines[9]["question_id"]
    assert comparison["changed"] == [corrected] and comparison["counts"]["changed"] == 1
    assert comparison["only_base"] == [removed] and comparison["only_candidate"] == [
        "new-1",
        "new-2",
        "new-3",
    ]
    assert comparison["counts"]["paired"] == 8 and comparison["overall"]["examples"] == 8
    assert comparison["fixed"] == [] and comparison["broken"] == []
    note = "paired on 8 examples unchanged between version 1 and version 2; 1 changed, 3 added, 1 removed"
    assert versions_note(comparison) == note
    # --baseline previous found the run on version 1 and said how it paired
    assert note in " ".join(out.out.split())

    call_command("compare_runs", "on-v1", "on-v2")
    assert note in " ".join(capsys.readouterr().out.split())

    # a run on part of version 1: the sentence still says how the versions differ,
    # while the pairs show what the runs ran
    with StubLLMServer(answers_gold(v1_lines, v2_lines)) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", "gsm@1", "--run-id", "part-v1", "--limit", "5")
    part = run_compare(base=Run.objects.get(run_id="part-v1"), candidate=on_v2)
    assert part["version_diff"] == {"added": 3, "changed": 1, "removed": 1}
    assert (part["counts"]["paired"], part["counts"]["changed"], len(part["only_candidate"])) == (4, 1, 7)
    assert versions_note(part) == (
        "paired on 4 examples unchanged between version 1 and version 2; 1 changed, 3 added, 1 removed"
    )


def test_a_resumed_run_stays_on_its_version(tmp_path, endpoint, capsys):
    lines = gsm_lines(10)
    call_command("import_dataset", str(write(tmp_path / "v1.jsonl", lines)), "--name", "gsm")
    with StubLLMServer(answers_gold(lines)) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", "gsm", "--run-id", "pinned", "--limit", "4")
        call_command("import_dataset", str(write(tmp_path / "v2.jsonl", edited(lines))), "--name", "gsm")
        call_command("run_eval", "--no-review", "gsm", "--run-id", "pinned")  # no --limit: the rest
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "--no-review", "gsm@2", "--run-id", "pinned")
    assert "run 'pinned' is on gsm@1, not @2" in str(excinfo.value)
    assert "run pinned on gsm@1: 6 to do, 4 already done (resumed)" in capsys.readouterr().err
    run = Run.objects.get(run_id="pinned")
    assert run.dataset_version == 1 and run.predictions.count() == 10
    assert set(run.predictions.values_list("example__valid_from", flat=True)) == {1}


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("gsm@x", "'gsm@x': the version after @ must be a whole number from 1 to 999999999 (as in gsm@2)"),
        ("gsm@", "'gsm@': the version after @ must be a whole number from 1"),
        ("gsm@0", "'gsm@0': the version after @ must be a whole number from 1"),
        ("gsm@7", "dataset 'gsm' has version 1; there is no version 7"),
        ("nope@1", "no dataset named 'nope'"),
    ],
)
def test_a_bad_version_reference_is_exit_2_and_runs_nothing(tmp_path, endpoint, ref, message):
    call_command("import_dataset", str(write(tmp_path / "v1.jsonl", gsm_lines(3))), "--name", "gsm")
    with StubLLMServer(answers_gold(gsm_lines(3))) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "--no-review", ref)
        assert server.request_count == 0
    assert excinfo.value.returncode == 2 and message in str(excinfo.value)
    assert Run.objects.count() == 0


def test_run_eval_on_a_csv_file_says_to_import_it_first(tmp_path, endpoint):
    path = tmp_path / "data.csv"
    path.write_text("question_id,question,answer,task_type\na,Q?,1,math\n", encoding="utf-8")
    error = refused(endpoint, str(path))
    assert "run_eval reads a registered dataset or a .jsonl file; import a CSV first" in str(error)
    assert Dataset.objects.count() == 0


def refused(endpoint, *argv: str) -> CommandError:
    with StubLLMServer(answers_gold()) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "--no-review", *argv)
        assert server.request_count == 0
    assert excinfo.value.returncode == 2
    return excinfo.value


def test_a_name_with_an_at_sign_is_refused(tmp_path):
    with pytest.raises(CommandError) as excinfo:
        call_command("import_dataset", str(write(tmp_path / "a.jsonl", gsm_lines(2))), "--name", "gsm@2")
    assert excinfo.value.returncode == 2 and "'@'" in str(excinfo.value)
    assert Dataset.objects.count() == 0

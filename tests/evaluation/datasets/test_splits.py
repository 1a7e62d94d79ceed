"""Dataset splits and tags (docs/evaluating.md#splits-and-tags): an example's
``split`` and ``tags``; ``run_eval --split S --tag T`` runs that subset,
recorded in the run's config, its plan line, its report and its CI summary;
versions, export and the admin carry them; a comparison of runs over two
subsets pairs only their shared examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from evaluation.datasets.jsonl import DatasetFormatError, parse_jsonl
from evaluation.models import Dataset, Prediction, Run
from tests.shared_data import dataset_path

pytestmark = pytest.mark.django_db(transaction=True)

GSM8K = dataset_path("gsm8k-test-200.jsonl")


def _subset_of(i: int) -> dict[str, Any]:
    """Example i: split dev for 0..7, test for 8..11; tag hard on 4..11, tag
    long on the even ones, tag short on example 1 alone."""
    tags = (["hard"] if i >= 4 else []) + (["long"] if i % 2 == 0 else []) + (["short"] if i == 1 else [])
    return {"split": "dev" if i < 8 else "test", **({"tags": tags} if tags else {})}


@pytest.fixture
def gsm12(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    with GSM8K.open(encoding="utf-8") as f:
        rows = [json.loads(line) | _subset_of(i) for i, line in zip(range(12), f, strict=False)]
    path = tmp_path / "gsm12.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, rows


class Oracle:
    """Answers every question right and records which were asked."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.by_question = {r["question"]: r for r in rows}
        self.asked: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Any:
        row = self.by_question[last_user_text(body)]
        self.asked.append(row["question_id"])
        return final_answer_reply(row["answer"], "", "", usage=(10, 5))


def _run_eval(endpoint, rows, *argv: str) -> Oracle:
    oracle = Oracle(rows)
    with StubLLMServer(oracle) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", "--concurrency", "2", *argv)
    return oracle


def _ids(rows: list[dict[str, Any]], indices) -> list[str]:
    return [rows[i]["question_id"] for i in indices]


def test_split_and_tags_run_that_subset_and_the_run_records_it(
    endpoint, gsm12, capsys, client, staff, tmp_path
):
    path, rows = gsm12
    summary = tmp_path / "s.md"
    oracle = _run_eval(
        endpoint, rows, str(path), "--run-id", "dev-hard", "--split", "dev", "--tag", "hard", "--tag", "long",
        "--summary-md", str(summary),
    )  # fmt: skip
    # dev (0..7) ∩ hard (4..) ∩ long (even): 4 and 6
    assert sorted(oracle.asked) == sorted(_ids(rows, [4, 6]))
    run = Run.objects.get(run_id="dev-hard")
    assert (run.config["split"], run.config["tags"]) == ("dev", ["hard", "long"])
    assert sorted(
        Prediction.objects.filter(run=run).values_list("example__external_id", flat=True)
    ) == sorted(_ids(rows, [4, 6]))
    assert run.metrics["total"] == 2
    assert "run dev-hard on gsm12@1 (split dev, tags hard + long): 2 to do" in capsys.readouterr().err
    assert "Dataset `gsm12` v1 (split dev, tags hard + long)" in summary.read_text(encoding="utf-8")
    client.force_login(staff)
    page = client.get(reverse("admin:evaluation_run_report", args=[run.pk])).content.decode()
    assert '<span id="run-subset">subset <strong>split dev, tags hard + long</strong></span>' in page


def test_a_whole_dataset_run_has_no_subset_in_its_config(endpoint, gsm12):
    path, rows = gsm12
    oracle = _run_eval(endpoint, rows, str(path), "--run-id", "all")
    assert len(oracle.asked) == 12
    config = Run.objects.get(run_id="all").config
    assert "split" not in config and "tags" not in config


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--split", "train"],
            "--split train: dataset gsm12@1 has no example in that split (its splits: dev, test)",
        ),
        (
            ["--tag", "easy"],
            "--tag easy: no example of dataset gsm12@1 carries it (its tags: hard, long, short)",
        ),
        (
            ["--split", "test", "--tag", "hard", "--tag", "nothing"],
            "--tag nothing: no example of dataset gsm12@1 carries it",
        ),
        (["--split", "  "], "--split must name a split"),
    ],
)
def test_an_unknown_split_or_tag_is_exit_2_and_no_run_is_written(endpoint, gsm12, argv, message):
    path, rows = gsm12
    call_command("import_dataset", str(path))
    with StubLLMServer(Oracle(rows)) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "--no-review", "gsm12", "--run-id", "never", *argv)
        assert server.request_count == 0
    assert excinfo.value.returncode == 2
    assert message in str(excinfo.value)
    assert not Run.objects.filter(run_id="never").exists()


def test_a_subset_no_example_has_all_of_is_exit_2(gsm12):
    path, _ = gsm12
    call_command("import_dataset", str(path))
    with pytest.raises(CommandError) as excinfo:
        call_command(
            "run_eval", "--no-review", "gsm12", "--run-id", "never", "--split", "test", "--tag", "short"
        )
    assert excinfo.value.returncode == 2
    assert "dataset gsm12@1: no example is in split test, tag short (all must match)" in str(excinfo.value)
    assert not Run.objects.filter(run_id="never").exists()


def test_a_resume_keeps_the_runs_subset_and_refuses_another(endpoint, gsm12):
    path, rows = gsm12
    first = _run_eval(endpoint, rows, str(path), "--run-id", "dev", "--split", "dev", "--limit", "3")
    assert first.asked and sorted(first.asked) == sorted(_ids(rows, [0, 1, 2]))
    rest = _run_eval(endpoint, rows, str(path), "--run-id", "dev")  # no --split: the run's own
    assert sorted(rest.asked) == sorted(_ids(rows, range(3, 8)))
    with pytest.raises(CommandError) as excinfo:
        _run_eval(endpoint, rows, str(path), "--run-id", "dev", "--split", "test")
    assert excinfo.value.returncode == 2
    assert "run 'dev' was started with split 'dev', not 'test': one run measures one subset" in str(
        excinfo.value
    )
    assert Prediction.objects.filter(run__run_id="dev").count() == 8


def test_a_comparison_of_two_subsets_pairs_only_their_shared_examples(endpoint, gsm12, tmp_path):
    path, rows = gsm12
    _run_eval(endpoint, rows, str(path), "--run-id", "dev", "--split", "dev")  # 0..7
    _run_eval(endpoint, rows, str(path), "--run-id", "hard", "--tag", "hard")  # 4..11
    out = tmp_path / "cmp.json"
    call_command("compare_runs", "dev", "hard", "--json", str(out))
    comparison = json.loads(out.read_text(encoding="utf-8"))
    assert comparison["counts"]["paired"] == 4 and comparison["overall"]["examples"] == 4
    assert sorted(comparison["only_base"]) == sorted(_ids(rows, range(0, 4)))
    assert sorted(comparison["only_candidate"]) == sorted(_ids(rows, range(8, 12)))


def test_split_and_tags_travel_through_versions_export_and_the_admin(gsm12, tmp_path, client, staff):
    path, rows = gsm12
    call_command("import_dataset", str(path))
    exported = tmp_path / "out.jsonl"
    call_command("export_dataset", "gsm12", "--out", str(exported))
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    assert [(r.get("split"), r.get("tags")) for r in lines] == [
        (_subset_of(i)["split"], _subset_of(i).get("tags")) for i in range(12)
    ]
    # moving one example to another split is a changed example in the next version
    lines[0]["split"] = "test"
    exported.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    call_command("import_dataset", str(exported), "--name", "gsm12")
    dataset = Dataset.objects.get(name="gsm12")
    version = dataset.versions.get(number=2)
    assert (version.added, version.changed, version.removed) == (0, 1, 0)

    client.force_login(staff)
    listing = reverse("admin:evaluation_example_changelist")
    page = client.get(f"{listing}?dataset__id__exact={dataset.pk}&split=test").content.decode()
    shown = {qid for qid in _ids(rows, range(12)) if f">{qid}<" in page}
    assert shown == set(_ids(rows, [0, 8, 9, 10, 11]))  # version 2: example 0 moved to test
    page = client.get(f"{listing}?dataset__id__exact={dataset.pk}&tag=hard").content.decode()
    assert {qid for qid in _ids(rows, range(12)) if f">{qid}<" in page} == set(_ids(rows, range(4, 12)))
    assert '<td class="field-subset">dev · hard, long</td>' in page  # example 4's column


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ('"split": 3', "line 1: field 'split' must be a non-empty string, got number"),
        ('"split": ""', "line 1: field 'split' must be a non-empty string, got a blank string"),
        ('"tags": "hard"', "line 1: field 'tags' must be a list of non-empty strings"),
        ('"tags": ["hard", 2]', "line 1: field 'tags' must be a list of non-empty strings"),
    ],
)
def test_a_malformed_split_or_tags_names_its_line(tmp_path, field, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"question_id": "q1", "question": "2+2?", "answer": "4", "task_type": "math", ' + field + "}\n",
        encoding="utf-8",
    )
    with pytest.raises(DatasetFormatError) as excinfo:
        parse_jsonl(path)
    assert message in str(excinfo.value)


def test_a_csv_reads_split_and_tags_and_an_empty_cell_leaves_them_out(tmp_path):
    from evaluation.datasets.csvfile import parse_csv

    path = tmp_path / "subsets.csv"
    path.write_text(
        "question_id,question,answer,task_type,split,tags\n"
        'q1,2+2?,4,math,dev,"[""hard"", ""long""]"\n'
        "q2,3+3?,6,math,,\n",
        encoding="utf-8",
    )
    first, second = parse_csv(path)
    assert (first.metadata, second.metadata) == ({"split": "dev", "tags": ["hard", "long"]}, {})

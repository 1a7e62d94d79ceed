"""Expected trajectories in examples: ``import_dataset`` (JSONL and CSV) keeps
them, a changed trajectory makes the next version, ``export_dataset`` writes
them back, and bad fields are exit 2 naming the file and the line with
nothing written."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from evaluation.models import Dataset, DatasetVersion, Example

pytestmark = pytest.mark.django_db(transaction=True)

TRAJECTORY = [{"tool": "search_documents", "args": {"query": "Eiffel"}}, {"tool": "calculator", "args": {}}]


def line(qid: str, **more: Any) -> dict[str, Any]:
    return {"question_id": qid, "question": f"Question {qid}?", "answer": "1", "task_type": "math", **more}


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in lines), encoding="utf-8")
    return path


def test_jsonl_import_keeps_the_fields_and_a_changed_trajectory_is_a_new_version(tmp_path):
    first = [
        line("a", trajectory=TRAJECTORY, trajectory_match="unordered", args_match="subset"),
        line("b", arg_rules={"query": "text"}, trajectory=TRAJECTORY[:1]),
        line("c"),
    ]
    call_command("import_dataset", str(write(tmp_path / "p.jsonl", first)), "--name", "paths")
    a = Example.objects.get(external_id="a")
    assert a.metadata == {"trajectory": TRAJECTORY, "trajectory_match": "unordered", "args_match": "subset"}
    changed = [first[0], line("b", arg_rules={"query": "exact"}, trajectory=TRAJECTORY[:1]), first[2]]
    call_command("import_dataset", str(write(tmp_path / "p2.jsonl", changed)), "--name", "paths")
    assert Dataset.objects.get(name="paths").version == 2
    assert DatasetVersion.objects.get(dataset__name="paths", number=2).changed == 1

    out = tmp_path / "out.jsonl"
    call_command("export_dataset", "paths", "--out", str(out))
    exported = {r["question_id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert exported["a"]["trajectory"] == TRAJECTORY and exported["a"]["trajectory_match"] == "unordered"
    assert exported["b"]["arg_rules"] == {"query": "exact"} and "trajectory" not in exported["c"]


def test_csv_import_reads_the_trajectory_columns_as_json(tmp_path):
    path = tmp_path / "p.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "question_id",
                "question",
                "answer",
                "task_type",
                "trajectory",
                "trajectory_match",
                "trajectory_slack",
            ]
        )
        writer.writerow(["a", "Q?", "1", "math", json.dumps(TRAJECTORY), "superset", "1"])
        writer.writerow(["b", "Q2?", "2", "math", "", "", ""])
    call_command("import_dataset", str(path), "--name", "paths")
    a, b = Example.objects.get(external_id="a"), Example.objects.get(external_id="b")
    assert a.metadata == {"trajectory": TRAJECTORY, "trajectory_match": "superset", "trajectory_slack": 1}
    assert b.metadata == {}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"trajectory": "calculator"}, "p.jsonl, line 2: field 'trajectory' must be a list of objects"),
        ({"trajectory": [{"args": {}}]}, "p.jsonl, line 2: field 'trajectory' item 1: 'tool' is missing"),
        (
            {"trajectory": TRAJECTORY, "trajectory_match": "fuzzy"},
            "p.jsonl, line 2: unknown trajectory_match 'fuzzy'",
        ),
        (
            {"trajectory": [{"tool": "calculator", "args": "2+2"}]},
            "line 2: field 'trajectory' item 1: 'args' must be an object",
        ),
    ],
)
def test_bad_fields_are_exit_2_naming_file_and_line_and_nothing_is_written(tmp_path, bad, message):
    path = write(tmp_path / "p.jsonl", [line("a"), line("b", **bad), line("c")])
    with pytest.raises(CommandError) as excinfo:
        call_command("import_dataset", str(path), "--name", "paths")
    assert excinfo.value.returncode == 2 and message in str(excinfo.value)
    assert not Dataset.objects.filter(name="paths").exists() and Example.objects.count() == 0


def test_a_bad_csv_trajectory_cell_names_the_line(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(
        'question_id,question,answer,task_type,trajectory\na,Q?,1,math,"[{""tool"": 1}]"\n', encoding="utf-8"
    )
    with pytest.raises(CommandError) as excinfo:
        call_command("import_dataset", str(path), "--name", "paths")
    assert excinfo.value.returncode == 2
    assert "p.csv, line 2: field 'trajectory' item 1: 'tool' must be a non-empty string" in str(excinfo.value)
    path.write_text("question_id,question,answer,task_type,trajectory\na,Q?,1,math,[oops\n", encoding="utf-8")
    with pytest.raises(CommandError) as excinfo:
        call_command("import_dataset", str(path), "--name", "paths")
    assert "p.csv, line 2: field 'trajectory' (column 'trajectory') must be a JSON array" in str(
        excinfo.value
    )
    assert Example.objects.count() == 0

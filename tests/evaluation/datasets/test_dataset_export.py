"""``export_dataset``, ``import_dataset FILE.csv [--map …]``,
``export_predictions`` and the run admin's "Export predictions (CSV)"
action: round trips on the shared datasets, every refused input (exit 2,
nothing written), and the exported predictions against a run driven through
a stub OpenAI-compatible server."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from agentlab.testing.stub_llm import StubLLMServer, error_reply, final_answer_reply, last_user_text
from evaluation.datasets.versions import CONTENT_FIELDS, examples_at
from evaluation.models import Dataset, DatasetVersion, Example, Prediction, Run
from tests.shared_data import dataset_path

pytestmark = pytest.mark.django_db

ARC = dataset_path("arc-challenge-test-100.jsonl")
GSM8K = dataset_path("gsm8k-test-200.jsonl")
HOTPOT = dataset_path("hotpotqa-dev-distractor-52.jsonl")
SPIDER = dataset_path("spider-dev-sql-61.jsonl")

PREDICTION_COLUMNS = [
    "run_id",
    "question_id",
    "epoch",
    "task_type",
    "question",
    "gold",
    "prediction",
    "correct",
    "score",
    "stop_reason",
    "steps",
    "input_tokens",
    "output_tokens",
    "cost",
    "latency_ms",
    "error",
    "turn_url",
]


def run(command: str, *args: str) -> tuple[str, str]:
    """``manage.py command *args``: its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def refused(command: str, *args: str) -> str:
    """Run a command that must exit 2 having written no dataset row; its message."""
    before = stored_rows()
    with pytest.raises(CommandError) as excinfo:
        run(command, *args)
    assert excinfo.value.returncode == 2
    assert stored_rows() == before
    return str(excinfo.value)


def stored_rows() -> tuple[int, int, int]:
    return Dataset.objects.count(), DatasetVersion.objects.count(), Example.objects.count()


def contents(name: str, version: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The examples of dataset ``name`` at ``version``, in order: (question_id, CONTENT_FIELDS)."""
    rows = examples_at(Dataset.objects.get(name=name), version).values_list("external_id", *CONTENT_FIELDS)
    return [(row[0], dict(zip(CONTENT_FIELDS, row[1:], strict=True))) for row in rows]


def jsonl(path: Path) -> list[dict[str, Any]]:
    # "\n" only: str.splitlines would also split on a U+2028 inside a string
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


# -- export_dataset --


@pytest.mark.parametrize("source", [ARC, HOTPOT], ids=["arc", "hotpotqa"])
def test_export_then_import_under_another_name_gives_the_same_examples(tmp_path, source):
    run("import_dataset", str(source), "--name", "original")
    out, err = run("export_dataset", "original", "--out", str(tmp_path / "copy.jsonl"))
    assert out == ""
    count = len(jsonl(source))
    assert err == f"wrote {count} examples of original@1 to {tmp_path / 'copy.jsonl'}\n"

    run("import_dataset", str(tmp_path / "copy.jsonl"), "--name", "copy")
    assert contents("copy") == contents("original")
    assert len(contents("copy")) == len(jsonl(source))
    first = jsonl(source)[0]
    exported = jsonl(tmp_path / "copy.jsonl")[0]
    assert list(exported)[:8] == [
        "question_id",
        "question",
        "answer",
        "task_type",
        "choices",
        "context",
        "scorer",
        "plugins",
    ]
    assert exported == {"choices": None, "context": None, "scorer": None, "plugins": [], **first}


def test_every_field_survives_the_round_trip(tmp_path):
    records: list[dict[str, Any]] = [
        {
            "question_id": 7,
            "question": "Capital of France?\u2028(one line)",
            "answer": ["Paris", "paris, France"],
            "task_type": "document_qa",
            "scorer": "contains",
            "context": {"documents": [{"title": "France", "text": "Paris is its capital."}]},
            "plugins": ["example"],
            "level": "hard",
            "notes": {"nested": [1, 2.5, None]},  # "tags" is the examples' tags (a list of names)
        },
        {"question_id": "b", "question": "2+2?", "answer": 4, "task_type": "math", "choices": ["3", "4"]},
        {"question_id": "c", "question": "Unscored", "answer": "", "task_type": "math"},
    ]
    run("import_dataset", str(write_jsonl(tmp_path / "all.jsonl", records)), "--name", "all")
    run("export_dataset", "all", "--out", str(tmp_path / "out.jsonl"))
    run("import_dataset", str(tmp_path / "out.jsonl"), "--name", "all-copy")

    assert contents("all-copy") == contents("all")
    assert jsonl(tmp_path / "out.jsonl") == [
        {**records[0], "question_id": "7", "choices": None},
        {**records[1], "answer": "4", "context": None, "scorer": None, "plugins": []},
        {**records[2], "choices": None, "context": None, "scorer": None, "plugins": []},
    ]


def test_an_earlier_version_exports_as_it_was(tmp_path):
    lines = jsonl(GSM8K)[:10]
    run("import_dataset", str(write_jsonl(tmp_path / "v1.jsonl", lines)), "--name", "gsm")
    changed = [{**lines[0], "answer": "-1"}, *lines[2:], {**lines[1], "question_id": "new-1"}]
    out, _ = run("import_dataset", str(write_jsonl(tmp_path / "v2.jsonl", changed)), "--name", "gsm")
    assert out.startswith("dataset gsm: version 2 — 1 added, 1 changed, 1 removed (10 examples)")
    version_1 = contents("gsm", 1)

    _, err = run("export_dataset", "gsm@1", "--out", str(tmp_path / "gsm-1.jsonl"))
    assert err == f"wrote 10 examples of gsm@1 to {tmp_path / 'gsm-1.jsonl'}\n"
    assert [r["question_id"] for r in jsonl(tmp_path / "gsm-1.jsonl")] == [r["question_id"] for r in lines]
    run("import_dataset", str(tmp_path / "gsm-1.jsonl"), "--name", "gsm-was")
    assert contents("gsm-was") == version_1
    assert contents("gsm-was") != contents("gsm")

    _, err = run("export_dataset", "gsm", "--out", str(tmp_path / "gsm-2.jsonl"))
    assert err.startswith("wrote 10 examples of gsm@2 to ")
    assert jsonl(tmp_path / "gsm-2.jsonl")[0]["answer"] == "-1"


def test_out_dash_writes_the_lines_to_stdout():
    run("import_dataset", str(ARC), "--name", "arc")
    out, err = run("export_dataset", "arc", "--out", "-")
    assert [json.loads(line) for line in out.splitlines()] == [
        {"choices": None, "context": None, "scorer": None, "plugins": [], **r} for r in jsonl(ARC)
    ]
    assert err == "wrote 100 examples of arc@1 to stdout\n"


def test_sql_examples_export_their_database_file_not_the_derived_paths(tmp_path):
    run("import_dataset", str(SPIDER), "--name", "spider")
    stored = Example.objects.filter(dataset__name="spider").first()
    assert stored is not None and "database_path" in stored.context and "database_root" in stored.context
    run("export_dataset", "spider", "--out", str(tmp_path / "spider.jsonl"))
    exported = jsonl(tmp_path / "spider.jsonl")
    assert exported[0]["context"] == {
        "db_id": "concert_singer",
        "database_file": "spider-databases/concert_singer.sqlite",
    }
    assert all(set(r["context"]) == {"db_id", "database_file"} for r in exported)
    assert [{k: r[k] for k in ("gold_sql", "result_rows", "ordered")} for r in exported[:2]] == [
        {"gold_sql": "SELECT count(*) FROM singer", "result_rows": [[6]], "ordered": False}
    ] * 2


@pytest.mark.parametrize(
    ("ref", "out", "message"),
    [
        ("nope", "x.jsonl", "no dataset named 'nope'"),
        ("arc@2", "x.jsonl", "dataset 'arc' has version 1; there is no version 2"),
        ("arc@x", "x.jsonl", "'arc@x': the version after @ must be a whole number from 1"),
        ("arc", "missing/x.jsonl", "--out missing/x.jsonl: folder"),
        ("arc", "x.csv", "--out x.csv: the file name must end in .jsonl"),
    ],
)
def test_export_dataset_refuses_bad_input_with_exit_2_and_writes_no_file(
    tmp_path, monkeypatch, ref, out, message
):
    run("import_dataset", str(ARC), "--name", "arc")
    monkeypatch.chdir(tmp_path)
    assert message in refused("export_dataset", ref, "--out", out)
    assert list(tmp_path.iterdir()) == []


# -- import_dataset FILE.csv --


def write_csv(path: Path, text: str, *, bom: bool = False) -> Path:
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


QUIZ_CSV = (
    "id,prompt,expected,task_type,choices,level,notes\r\n"
    'q1,"Which is a fruit?\nA. apple\nB. rock",A,multiple_choice,"[""apple"", ""rock""]",2,\r\n'
    'q2,What is 6*7?,42,math,,1,"has, a comma"\r\n'
)


def test_a_csv_imports_with_its_columns_mapped(tmp_path):
    path = write_csv(tmp_path / "quiz.csv", QUIZ_CSV, bom=True)
    out, _ = run(
        "import_dataset", str(path), "--map", "question_id=id,question=prompt", "--map", "answer=expected"
    )
    assert out.startswith("dataset quiz: version 1 — 2 added, 0 changed, 0 removed (2 examples)")
    assert contents("quiz") == [
        (
            "q1",
            {
                "question": "Which is a fruit?\nA. apple\nB. rock",
                "answer": "A",
                "task_type": "multiple_choice",
                "scorer": "",
                "choices": ["apple", "rock"],
                "context": {},
                "metadata": {"level": "2", "notes": ""},
                "plugins": [],
            },
        ),
        (
            "q2",
            {
                "question": "What is 6*7?",
                "answer": "42",
                "task_type": "math",
                "scorer": "",
                "choices": None,
                "context": {},
                "metadata": {"level": "1", "notes": "has, a comma"},
                "plugins": [],
            },
        ),
    ]


def test_csv_then_jsonl_then_import_keeps_the_examples(tmp_path):
    text = (
        "question_id,question,answer,task_type,context,scorer,source\n"
        "h1,Who wrote it?,Tim,document_qa,"
        '"{""documents"": [{""title"": ""T"", ""text"": ""Tim wrote it.""}]}",contains,wiki\n'
        "h2,Sum 2 and 2,4,math,,,\n"
    )
    run("import_dataset", str(write_csv(tmp_path / "docs.csv", text)), "--name", "docs")
    run("export_dataset", "docs", "--out", str(tmp_path / "docs.jsonl"))
    run("import_dataset", str(tmp_path / "docs.jsonl"), "--name", "docs-again")
    assert contents("docs-again") == contents("docs")
    assert jsonl(tmp_path / "docs.jsonl")[0] == {
        "question_id": "h1",
        "question": "Who wrote it?",
        "answer": "Tim",
        "task_type": "document_qa",
        "choices": None,
        "context": {"documents": [{"title": "T", "text": "Tim wrote it."}]},
        "scorer": "contains",
        "plugins": [],
        "source": "wiki",
    }


def test_a_column_named_like_a_field_mapped_elsewhere_is_left_out(tmp_path):
    text = "question_id,question,prompt,answer,task_type\na,short,The full question?,1,math\n"
    run("import_dataset", str(write_csv(tmp_path / "two.csv", text)), "--map", "question=prompt")
    ((_, content),) = contents("two")
    assert (content["question"], content["metadata"]) == ("The full question?", {})


HEADER = "question_id,question,answer,task_type,choices,scorer\n"


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        (HEADER + "a,Q?,1,math,,\n", ["--map", "question"], "--map 'question': give FIELD=COLUMN pairs"),
        (HEADER + "a,Q?,1,math,,\n", ["--map", "title=question"], "unknown field 'title'"),
        (HEADER + "a,Q?,1,math,,\n", ["--map", "answer=a,answer=b"], "field 'answer' is mapped twice"),
        (
            HEADER + "a,Q?,1,math,,\n",
            ["--map", "question=prompt"],
            "data.csv, line 1: --map question=prompt: no column 'prompt' (the columns are: question_id, ",
        ),
        (
            "id,question,answer,task_type\na,Q?,1,math\n",
            [],
            "data.csv, line 1: no column 'question_id' (the columns are: id, question, answer, task_type); "
            "name it with --map question_id=COLUMN",
        ),
        (
            HEADER + 'a,"two\nlines",1,math,,\nb,Q?,1,math,apple,\n',
            [],
            "data.csv, line 4: field 'choices' (column 'choices') must be a JSON array: Expecting value",
        ),
        (
            HEADER + 'a,Q?,1,math,"{""a"": 1}",\n',
            [],
            "data.csv, line 2: field 'choices' (column 'choices') must be",
        ),
        (HEADER + "a,Q?,1,math,,\n\nb,,1,math,,\n", [], "data.csv, line 4: field 'question' is empty"),
        (
            HEADER + "a,Q?,1,math,,\na,Q2?,2,math,,\n",
            [],
            "data.csv, line 3: duplicate question_id 'a' (first on line 2)",
        ),
        (HEADER + "a,Q?,1,math,,,extra\n", [], "data.csv, line 2: 7 cells, the header has 6"),
        (HEADER + "a,Q?,1,math,,nonsense\n", [], "data.csv, line 2: unknown scorer 'nonsense'"),
        (HEADER + 'a,"Q?,1,math,,\n', [], "data.csv, line 2: not valid CSV"),
        (HEADER, [], "data.csv: no examples"),
        ("\n" + HEADER + "a,Q?,1,math,,\n", [], "data.csv, line 1: no header row"),
        ('"question_id,question\n', [], "data.csv, line 1: not valid CSV"),
        ("question_id,question,question,answer,task_type\n", [], "line 1: column 'question' appears twice"),
    ],
)
def test_a_bad_csv_is_exit_2_names_the_line_and_writes_nothing(tmp_path, text, args, message):
    run("import_dataset", str(ARC), "--name", "arc")  # something to keep
    path = write_csv(tmp_path / "data.csv", text)
    assert message in refused("import_dataset", str(path), *args)


def test_bytes_that_are_not_utf8_are_named_by_line(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(HEADER.encode() + b"a,caf\xe9,1,math,,\n")
    assert "data.csv, line 2: not valid UTF-8" in refused("import_dataset", str(path))


def test_map_on_a_jsonl_file_is_refused(tmp_path):
    message = refused("import_dataset", str(ARC), "--map", "question=prompt")
    assert "--map names the columns of a .csv file; arc-challenge-test-100.jsonl is read as JSONL" in message


# -- export_predictions and the admin action --

SMALL: list[dict[str, Any]] = [
    {"question_id": "sum", "question": "What is 2+2?", "answer": "4", "task_type": "math"},
    {
        "question_id": "city",
        "question": "Capital of France?",
        "answer": ["Paris", "Paris, France"],
        "task_type": "fact",
    },
    {"question_id": "open", "question": "Say anything.", "answer": "", "task_type": "fact"},
    {"question_id": "boom", "question": "Break the model.", "answer": "1", "task_type": "math"},
]


def answers(body: dict[str, Any]) -> Any:
    """The stub model: right on ``sum`` and ``city`` (by an alias), anything on
    ``open`` (no gold: unscored), an HTTP 400 on ``boom``."""
    question = last_user_text(body)
    if question == "Break the model.":
        return error_reply(400, "this example breaks the model", type="invalid_request_error")
    reply = {"What is 2+2?": "4", "Capital of France?": "paris, france"}.get(question, "hello")
    return final_answer_reply(reply, "e", "r", usage=(1000, 500))


@pytest.fixture
def small_runs(endpoint, tmp_path) -> dict[str, Run]:
    """Two finished runs on ``SMALL``: ``two-epochs`` (2 epochs) and ``one-epoch``."""
    path = write_jsonl(tmp_path / "small.jsonl", SMALL)
    with StubLLMServer(answers) as server:
        endpoint(server)
        common = ["--no-review", str(path), "--concurrency", "1", "--price-in", "1", "--price-out", "2"]
        call_command("run_eval", *common, "--run-id", "two-epochs", "--epochs", "2", stdout=io.StringIO())
        call_command("run_eval", *common, "--run-id", "one-epoch", stdout=io.StringIO())
    return {run.run_id: run for run in Run.objects.all()}


def turn_url(run_id: str, question_id: str, epoch: int) -> str:
    prediction = Prediction.objects.get(run__run_id=run_id, example__external_id=question_id, epoch=epoch)
    return f"/admin/turns/turn/{prediction.turn_id}/change/"


def latency(run_id: str, question_id: str, epoch: int) -> int | None:
    return Prediction.objects.get(
        run__run_id=run_id, example__external_id=question_id, epoch=epoch
    ).latency_ms


@pytest.mark.django_db(transaction=True)
def test_export_predictions_csv_has_one_row_per_prediction_in_example_then_epoch_order(tmp_path, small_runs):
    _, err = run("export_predictions", "two-epochs", "--out", str(tmp_path / "p.csv"))
    assert err == f"wrote 8 predictions of run two-epochs to {tmp_path / 'p.csv'}\n"
    raw = (tmp_path / "p.csv").read_bytes()
    assert raw.startswith(b"run_id,question_id,epoch,") and b"\r\n" in raw
    with (tmp_path / "p.csv").open(encoding="utf-8", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == PREDICTION_COLUMNS
    rows = [dict(zip(PREDICTION_COLUMNS, cells, strict=True)) for cells in table[1:]]
    assert [(r["question_id"], r["epoch"]) for r in rows] == [
        (q, e) for q in ("sum", "city", "open", "boom") for e in ("1", "2")
    ]
    by_id = {r["question_id"]: r for r in rows if r["epoch"] == "1"}
    cost = str(1000 * 1 / 1e6 + 500 * 2 / 1e6)
    assert by_id["sum"] == {
        "run_id": "two-epochs",
        "question_id": "sum",
        "epoch": "1",
        "task_type": "math",
        "question": "What is 2+2?",
        "gold": "4",
        "prediction": "4",
        "correct": "true",
        "score": "1.0",
        "stop_reason": "final",
        "steps": "1",
        "input_tokens": "1000",
        "output_tokens": "500",
        "cost": cost,
        "latency_ms": str(latency("two-epochs", "sum", 1)),
        "error": "",
        "turn_url": turn_url("two-epochs", "sum", 1),
    }
    assert (by_id["city"]["gold"], by_id["city"]["prediction"], by_id["city"]["correct"]) == (
        '["Paris", "Paris, France"]',
        "paris, france",
        "true",
    )
    assert (by_id["open"]["correct"], by_id["open"]["score"], by_id["open"]["prediction"]) == (
        "",
        "",
        "hello",
    )
    boom = by_id["boom"]
    assert (boom["correct"], boom["stop_reason"], boom["prediction"]) == ("false", "provider_error", "")
    assert "this example breaks the model" in boom["error"]


@pytest.mark.django_db(transaction=True)
def test_export_predictions_jsonl_keeps_types_and_nulls(tmp_path, small_runs):
    _, err = run("export_predictions", "one-epoch", "--out", str(tmp_path / "p.JSONL"))
    assert err == f"wrote 4 predictions of run one-epoch to {tmp_path / 'p.JSONL'}\n"
    lines = jsonl(tmp_path / "p.JSONL")
    assert [list(line) for line in lines] == [PREDICTION_COLUMNS] * 4
    assert [line["question_id"] for line in lines] == ["sum", "city", "open", "boom"]
    sum_, city, open_, boom = lines
    assert {k: sum_[k] for k in ("epoch", "correct", "score", "steps", "input_tokens", "output_tokens")} == {
        "epoch": 1,
        "correct": True,
        "score": 1.0,
        "steps": 1,
        "input_tokens": 1000,
        "output_tokens": 500,
    }
    assert sum_["cost"] == pytest.approx(0.002)
    assert city["gold"] == '["Paris", "Paris, France"]'
    assert (open_["gold"], open_["correct"], open_["score"]) == ("", None, None)
    assert (boom["correct"], boom["stop_reason"]) == (False, "provider_error")
    assert sum_["turn_url"] == turn_url("one-epoch", "sum", 1)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("run_id", "out", "message"),
    [
        ("no-such-run", "p.csv", "run 'no-such-run' not found"),
        ("one-epoch", "p.xlsx", "--out p.xlsx: the file name must end in .csv or .jsonl"),
        ("one-epoch", "p", "the file name must end in .csv or .jsonl"),
        ("one-epoch", "missing/p.csv", "--out missing/p.csv: folder"),
    ],
)
def test_export_predictions_refuses_bad_input_with_exit_2(
    tmp_path, monkeypatch, small_runs, run_id, out, message
):
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    assert message in refused("export_predictions", run_id, "--out", out)
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.django_db(transaction=True)
def test_the_admin_action_downloads_the_same_csv(tmp_path, small_runs, staff):
    client = Client()
    client.force_login(staff)
    changelist = reverse("admin:evaluation_run_changelist")
    one = small_runs["two-epochs"]
    response = client.post(changelist, {"action": "export_predictions_csv", "_selected_action": [one.pk]})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="two-epochs-predictions.csv"'
    run("export_predictions", "two-epochs", "--out", str(tmp_path / "p.csv"))
    assert response.content == (tmp_path / "p.csv").read_bytes()

    both = [run.pk for run in small_runs.values()]
    response = client.post(changelist, {"action": "export_predictions_csv", "_selected_action": both})
    assert response["Content-Disposition"] == 'attachment; filename="predictions-2-runs.csv"'
    table = list(csv.reader(io.StringIO(response.content.decode("utf-8"))))
    assert table[0] == PREDICTION_COLUMNS
    assert [row[0] for row in table[1:]] == ["two-epochs"] * 8 + ["one-epoch"] * 4

"""Dataset parsing (evaluation/datasets.py) on the real shared files and on malformed
temporary files, and the demo dataset (evaluation/demo.py). No Django needed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from evaluation.datasets.demo import DEMO_DATASET_NAME, demo_examples
from evaluation.datasets.jsonl import DatasetFormatError, parse_jsonl, parse_records
from evaluation.datasets.spec import ExampleSpec
from evaluation.scoring import score, scorer_for
from tests.shared_data import dataset_path


def _shared(name: str) -> Path:
    return dataset_path(name)


def _line(**fields: Any) -> str:
    record = {"question_id": "q1", "question": "What is 2 + 2?", "answer": "4", "task_type": "math"}
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not _DROP})


_DROP = object()


def _write(tmp_path: Path, text: str | bytes, name: str = "bad.jsonl") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _error(path: Path) -> DatasetFormatError:
    with pytest.raises(DatasetFormatError) as info:
        parse_jsonl(path)
    return info.value


# --------------------------------------------------------------------------- the real shared datasets


@pytest.mark.parametrize(
    ("name", "rows", "task_type"),
    [
        ("gsm8k-test-200.jsonl", 200, "math"),
        ("arc-challenge-test-100.jsonl", 100, "multiple_choice"),
        ("commonsenseqa-dev-100.jsonl", 100, "multiple_choice"),
        ("hotpotqa-dev-distractor-52.jsonl", 52, "document_qa"),
        ("spider-dev-sql-61.jsonl", 61, "sql"),
    ],
)
def test_parses_every_shared_dataset(name: str, rows: int, task_type: str) -> None:
    examples = parse_jsonl(_shared(name))
    assert len(examples) == rows
    assert {e.task_type for e in examples} == {task_type}
    assert len({e.external_id for e in examples}) == rows
    assert all(e.scorer is None for e in examples)


def test_gsm8k_first_example_fields() -> None:
    first = parse_jsonl(_shared("gsm8k-test-200.jsonl"))[0]
    assert first == ExampleSpec(
        external_id="gsm8k-test-0",
        question=first.question,
        answer="18",
        task_type="math",
        scorer=None,
        choices=None,
        context=None,
        metadata={},
    )
    assert first.question.startswith("Janet\u2019s ducks lay 16 eggs per day.")


def test_arc_and_commonsenseqa_keep_choices() -> None:
    arc = parse_jsonl(_shared("arc-challenge-test-100.jsonl"))[0]
    assert (arc.external_id, arc.answer) == ("arc-challenge-test-Mercury_7175875", "C")
    assert arc.choices == [
        "Planetary density will decrease.",
        "Planetary years will become longer.",
        "Planetary days will become shorter.",
        "Planetary gravity will become stronger.",
    ]
    assert arc.metadata == {} and arc.context is None
    csqa = parse_jsonl(_shared("commonsenseqa-dev-100.jsonl"))
    assert {len(e.choices or []) for e in csqa} == {5}
    assert (csqa[0].answer, csqa[0].choices[0] if csqa[0].choices else None) == ("A", "bank")


def test_hotpotqa_extra_fields_go_to_metadata_and_documents_stay_in_context() -> None:
    examples = parse_jsonl(_shared("hotpotqa-dev-distractor-52.jsonl"))
    first = examples[0]
    assert (first.external_id, first.answer) == ("hotpotqa-dev-5a8b57f25542995d1e6f1371", "yes")
    assert sorted(first.metadata) == ["hotpot_type", "level", "supporting_facts"]
    assert (first.metadata["hotpot_type"], first.metadata["level"]) == ("comparison", "hard")
    assert first.metadata["supporting_facts"][0] == {"title": "Scott Derrickson", "sent_id": 0}
    assert first.context is not None and len(first.context["documents"]) == 10
    assert first.context["documents"][0]["title"] == "Ed Wood (film)"
    assert sorted(len(e.context["documents"]) for e in examples if e.context)[:2] == [2, 10]
    assert sum(e.metadata["hotpot_type"] == "bridge" for e in examples) == 38


def test_spider_keeps_result_rows_and_resolves_the_database_path() -> None:
    path = _shared("spider-dev-sql-61.jsonl")
    by_id = {e.external_id: e for e in parse_jsonl(path)}
    avg = by_id["spider-dev-416"]
    assert avg.answer == "31.333333333333332"
    assert avg.metadata["result_rows"] == [[31.333333333333332]]
    assert avg.metadata["ordered"] is False
    assert sorted(avg.metadata) == ["gold_sql", "ordered", "result_rows"]
    first = by_id["spider-dev-0"]
    assert first.metadata["gold_sql"] == "SELECT count(*) FROM singer"
    assert first.context is not None
    assert first.context["db_id"] == "concert_singer"
    assert first.context["database_file"] == "spider-databases/concert_singer.sqlite"
    database_path = Path(first.context["database_path"])
    assert database_path.is_absolute()
    assert database_path == (path.parent / "spider-databases" / "concert_singer.sqlite").resolve()
    assert database_path.is_file()
    assert by_id["spider-dev-412"].answer == '["Gonzalo Higuaín ", "Fernando Gago", "Guti Midfielder"]'


def test_every_shared_gold_scores_correct_against_itself_with_its_default_scorer() -> None:
    for name in (
        "gsm8k-test-200.jsonl",
        "arc-challenge-test-100.jsonl",
        "commonsenseqa-dev-100.jsonl",
        "hotpotqa-dev-distractor-52.jsonl",
        "spider-dev-sql-61.jsonl",
    ):
        for e in parse_jsonl(_shared(name)):
            scorer = scorer_for(example_scorer=e.scorer, task_type=e.task_type)
            assert isinstance(e.answer, str)  # the shared files have no alias lists
            result = score(
                prediction=e.answer, gold=e.answer, scorer=scorer, choices=e.choices, metadata=e.metadata
            )
            assert result.correct is True, (e.external_id, result)


# --------------------------------------------------------------------------- accepted variations


def test_optional_fields_types_and_extras(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "\n".join(
            [
                _line(question_id=7, answer=18),
                _line(question_id="q2", answer=["a", "b"], scorer="contains", choices=None, context=None),
                _line(question_id="q3", answer="", choices=["x", "y"], context={"note": 1}, source="mine"),
            ]
        )
        + "\n",
    )
    first, second, third = parse_jsonl(path)
    assert (first.external_id, first.answer) == ("7", "18")
    # a JSON array is a list of aliases (tests/evaluation/datasets/test_gold_answers.py)
    assert (second.answer, second.scorer, second.choices, second.context) == (
        ["a", "b"],
        "contains",
        None,
        None,
    )
    assert (third.answer, third.choices, third.context, third.metadata) == (
        "",
        ["x", "y"],
        {"note": 1},
        {"source": "mine"},
    )


def test_blank_lines_bom_and_crlf_are_accepted(tmp_path: Path) -> None:
    text = "\r\n".join(["", _line(question_id="a"), "   ", _line(question_id="b"), ""])
    path = _write(tmp_path, b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert [e.external_id for e in parse_jsonl(path)] == ["a", "b"]


def test_line_separator_inside_a_json_string_does_not_split_the_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        json.dumps(
            {"question_id": "a", "question": "one\u2028two", "answer": "x", "task_type": "document_qa"},
            ensure_ascii=False,
        )
        + "\n",
    )
    assert parse_jsonl(path)[0].question == "one\u2028two"


def test_missing_database_file_is_not_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, _line(task_type="sql", context={"db_id": "x", "database_file": "dbs/x.sqlite"}))
    context = parse_jsonl(path)[0].context
    assert context == {
        "db_id": "x",
        "database_file": "dbs/x.sqlite",
        "database_path": str((tmp_path / "dbs" / "x.sqlite").resolve()),
        "database_root": str(tmp_path.resolve()),
    }


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (
            {"database_path": "/abs/app.sqlite3"},
            "field 'context.database_path' is not allowed (give 'context.database_file')",
        ),
        (
            {"database_file": "x.sqlite", "database_path": "/abs/app.sqlite3"},
            "field 'context.database_path' is not allowed (give 'context.database_file')",
        ),
        (
            {"database_file": "x.sqlite", "database_root": "/"},
            "field 'context.database_root' is not allowed (give 'context.database_file')",
        ),
        (
            {"database_file": "/abs/app.sqlite3"},
            "field 'context.database_file' must be a relative path, got '/abs/app.sqlite3'",
        ),
        (
            {"database_file": "../a.sqlite3"},
            "field 'context.database_file' '../a.sqlite3' is outside the dataset's folder",
        ),
        (
            {"database_file": "dbs/../../a.sqlite3"},
            "field 'context.database_file' 'dbs/../../a.sqlite3' is outside the dataset's folder",
        ),
    ],
)
def test_a_database_outside_the_dataset_folder_is_refused_naming_the_line(
    tmp_path: Path, context: dict[str, str], message: str
) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    path = _write(folder, "\n".join([_line(question_id="a"), _line(question_id="b", context=context)]))
    error = _error(path)
    assert (error.line, error.message, str(error)) == (2, message, f"bad.jsonl, line 2: {message}")
    with pytest.raises(DatasetFormatError) as info:
        parse_records([json.loads(_line(context=context))], source="upload", base_dir=folder)
    assert str(info.value) == f"upload, line 1: {message}"


def test_a_symlink_out_of_the_dataset_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "app.sqlite3"
    outside.write_bytes(b"")
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "dbs").symlink_to(tmp_path)
    path = _write(folder, _line(context={"database_file": "dbs/app.sqlite3"}))
    assert str(_error(path)) == (
        "bad.jsonl, line 1: field 'context.database_file' 'dbs/app.sqlite3' is outside the dataset's folder"
    )


def test_a_dataset_folder_reached_through_a_symlink_still_resolves(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "dbs").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    _write(real, _line(context={"database_file": "dbs/x.sqlite"}), name="set.jsonl")
    (only,) = parse_jsonl(tmp_path / "link" / "set.jsonl")
    assert only.context == {
        "database_file": "dbs/x.sqlite",
        "database_path": str(real / "dbs" / "x.sqlite"),
        "database_root": str(real),
    }


# --------------------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", "not valid JSON: Expecting property name enclosed in double quotes (column 2)"),
        ("[1, 2]", "expected a JSON object, got array"),
        ('"just text"', "expected a JSON object, got string"),
        (_line(question_id=_DROP), "field 'question_id' is missing"),
        (_line(question_id=""), "field 'question_id' is empty"),
        (_line(question_id=True), "field 'question_id' must be a string or an integer, got boolean"),
        (_line(question_id=1.5), "field 'question_id' must be a string or an integer, got number"),
        (_line(question=_DROP), "field 'question' is missing"),
        (_line(question="  "), "field 'question' is empty"),
        (_line(question=["What?"]), "field 'question' must be a string, got array"),
        (_line(answer=_DROP), "field 'answer' is missing"),
        (_line(answer=None), "field 'answer' is null (or NaN): give the gold answer"),
        (_line(answer=[]), "field 'answer' is an empty list: give at least one accepted answer"),
        (_line(task_type=_DROP), "field 'task_type' is missing"),
        (_line(task_type=""), "field 'task_type' is empty"),
        (_line(choices="A, B"), "field 'choices' must be a non-empty list of strings"),
        (_line(choices=[]), "field 'choices' must be a non-empty list of strings"),
        (_line(choices=["a", 2]), "field 'choices' item 1 must be a string, got number"),
        (_line(context=["doc"]), "field 'context' must be an object, got array"),
        (_line(context={"database_file": 3}), "field 'context.database_file' must be a non-empty string"),
        (_line(scorer=1), "field 'scorer' must be a string, got number"),
        (
            _line(scorer="fuzzy"),
            "unknown scorer 'fuzzy' (known: choice, contains, exact, f1, numeric, sql_result)",
        ),
    ],
)
def test_malformed_line_is_reported_with_file_and_line_number(
    tmp_path: Path, bad_line: str, message: str
) -> None:
    good = [_line(question_id="g1"), _line(question_id="g2")]
    path = _write(tmp_path, "\n".join([good[0], "", good[1], bad_line, _line(question_id="g3")]) + "\n")
    error = _error(path)
    assert (error.line, error.message, error.path) == (4, message, str(path))
    assert str(error) == f"bad.jsonl, line 4: {message}"
    assert isinstance(error, ValueError)


def test_duplicate_question_id_names_both_lines(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "\n".join([_line(question_id="a"), _line(question_id="b"), "", _line(question_id="a")])
    )
    error = _error(path)
    assert str(error) == "bad.jsonl, line 4: duplicate question_id 'a' (first on line 1)"


def test_integer_and_string_ids_that_collide_are_duplicates(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([_line(question_id=7), _line(question_id="7")]))
    assert (_error(path).line, _error(path).message) == (2, "duplicate question_id '7' (first on line 1)")


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file_is_an_error_without_a_line(tmp_path: Path, content: str) -> None:
    error = _error(_write(tmp_path, content, name="empty.jsonl"))
    assert error.line is None
    assert str(error) == "empty.jsonl: no examples (the file is empty)"


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, _line(question_id="a").encode() + b"\n" + b'{"question_id": "\xff"}\n')
    error = _error(path)
    assert (error.line, error.message) == (2, "not valid UTF-8 (byte 18 of the line)")


def test_missing_file_is_an_error_without_a_line(tmp_path: Path) -> None:
    error = _error(tmp_path / "nope.jsonl")
    assert error.line is None
    assert str(error).startswith("nope.jsonl: cannot read the file")


def test_an_error_on_the_last_line_returns_nothing(tmp_path: Path) -> None:
    lines = [_line(question_id=f"q{i}") for i in range(1, 100)] + ["{oops"]
    error = _error(_write(tmp_path, "\n".join(lines)))
    assert error.line == 100


def test_parse_records_uses_positions_as_line_numbers() -> None:
    records = [json.loads(_line(question_id="a")), json.loads(_line(question_id="b", task_type=""))]
    with pytest.raises(DatasetFormatError) as info:
        parse_records(records, source="upload.jsonl")
    assert str(info.value) == "upload.jsonl, line 2: field 'task_type' is empty"
    with pytest.raises(DatasetFormatError, match=r"^upload: no examples$"):
        parse_records([], source="upload")
    (only,) = parse_records(
        [json.loads(_line(context={"database_file": "x.sqlite"}))], source="upload", base_dir="/data"
    )
    assert only.context == {
        "database_file": "x.sqlite",
        "database_path": str(Path("/data/x.sqlite").resolve()),
        "database_root": str(Path("/data").resolve()),
    }


# --------------------------------------------------------------------------- demo dataset


def test_demo_dataset_shape() -> None:
    examples = demo_examples()
    assert DEMO_DATASET_NAME == "demo"
    assert [e.task_type for e in examples] == ["math"] * 3 + ["multiple_choice"] * 3 + ["document_qa"] * 2
    assert len({e.external_id for e in examples}) == 8
    assert demo_examples() == examples and demo_examples()[0] is not examples[0]
    for e in examples:
        assert isinstance(e.answer, str)
        if e.task_type == "math":
            assert re.fullmatch(r"\d+", e.answer)
        if e.task_type == "multiple_choice":
            # arc-challenge layout: stem, blank line, "A. option" lines in order
            stem, options = e.question.split("\n\n")
            assert stem.endswith("?")
            assert e.choices is not None
            assert options.split("\n") == [f"{'ABCD'[i]}. {c}" for i, c in enumerate(e.choices)]
            assert e.answer in "ABCD"[: len(e.choices)]
        if e.task_type == "document_qa":
            assert e.context is not None
            documents = e.context["documents"]
            assert 2 <= len(documents) <= 3
            assert all(sorted(d) == ["text", "title"] for d in documents)
            assert any(e.answer in d["text"] for d in documents)


def test_demo_layout_matches_the_shared_arc_file() -> None:
    arc = parse_jsonl(_shared("arc-challenge-test-100.jsonl"))[0]
    demo = demo_examples()[3]
    pattern = r"[^\n]+\n\n(?:[A-E]\. [^\n]+\n)*[A-E]\. [^\n]+"
    assert re.fullmatch(pattern, arc.question) and re.fullmatch(pattern, demo.question)


def test_every_demo_example_scores_correct_against_its_own_gold() -> None:
    for e in demo_examples():
        scorer = scorer_for(example_scorer=e.scorer, task_type=e.task_type)
        assert isinstance(e.answer, str)
        result = score(
            prediction=e.answer, gold=e.answer, scorer=scorer, choices=e.choices, metadata=e.metadata
        )
        assert (result.correct, result.value) == (True, 1.0), e.external_id


@pytest.mark.parametrize(
    ("external_id", "prediction", "correct"),
    [
        ("demo-math-1", "Tom has 7 apples now.", True),
        ("demo-math-1", "12", False),
        ("demo-mc-2", "The answer is C.", True),
        ("demo-mc-2", "A dog", False),
        ("demo-mc-2", "A bird", True),
        ("demo-doc-2", "Blue.", True),
        ("demo-doc-2", "grey", False),
    ],
)
def test_demo_examples_score_plausible_model_answers(
    external_id: str, prediction: str, correct: bool
) -> None:
    e = {x.external_id: x for x in demo_examples()}[external_id]
    scorer = scorer_for(example_scorer=e.scorer, task_type=e.task_type)
    assert score(prediction=prediction, gold=e.answer, scorer=scorer, choices=e.choices).correct is correct


def test_a_line_switches_installed_plugins_on_for_its_example(tmp_path: Path) -> None:
    path = _write(
        tmp_path, _line(plugins=["example", "example_prompt", "example"]) + "\n" + _line(question_id="q2")
    )

    first, second = parse_jsonl(path)

    assert first.plugins == ("example", "example_prompt")
    assert "plugins" not in first.metadata
    assert second.plugins == ()


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        (["no_such_plugin"], "bad.jsonl, line 1: field 'plugins': no plugin 'no_such_plugin'"),
        ("example", "bad.jsonl, line 1: field 'plugins' must be a list of plugin names, got string"),
        ([""], "bad.jsonl, line 1: field 'plugins' must be a list of plugin names, got array"),
    ],
)
def test_a_plugin_a_line_names_must_be_installed(tmp_path: Path, plugins: Any, message: str) -> None:
    with pytest.raises(DatasetFormatError) as caught:
        parse_jsonl(_write(tmp_path, _line(plugins=plugins)))

    assert str(caught.value).startswith(message)

"""Conversation lines of a dataset file (issue 41): a scripted conversation
(``turns``) or a simulated user (``simulated_user`` + ``success``) — what is
stored, and every bad input refused with the file and line named, exit 2 and
nothing written; versions and exports carry them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from evaluation.datasets.jsonl import DatasetFormatError, parse_jsonl
from evaluation.models import Dataset, Example

GOOD: dict[str, Any] = {"question_id": "ok", "question": "What is 2 + 2?", "answer": "4", "task_type": "math"}
SCRIPTED: dict[str, Any] = {
    "question_id": "conv",
    "task_type": "qa",
    "turns": [
        {"user": "Capital of France?", "answer": "Paris"},
        {"user": "And Italy?", "answer": ["Rome", "Roma"]},
    ],
}
SIMULATED: dict[str, Any] = {
    "question_id": "sim",
    "task_type": "support",
    "simulated_user": {"persona": "a busy parent", "goal": "get a refund for order 7", "max_turns": 4},
    "success": {"rubric": "The assistant confirms a refund for order 7."},
}


def write(tmp_path: Path, *lines: dict[str, Any], name: str = "convs.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_conversation_lines_are_stored_with_their_conversation_in_the_metadata(tmp_path):
    first_message = {**SIMULATED["simulated_user"], "first_message": "Hi, I want my money back."}
    answer_goal = {
        **SIMULATED,
        "question_id": "sim2",
        "simulated_user": first_message,
        "success": {"answer": 7},
    }
    examples = parse_jsonl(write(tmp_path, GOOD, SCRIPTED, SIMULATED, answer_goal))
    plain, scripted, simulated, stated = examples
    assert plain.metadata == {}
    assert (scripted.question, scripted.answer) == ("Capital of France?", ["Rome", "Roma"])
    assert scripted.metadata == {
        "turns": [
            {"user": "Capital of France?", "answer": "Paris"},
            {"user": "And Italy?", "answer": ["Rome", "Roma"]},
        ]
    }
    assert (simulated.question, simulated.answer) == ("get a refund for order 7", "get a refund for order 7")
    assert simulated.metadata["simulated_user"] == {
        "persona": "a busy parent",
        "goal": "get a refund for order 7",
        "max_turns": 4,
    }
    assert simulated.metadata["success"] == {"rubric": "The assistant confirms a refund for order 7."}
    assert (stated.question, stated.answer) == ("Hi, I want my money back.", "7")
    assert stated.metadata["simulated_user"]["first_message"] == "Hi, I want my money back."
    # max_turns defaults to 10
    default = {**SIMULATED, "simulated_user": {"goal": "g"}}
    assert (
        parse_jsonl(write(tmp_path, default, name="d.jsonl"))[0].metadata["simulated_user"]["max_turns"] == 10
    )


BAD = [
    ({**SCRIPTED, "turns": []}, "field 'turns' has no user turn"),
    ({**SCRIPTED, "turns": "hello"}, "field 'turns' must be a list of objects"),
    ({**SCRIPTED, "turns": ["hello", "again"]}, "field 'turns' must be a list of objects"),
    (
        {**SCRIPTED, "turns": [{"user": "hi"}, {"answer": "4"}]},
        "turns[2] has no user message: its 'user' is missing",
    ),
    ({**SCRIPTED, "turns": [{"user": "  "}]}, "turns[1] has no user message: its 'user' is empty"),
    ({**SCRIPTED, "turns": [{"user": 3}]}, "turns[1] has no user message: its 'user' is not a string"),
    ({**SCRIPTED, "turns": [{"user": "hi", "answer": None}]}, "turns[1]: 'answer' is null or an empty list"),
    ({**SCRIPTED, "turns": [{"user": "hi", "scorer": "judge"}]}, "turns[1]: 'scorer' must be a pure scorer"),
    ({**SCRIPTED, "turns": [{"user": "hi", "gold": "x"}]}, "turns[1] has unknown field(s) 'gold'"),
    ({**SCRIPTED, "question": "q"}, "a conversation line has no top-level 'question'"),
    (
        {**SCRIPTED, "simulated_user": SIMULATED["simulated_user"]},
        "give either 'turns' or 'simulated_user', not both",
    ),
    ({**SIMULATED, "simulated_user": {"persona": "p", "max_turns": 3}}, "simulated_user has no goal"),
    ({**SIMULATED, "simulated_user": {"goal": " "}}, "simulated_user has no goal"),
    (
        {**SIMULATED, "simulated_user": {"goal": "g", "max_turns": 0}},
        "'max_turns' must be an integer from 1 to 50, got 0",
    ),
    (
        {**SIMULATED, "simulated_user": {"goal": "g", "max_turns": 51}},
        "'max_turns' must be an integer from 1 to 50, got 51",
    ),
    (
        {**SIMULATED, "simulated_user": {"goal": "g", "max_turns": "5"}},
        "'max_turns' must be an integer from 1 to 50",
    ),
    ({**SIMULATED, "simulated_user": "a grumpy user"}, "field 'simulated_user' must be an object"),
    ({**SIMULATED, "success": None}, "a simulated user needs 'success'"),
    ({**SIMULATED, "success": {"rubric": "r", "answer": "a"}}, "a simulated user needs 'success'"),
    ({**SIMULATED, "success": {"rubric": ""}}, "success 'rubric' must be a non-empty string"),
    ({**SIMULATED, "task_type": None}, "field 'task_type' is missing"),
    ({**SCRIPTED, "trajectory": [{"tool": "calculator"}]}, "a conversation line takes no trajectory fields"),
]


@pytest.mark.parametrize(("line", "message"), BAD, ids=[m for _, m in BAD])
def test_every_bad_conversation_line_is_refused_naming_the_file_and_line(tmp_path, line, message):
    path = write(tmp_path, GOOD, line)
    with pytest.raises(DatasetFormatError) as info:
        parse_jsonl(path)
    assert info.value.line == 2
    assert str(info.value).startswith("convs.jsonl, line 2: ")
    assert message in str(info.value)


@pytest.mark.django_db
@pytest.mark.parametrize(("line", "message"), BAD[:4] + BAD[10:14], ids=[m for _, m in BAD[:4] + BAD[10:14]])
def test_import_and_run_eval_exit_2_on_a_bad_conversation_line_and_write_nothing(tmp_path, line, message):
    path = write(tmp_path, GOOD, line)
    with pytest.raises(CommandError) as info:
        call_command("import_dataset", str(path), "--name", "convs")
    assert info.value.returncode == 2
    assert "convs.jsonl, line 2" in str(info.value) and message in str(info.value)
    with pytest.raises(CommandError) as info:
        call_command("run_eval", "--no-review", str(path))
    assert info.value.returncode == 2 and message in str(info.value)
    assert not Dataset.objects.filter(name="convs").exists() and Example.objects.count() == 0


@pytest.mark.django_db
def test_versions_and_export_carry_conversation_examples(tmp_path, capsys):
    path = write(tmp_path, GOOD, SCRIPTED, SIMULATED)
    call_command("import_dataset", str(path), "--name", "convs")
    dataset = Dataset.objects.get(name="convs")
    assert dataset.version == 1
    # the same file again: no new version
    call_command("import_dataset", str(path), "--name", "convs")
    dataset.refresh_from_db()
    assert dataset.version == 1
    # a changed turn is a change of the example
    changed = {**SCRIPTED, "turns": [*SCRIPTED["turns"][:1], {"user": "And Spain?", "answer": "Madrid"}]}
    call_command(
        "import_dataset", str(write(tmp_path, GOOD, changed, SIMULATED, name="v2.jsonl")), "--name", "convs"
    )
    dataset.refresh_from_db()
    assert dataset.version == 2
    v1 = Example.objects.get(dataset=dataset, external_id="conv", valid_from=1)
    assert v1.valid_to == 2 and v1.metadata["turns"][1]["user"] == "And Italy?"
    out = tmp_path / "out.jsonl"
    call_command("export_dataset", "convs@1", "--out", str(out))
    exported = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert exported[1]["turns"] == SCRIPTED["turns"]
    assert exported[2]["simulated_user"]["goal"] == "get a refund for order 7"
    # the export reads back as the same examples
    assert parse_jsonl(out) == parse_jsonl(path)

"""Text no database can store (NUL, lone UTF-16 surrogates) in a dataset, a
document, a final answer: replaced by U+FFFD, the same stored bytes on
PostgreSQL and SQLite (``make test`` runs this file on both), never a
traceback. A real ``run_eval`` against a stub OpenAI-compatible server."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from evaluation.models import Example, Prediction
from turns.models import Turn, TurnEvent

pytestmark = pytest.mark.django_db(transaction=True)

# written with JSON escapes, as a file would hold them
LINE = (
    '{"question_id": "q\\u00001", "question": "What is 2+2?\\u0000", "answer": ["4\\u0000", "four\\ud800"],'
    ' "task_type": "document_qa", "context": {"documents": [{"title": "doc\\u0000", '
    '"text": "two and two make four \\udc00 \\u0000"}]}, "note": "x\\u0000"}\n'
)


@pytest.fixture
def dirty_file(tmp_path):
    path = tmp_path / "dirty.jsonl"
    path.write_text(LINE, encoding="utf-8")
    return path


def test_a_dataset_with_nul_and_lone_surrogates_is_imported_clean(dirty_file) -> None:
    call_command("import_dataset", str(dirty_file), "--name", "dirty")
    example = Example.objects.get(dataset__name="dirty")
    assert example.external_id == "q\ufffd1"
    assert example.question == "What is 2+2?\ufffd"
    assert example.answer == ["4\ufffd", "four\ufffd"]
    assert example.context == {
        "documents": [{"title": "doc\ufffd", "text": "two and two make four \ufffd \ufffd"}]
    }
    assert example.metadata == {"note": "x\ufffd"}


def test_a_final_answer_with_nul_and_a_lone_surrogate_is_stored_clean(dirty_file, settings) -> None:
    def handler(body):
        assert "\\u0000" not in json.dumps(body)  # the request carried the document cleaned
        assert last_user_text(body) == "What is 2+2?\ufffd"
        return final_answer_reply("4\x00", "the document says four \ud800", "2+2\x00")

    with StubLLMServer(handler) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "k"
        settings.AGENTLAB_MODEL = "stub-model"
        call_command("run_eval", "--no-review", str(dirty_file), "--run-id", "dirty-run")
    prediction = Prediction.objects.get(run__run_id="dirty-run")
    assert (prediction.prediction, prediction.evidence, prediction.reasoning) == (
        "4\ufffd",
        "the document says four \ufffd",
        "2+2\ufffd",
    )
    # "4\ufffd" is an alias of the cleaned gold answer
    assert prediction.correct is True and prediction.gold_answer == ["4\ufffd", "four\ufffd"]
    assert prediction.turn_id is not None
    turn = Turn.objects.get(pk=prediction.turn_id)
    assert turn.answer == "4\ufffd"
    stored = list(_strings(list(TurnEvent.objects.filter(turn=turn).values_list("data", flat=True))))
    assert stored and not [s for s in stored if UNSTORABLE.search(s)]


UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)

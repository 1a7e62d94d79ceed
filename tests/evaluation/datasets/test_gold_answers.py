"""Gold answers that are lists of aliases (any one correct) and strings that
merely look like lists: import, storage as JSON, scoring, admin and API — a
real ``run_eval`` against a stub OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from evaluation.datasets.jsonl import parse_jsonl
from evaluation.datasets.spec import gold_display
from evaluation.models import Example, Prediction
from evaluation.scoring import answer_mismatch, score
from tests.api_support import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = [
    # TriviaQA-style aliases: either one is right
    {
        "question_id": "alias",
        "question": "Capital of France?",
        "answer": ["Paris", "Paris, France"],
        "task_type": "document_qa",
    },
    # Spider-style: a string that looks like a list is a string (the rows as JSON text)
    {
        "question_id": "rows",
        "question": "Singers per country?",
        "answer": '[["France", 4]]',
        "task_type": "sql",
    },
    {"question_id": "nums", "question": "Six times seven?", "answer": [42, "forty-two"], "task_type": "math"},
]
REPLIES = {
    "Capital of France?": "paris, france",
    "Singers per country?": [["France", 4]],
    "Six times seven?": "43",
}


def test_aliases_any_match_and_a_list_looking_string_stays_a_string() -> None:
    assert score(prediction="Paris, France.", gold=["Paris", "Paris, France"], scorer="exact").correct is True
    assert score(prediction="Lyon", gold=["Paris", "Paris, France"], scorer="exact").correct is False
    assert score(prediction="42.0", gold=["41", "42"], scorer="numeric").correct is True
    # no alias that can be scored: unscored, not wrong
    assert score(prediction="x", gold=["", "  "], scorer="exact").correct is None
    assert score(prediction="x", gold=[], scorer="exact").correct is None
    # the same text as a string is one gold answer, compared as such
    assert score(prediction="Paris", gold='["Paris", "Lyon"]', scorer="exact").correct is False


def test_a_json_array_is_imported_as_aliases_and_a_string_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    alias, rows, nums = parse_jsonl(path)
    assert alias.answer == ["Paris", "Paris, France"]
    assert rows.answer == '[["France", 4]]'
    assert nums.answer == ["42", "forty-two"]
    assert gold_display(alias.answer) == "any of: Paris · Paris, France"
    assert gold_display(rows.answer) == '[["France", 4]]'


def test_answer_mismatch_names_what_the_scorer_expected() -> None:
    assert answer_mismatch(answer_type="object", scorer="exact") == (
        "a JSON object where text was expected; scored as its JSON text"
    )
    assert answer_mismatch(answer_type="array", scorer="numeric") == (
        "a JSON array where a number was expected; scored as its JSON text"
    )
    assert answer_mismatch(answer_type="array", scorer="sql_result") == ""
    assert answer_mismatch(answer_type="string", scorer="choice") == ""
    assert answer_mismatch(answer_type=None, scorer="exact") == ""


def test_run_eval_stores_gold_as_json_scores_any_alias_and_shows_lists(tmp_path, settings, staff) -> None:
    path = tmp_path / "gold.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")

    def handler(body):
        question = last_user_text(body)
        return final_answer_reply(REPLIES[question], "stub evidence", "stub reasoning", usage=(10, 5))

    with StubLLMServer(handler) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "test-key"
        settings.AGENTLAB_MODEL = "stub-model"
        call_command("run_eval", "--no-review", str(path), "--run-id", "gold")

    by_id = {p.example.external_id: p for p in Prediction.objects.filter(run__run_id="gold")}
    assert (by_id["alias"].correct, by_id["rows"].correct, by_id["nums"].correct) == (True, True, False)
    assert by_id["alias"].gold_answer == ["Paris", "Paris, France"]
    assert by_id["rows"].gold_answer == '[["France", 4]]'
    # the model answered rows (a JSON array) where sql_result reads rows: no mismatch
    assert by_id["rows"].answer_mismatch == ""
    # stored as JSON, on both backends: the column holds a list and a string
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT answer FROM evaluation_example WHERE external_id IN ('alias', 'rows') "
            "ORDER BY external_id"
        )
        stored = [json.loads(v) if isinstance(v, str) else v for (v,) in cursor.fetchall()]
    assert stored == [["Paris", "Paris, France"], '[["France", 4]]']
    assert Example.objects.get(external_id="alias").answer == ["Paris", "Paris, France"]

    api = ApiClient(staff)
    body = api.get("/api/runs/gold/predictions").json()
    items = body["items"] if isinstance(body, dict) else body
    golds = {p["example_id"]: p["gold_answer"] for p in items}
    assert golds == {
        "alias": ["Paris", "Paris, France"],
        "rows": '[["France", 4]]',
        "nums": ["42", "forty-two"],
    }

    page = api.client.get(f"/admin/evaluation/prediction/{by_id['alias'].pk}/change/")
    assert page.status_code == 200
    assert "any of: Paris · Paris, France" in page.content.decode()

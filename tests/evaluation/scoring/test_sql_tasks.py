"""SQL examples end to end: ``context.database_file`` is resolved into
``database_path``, the turn is offered ``sql_query``, the model copies the
rows it returned into its final answer, and ``sql_result`` scores them
against the gold rows — with the shared Spider subset and its databases."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import pytest

from agentlab.agent.providers.scripted import ScriptedProvider, final, tool_call
from agentlab.agent.types import Completion
from common.db import DatabaseThreads
from evaluation.datasets.jsonl import parse_jsonl
from evaluation.datasets.services import dataset_import
from evaluation.models import Prediction
from evaluation.run.inprocess import drive_examples
from evaluation.run.lifecycle import run_finish, run_start
from evaluation.run.plan import run_plan
from tests.shared_data import dataset_path
from turns.models import TurnEvent

pytestmark = pytest.mark.django_db(transaction=True)

SPIDER = dataset_path("spider-dev-sql-61.jsonl")
GSM8K = dataset_path("gsm8k-test-200.jsonl")
CONCERT_SINGER = dataset_path("spider-databases/concert_singer.sqlite")
OLD_TOOLS = ["calculator", "search_documents", "ask_user", "final_answer"]
SINGERS_BY_AGE = (
    '[["Joe Sharp", "Netherlands", 52], ["John Nizinik", "France", 43], ["Rose White", "France", 41], '
    '["Timbaland", "United States", 32], ["Justin Brown", "France", 29], ["Tribal King", "France", 25]]'
)


def test_sql_examples_are_answered_with_sql_query_and_score_correct():
    sql_examples = parse_jsonl(SPIDER)[:3]
    math_example = parse_jsonl(GSM8K)[0]
    dataset = dataset_import(name="spider-and-gsm8k", examples=[*sql_examples, math_example])
    gold_sql = {e.question: e.metadata["gold_sql"] for e in sql_examples}
    before = hashlib.sha256(CONCERT_SINGER.read_bytes()).hexdigest()

    def agent(messages: list[dict[str, Any]]) -> Completion:
        """Runs the gold query, then answers with the rows the tool returned."""
        question, last = messages[1]["content"], messages[-1]
        if last["role"] == "tool":
            return final(json.loads(last["content"])["rows"], evidence="sql_query result")
        if question in gold_sql:
            return tool_call("sql_query", {"query": gold_sql[question]})
        return final(math_example.answer)

    provider = ScriptedProvider([agent] * 7)  # 3 × (query, answer) + 1 answer
    run, _ = run_start(run_id="spider-sql", dataset=dataset, config={})
    planned, _ = run_plan(run=run, limit=None, max_steps=4, model="scripted")

    async def go() -> None:
        with DatabaseThreads(max_workers=4) as db:
            await drive_examples(planned, provider=provider, db=db, concurrency=4, review=False)

    asyncio.run(go())
    run = run_finish(run=run)

    by_id = {
        p.example.external_id: p for p in Prediction.objects.filter(run=run).select_related("example", "turn")
    }
    assert {k: (p.prediction, p.scorer, p.correct, p.steps) for k, p in by_id.items()} == {
        "spider-dev-0": ("[[6]]", "sql_result", True, 2),
        "spider-dev-1": ("[[6]]", "sql_result", True, 2),
        "spider-dev-2": (SINGERS_BY_AGE, "sql_result", True, 2),
        math_example.external_id: (math_example.answer, "numeric", True, 1),
    }
    assert (run.metrics["accuracy"], run.metrics["per_task_type"]["sql"]["accuracy"]) == (1.0, 1.0)
    # the turn's context carries the resolved path; gold_sql stayed example metadata
    first = by_id["spider-dev-0"]
    assert first.turn.context["database_path"] == str(CONCERT_SINGER.resolve())
    assert "gold_sql" not in first.turn.context
    [result] = TurnEvent.objects.filter(turn=first.turn, type="tool.result", data__step=1)
    assert result.data["result"]["output"] == '{"columns": ["count(*)"], "rows": [[6]], "row_count": 1}'
    # sql turns were offered sql_query; the math turn exactly the old tools
    offered = {
        messages[1]["content"]: [t["function"]["name"] for t in tools or []]
        for messages, tools in zip(provider.calls, provider.tools_seen, strict=True)
    }
    assert offered == {
        **{e.question: [*OLD_TOOLS, "sql_query"] for e in sql_examples},
        math_example.question: OLD_TOOLS,
    }
    assert hashlib.sha256(CONCERT_SINGER.read_bytes()).hexdigest() == before

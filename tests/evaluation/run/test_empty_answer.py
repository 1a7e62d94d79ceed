"""In evaluation an empty final answer is a wrong example with stop reason
``empty_answer`` (counted in the metrics), never a success with no answer."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply
from evaluation.models import Prediction, Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_empty_final_answer_is_a_wrong_example_counted_as_empty_answer(endpoint, capsys):
    def reply(body):
        question = body["messages"][1]["content"]
        return final_answer_reply("" if "Bella" in question else "   ", "nothing", "nothing")

    with StubLLMServer(reply) as server:
        endpoint(server)
        call_command(
            "run_eval", "demo", "--run-id", "empties", "--limit", "3", "--no-review", "--concurrency", "1"
        )
    run = Run.objects.get(run_id="empties")
    rows = list(
        Prediction.objects.filter(run=run).values_list("stop_reason", "correct", "prediction", "error")
    )
    assert rows == [("empty_answer", False, "", "the model gave an empty answer")] * 3
    assert run.metrics["stop_reasons"] == {"empty_answer": 3}
    assert run.metrics["correct"] == 0 and run.metrics["total"] == 3
    assert "empty_answer" in capsys.readouterr().out

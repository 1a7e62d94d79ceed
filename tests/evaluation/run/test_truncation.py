"""``run_eval`` and truncation: a final answer cut by ``--max-output-tokens``
is stop reason ``length`` on its prediction and in the run's metrics, and a
resume with ``--retry-errors`` and more tokens answers it."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, text_reply
from evaluation.models import Prediction, Run
from turns.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cut_answer_is_counted_as_length_and_a_retry_with_more_tokens_answers_it(
    tmp_path, settings, capsys
):
    path = tmp_path / "one.jsonl"
    path.write_text(
        json.dumps({"question_id": "q", "question": "What is 6*7?", "answer": "42", "task_type": "math"})
        + "\n",
        encoding="utf-8",
    )
    limits: list[int | None] = []

    def handler(body):
        limits.append(body.get("max_tokens"))
        if (body.get("max_tokens") or 0) < 50:
            return text_reply("Let me think about six times", finish_reason="length")
        return final_answer_reply("42")

    with StubLLMServer(handler) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "k"
        settings.AGENTLAB_MODEL = "stub-model"
        call_command("run_eval", "--no-review", str(path), "--run-id", "cut", "--max-output-tokens", "10")
        prediction = Prediction.objects.get(run__run_id="cut")
        assert (prediction.stop_reason, prediction.correct, prediction.prediction) == ("length", False, "")
        assert prediction.error == (
            "the final answer was cut off by the output-token limit (10 tokens) before it was complete"
        )
        run = Run.objects.get(run_id="cut")
        assert run.metrics["stop_reasons"] == {"length": 1}
        assert run.config["max_output_tokens"] == 10
        assert "length" in capsys.readouterr().out

        call_command(
            "run_eval",
            "--no-review",
            str(path),
            "--run-id",
            "cut",
            "--retry-errors",
            "--max-output-tokens",
            "100",
        )
    prediction.refresh_from_db()
    assert (prediction.stop_reason, prediction.correct, prediction.prediction) == ("final", True, "42")
    assert limits == [10, 100]
    assert prediction.turn_id is not None
    turn = Turn.objects.get(pk=prediction.turn_id)
    assert (turn.max_output_tokens, turn.attempts) == (100, 2)
    assert Run.objects.get(run_id="cut").metrics["stop_reasons"] == {"final": 1}

"""Cost in run metrics: unknown for a self-hosted endpoint (shown "—", never
$0), a per-run price (``--price-in/--price-out``), per model — a real
``run_eval`` against a stub OpenAI-compatible server on loopback."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply
from evaluation.models import Prediction, Run
from evaluation.run.request import eval_request

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = [
    {"question_id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i), "task_type": "math"}
    for i in range(1, 4)
]


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "sums.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    return str(path)


def _run(settings, dataset: str, run_id: str, *options: str, capsys) -> tuple[Run, str]:
    with StubLLMServer(lambda body: final_answer_reply("2", usage=(1000, 200))) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "k"
        settings.AGENTLAB_MODEL = "gpt-4o-mini"  # named like a priced model, but self-hosted
        call_command("run_eval", "--no-review", dataset, "--run-id", run_id, *options)
    return Run.objects.get(run_id=run_id), capsys.readouterr().out


def test_a_self_hosted_endpoint_has_unknown_cost_shown_as_a_dash(settings, dataset, capsys) -> None:
    run, out = _run(settings, dataset, "self-hosted", capsys=capsys)
    assert run.metrics["cost"] is None
    assert run.config["price"] is None
    model = run.metrics["usage"]["by_model"]["stub-model"]
    assert (model["calls"], model["input_tokens"], model["output_tokens"]) == (3, 3000, 600)
    assert (model["cost"], model["unpriced_calls"]) == (None, 3)
    assert set(Prediction.objects.filter(run=run).values_list("cost", flat=True)) == {None}
    cost_line = next(line for line in out.splitlines() if line.strip("│ ").startswith("cost"))
    assert "—" in cost_line and "$" not in cost_line
    model_line = next(line for line in out.splitlines() if "stub-model" in line)
    assert "—" in model_line and "$" not in model_line


def test_a_price_override_costs_every_call_per_model(settings, dataset, capsys) -> None:
    run, out = _run(settings, dataset, "priced", "--price-in", "0.5", "--price-out", "1.5", capsys=capsys)
    # per call: 1000 in × $0.5/M + 200 out × $1.5/M = $0.0008
    assert run.config["price"] == {"input_per_mtok": 0.5, "output_per_mtok": 1.5}
    assert run.metrics["cost"] == pytest.approx(3 * 0.0008)
    model = run.metrics["usage"]["by_model"]["stub-model"]
    assert model["cost"] == pytest.approx(0.0024) and model["unpriced_calls"] == 0
    assert [p.cost for p in Prediction.objects.filter(run=run)] == [pytest.approx(0.0008)] * 3
    assert "$0.0024" in next(line for line in out.splitlines() if "stub-model" in line)


def test_price_options_go_together_and_are_not_negative(settings, dataset) -> None:
    with pytest.raises(CommandError, match="--price-in and --price-out go together") as info:
        call_command("run_eval", "--no-review", dataset, "--price-in", "1")
    assert info.value.returncode == 2
    with pytest.raises(ValueError, match="must be numbers ≥ 0"):
        eval_request(dataset=dataset, price_in=-1.0, price_out=1.0)
    assert Run.objects.count() == 0

"""Comparing runs with epochs: majority votes for the counts; over
per-example means, Agresti and Min's interval and the paired bootstrap's
p-value."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from agentlab.testing.stub_llm import StubLLMServer
from evaluation.compare.bootstrap import paired_bootstrap
from evaluation.compare.over_epochs import BOOTSTRAP_METHOD, majority_rows
from evaluation.compare.services import run_compare_ids
from evaluation.compare.shapes import ComparedRow, EpochComparedRow
from evaluation.compare.statistics import adjusted_difference_interval
from tests.evaluation.run.test_run_eval import GSM8K, oracle, rows
from tests.evaluation.run.test_run_eval_epochs import PATTERN, by_epoch


def row(key: int, epoch: int, correct: bool | None, task_type: str = "math") -> EpochComparedRow:
    compared = ComparedRow(
        example_key=key,
        example_id=f"ex{key}",
        task_type=task_type,
        prediction_id=key * 10 + epoch,
        turn_id=None,
        correct=correct,
        prediction="p",
        gold="g",
        error="",
        stop_reason="final",
    )
    return EpochComparedRow(row=compared, epoch=epoch, score=None if correct is None else float(correct))


def test_majority_rows_keep_one_row_per_example_with_the_majority_vote():
    reduced = majority_rows(
        [
            row(1, 2, True),
            row(1, 1, True),
            row(1, 3, False),
            row(2, 1, True),
            row(2, 2, False),  # a tie is not a majority
            row(3, 1, None),
            row(3, 2, None),
        ]
    )
    assert [(r.example_key, r.prediction_id, r.correct) for r in reduced] == [
        (1, 11, True),
        (2, 21, False),
        (3, 31, None),
    ]


@pytest.mark.django_db(transaction=True)
def test_compare_runs_with_epochs_uses_the_paired_bootstrap(settings, capsys):
    gsm = rows(GSM8K, 5)
    for run_id, handler in (("base", by_epoch(gsm)), ("cand", oracle(gsm, right=set(range(5))))):
        with StubLLMServer(handler) as server:
            settings.AGENTLAB_LLM_BASE_URL = server.base_url
            settings.AGENTLAB_LLM_API_KEY = "k"
            settings.AGENTLAB_MODEL = "stub-model"
            call_command(
                "run_eval",
                "--no-review",
                str(GSM8K),
                "--run-id",
                run_id,
                "--limit",
                "5",
                "--epochs",
                "3",
                "--concurrency",
                "1",
            )
    comparison = run_compare_ids(base_run_id="base", candidate_run_id="cand")

    assert comparison["method"] == BOOTSTRAP_METHOD
    means = [sum(p) / 3 for p in PATTERN]
    expected = paired_bootstrap(dict(enumerate(means)), dict.fromkeys(range(5), 1.0))
    overall = comparison["overall"]
    assert overall["base_accuracy"] == pytest.approx(sum(means) / 5)
    assert overall["candidate_accuracy"] == 1.0
    assert overall["difference"] == pytest.approx(expected.difference)
    interval = adjusted_difference_interval([1.0 - m for m in means])
    assert interval is not None
    assert (overall["ci_low"], overall["ci_high"]) == (pytest.approx(interval[0]), pytest.approx(interval[1]))
    assert overall["p_value"] == pytest.approx(expected.p_value)
    assert comparison["per_task_type"]["math"]["p_holm"] == pytest.approx(expected.p_value)
    # counts are majority votes: examples 1 and 2 are wrong by majority in the base run
    assert (overall["examples"], overall["fixed"], overall["broken"]) == (5, 2, 0)
    assert sorted(pair["example_id"] for pair in comparison["fixed"]) == sorted(
        gsm[i]["question_id"] for i in (1, 2)
    )

    call_command("compare_runs", "base", "cand")
    out = capsys.readouterr().out
    # rich wraps headers to the terminal's width: look for the words, not the layout
    assert "bootstrap" in out and "McNemar" not in out and "Newcombe" not in out
    # five examples: the bootstrap p-value carries a warning
    assert (
        "warning: only 5 examples compared: at this size the bootstrap p-value is not meaningful"
        in " ".join(out.split())
    )

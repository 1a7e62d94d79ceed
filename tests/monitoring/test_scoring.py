"""Scoring a turn: the built-ins, a plugin's checks, the judge without a gold
answer on the stub endpoint (its usage under role ``judge``, the turn's own
usage untouched), and the task delivered twice."""

from __future__ import annotations

import json

import pytest

from agentlab.testing.stub_llm import StubLLMServer, StubReply, text_reply
from monitoring.models import OnlineScore
from monitoring.scoring import online_score_turn
from monitoring.tasks import online_score
from tests.monitoring.support import add_event, evaluator, finished_turn

pytestmark = pytest.mark.django_db


def grade(value: str, explanation: str = "ok") -> StubReply:
    return text_reply(json.dumps({"grade": value, "explanation": explanation}), usage=(120, 15))


def test_the_built_ins_score_outcome_steps_and_latency(owner):
    ev = evaluator(max_steps=3, max_latency_ms=2000)
    fast = finished_turn(owner, steps=2, timings={"total_ms": 800})
    slow_asked = finished_turn(owner, outcome="asked", steps=5, timings={"total_ms": 2500})

    fast_score = online_score_turn(turn_id=fast.pk, evaluator_id=ev.pk).score
    assert (fast_score.value, fast_score.passed, fast_score.label) == (1.0, True, "answered")
    assert fast_score.details == {
        "answered": {"value": 1.0, "passed": True, "explanation": "answered"},
        "steps": {"value": 1.0, "passed": True, "explanation": "2 step(s), bound 3"},
        "latency": {"value": 1.0, "passed": True, "explanation": "800 ms, bound 2000 ms"},
    }
    slow = online_score_turn(turn_id=slow_asked.pk, evaluator_id=ev.pk).score
    assert (slow.value, slow.passed, slow.label) == (0.0, False, "asked")
    assert slow.usage == {} and slow.turn_finished_at == slow_asked.finished_at


def test_a_plugins_checks_score_the_fraction_passed(owner):
    ev = evaluator(score_answered=False, checks_plugin="safety")
    turn = finished_turn(owner)
    for name, passed, plugin in [
        ("no_pii", True, "safety"),
        ("polite", False, "safety"),
        ("x", False, "other"),
    ]:
        add_event(
            turn,
            "check",
            {
                "attempt": 1,
                "scope": "turn",
                "step": None,
                "name": name,
                "passed": passed,
                "detail": None,
                "plugin": plugin,
            },
        )
    bare = finished_turn(owner)

    score = online_score_turn(turn_id=turn.pk, evaluator_id=ev.pk).score
    assert (score.value, score.passed) == (0.5, False)
    assert score.details["checks"]["explanation"] == "1/2 checks passed; failed: polite"
    unscored = online_score_turn(turn_id=bare.pk, evaluator_id=ev.pk).score
    assert (unscored.value, unscored.passed) == (None, None)
    assert unscored.details["checks"]["explanation"] == "no check events of plugin 'safety'"


def test_the_judge_grades_without_a_gold_answer_and_its_usage_is_the_judges(owner, settings):
    ev = evaluator(judge=True, judge_rubric="Is the arithmetic right?")
    turn = finished_turn(owner, usage={"input_tokens": 50, "output_tokens": 5, "calls": 1})
    with StubLLMServer.script([grade("partial", "vague")]) as stub:
        settings.AGENTLAB_LLM_BASE_URL = stub.base_url
        settings.AGENTLAB_MODEL = "stub-judge"
        score = online_score_turn(turn_id=turn.pk, evaluator_id=ev.pk).score
        request = stub.requests[0]
    assert (score.value, score.passed) == (0.75, False)  # answered 1.0, judge partial 0.5
    assert score.details["judge"] == {"value": 0.5, "passed": False, "explanation": "partial: vague"}
    prompt = request["messages"][1]["content"]
    assert prompt.startswith("Question:\n")  # a turn with no history: nothing before the question
    assert "Answer to grade:\n42" in prompt and "Is the arithmetic right?" in prompt and "Gold" not in prompt
    assert score.usage["by_role"]["judge"]["input_tokens"] == 120
    assert score.usage["by_role"]["judge"]["output_tokens"] == 15
    assert "agent" not in score.usage["by_role"]
    turn.refresh_from_db()
    assert turn.usage == {"input_tokens": 50, "output_tokens": 5, "calls": 1}


def test_the_judge_of_a_follow_up_reads_the_history_the_turn_was_given(owner, settings):
    ev = evaluator(score_answered=False, judge=True)
    turn = finished_turn(owner, question="Double it.", answer="84")
    history = [{"role": "user", "content": "What is 6*7?"}, {"role": "assistant", "content": "42"}]
    add_event(
        turn,
        "history",
        {
            "attempt": 1, "mode": "answers", "turns": [turn.pk - 1], "tokens": 12, "budget": 3000,
            "window": 8192, "reply_tokens": 512, "counted": "estimate", "dropped": [], "messages": history,
        },
    )  # fmt: skip
    with StubLLMServer.script([grade("correct")]) as stub:
        settings.AGENTLAB_LLM_BASE_URL = stub.base_url
        settings.AGENTLAB_MODEL = "stub-judge"
        score = online_score_turn(turn_id=turn.pk, evaluator_id=ev.pk).score
        prompt = stub.requests[0]["messages"][1]["content"]
    assert score.passed is True
    assert prompt.startswith(
        "Earlier in the conversation:\nUser: What is 6*7?\nAssistant: 42\n\nQuestion:\nDouble it.\n"
    )


def test_a_failing_judge_leaves_the_judge_unscored(owner, settings):
    ev = evaluator(score_answered=False, judge=True)
    turn = finished_turn(owner)
    with StubLLMServer.script([text_reply("I think it is fine")]) as stub:
        settings.AGENTLAB_LLM_BASE_URL = stub.base_url
        settings.AGENTLAB_MODEL = "stub-judge"
        score = online_score_turn(turn_id=turn.pk, evaluator_id=ev.pk).score
    assert (score.value, score.passed) == (None, None)
    assert "no readable grade" in score.details["judge"]["explanation"]


def test_the_task_delivered_twice_scores_once(owner, settings):
    ev = evaluator(judge=True)
    turn = finished_turn(owner)
    with StubLLMServer.script([grade("correct"), grade("incorrect")]) as stub:
        settings.AGENTLAB_LLM_BASE_URL = stub.base_url
        settings.AGENTLAB_MODEL = "stub-judge"
        first = online_score.apply(args=(turn.pk, ev.pk), task_id="online-1")
        second = online_score.apply(args=(turn.pk, ev.pk), task_id="online-2")
        calls = stub.request_count
    assert (first.result, second.result) == ("scored", "exists")
    assert calls == 1  # the second delivery pays no judge call
    (score,) = OnlineScore.objects.filter(turn=turn, evaluator=ev)
    assert (score.value, score.passed) == (1.0, True)


def test_a_delivery_racing_another_writes_nothing(owner, monkeypatch):
    from monitoring import scoring

    ev = evaluator()
    turn = finished_turn(owner)
    real = scoring.turn_results

    def raced(evaluator, turn):
        # the other delivery commits its score while this one is scoring
        OnlineScore.objects.create(
            turn=turn, evaluator=evaluator, value=0.25, passed=False, turn_finished_at=turn.finished_at
        )
        return real(evaluator, turn)

    monkeypatch.setattr(scoring, "turn_results", raced)
    outcome = online_score_turn(turn_id=turn.pk, evaluator_id=ev.pk)
    assert outcome.status == "exists" and outcome.score.value == 0.25
    assert OnlineScore.objects.filter(turn=turn).count() == 1

"""Which turns an online evaluator scores: a deterministic sample at its
rate, and its filters (owner's group, a tool used, an outcome)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from monitoring.sampling import finished_chat_turns, sample_point, sampled, turns_matching
from monitoring.scoring import online_score_turn
from tests.monitoring.support import evaluator, finished_turn, tool_call


def test_the_sample_point_is_fixed_by_evaluator_and_turn():
    assert sample_point(evaluator_id=3, turn_id=17) == sample_point(evaluator_id=3, turn_id=17)
    assert sample_point(evaluator_id=3, turn_id=17) != sample_point(evaluator_id=4, turn_id=17)
    assert 0 <= sample_point(evaluator_id=1, turn_id=1) < 1


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_the_sample_holds_the_rate_of_turns(rate):
    n = 20_000
    chosen = sum(sampled(evaluator_id=7, turn_id=t, rate=rate) for t in range(1, n + 1))
    # binomial sd at n=20000 is at most 0.0036: 4 sd
    assert abs(chosen / n - rate) < 0.015


def test_rate_zero_takes_none_and_rate_one_takes_all():
    assert not any(sampled(evaluator_id=1, turn_id=t, rate=0.0) for t in range(1, 500))
    assert all(sampled(evaluator_id=1, turn_id=t, rate=1.0) for t in range(1, 500))


def test_two_evaluators_sample_independently():
    a = {t for t in range(1, 4001) if sampled(evaluator_id=1, turn_id=t, rate=0.5)}
    b = {t for t in range(1, 4001) if sampled(evaluator_id=2, turn_id=t, rate=0.5)}
    # independent halves overlap on about a quarter
    assert 0.22 < len(a & b) / 4000 < 0.28


@pytest.mark.django_db
def test_the_filters_narrow_the_turns(owner, teammate):
    group = Group.objects.create(name="support")
    owner.groups.add(group)
    mine_calc = finished_turn(owner)
    tool_call(mine_calc, "calculator")
    mine_sql = finished_turn(owner)
    tool_call(mine_sql, "sql")
    mine_failed = finished_turn(owner, outcome="failed")
    tool_call(mine_failed, "calculator")
    theirs = finished_turn(teammate)
    tool_call(theirs, "calculator")

    def ids(**filters):
        ev = evaluator(f"e{len(filters)}-{sorted(filters)}", **filters)
        return set(turns_matching(ev, finished_chat_turns()).values_list("pk", flat=True))

    assert ids() == {mine_calc.pk, mine_sql.pk, mine_failed.pk, theirs.pk}
    assert ids(owner_group=group) == {mine_calc.pk, mine_sql.pk, mine_failed.pk}
    assert ids(tool="calculator") == {mine_calc.pk, mine_failed.pk, theirs.pk}
    assert ids(outcome="failed") == {mine_failed.pk}
    assert ids(owner_group=group, tool="calculator", outcome="answered") == {mine_calc.pk}


@pytest.mark.django_db
def test_scoring_follows_sample_and_filters(owner):
    half = evaluator("half", sampling_rate=0.5)
    only_failed = evaluator("only failed", outcome="failed")
    turns = [finished_turn(owner) for _ in range(40)]
    statuses = [online_score_turn(turn_id=t.pk, evaluator_id=half.pk).status for t in turns]
    expected = [
        "scored" if sampled(evaluator_id=half.pk, turn_id=t.pk, rate=0.5) else "not sampled" for t in turns
    ]
    assert statuses == expected and 5 < statuses.count("scored") < 35
    assert {online_score_turn(turn_id=t.pk, evaluator_id=only_failed.pk).status for t in turns} == {
        "filtered"
    }


@pytest.mark.django_db
def test_evaluation_side_by_side_and_unfinished_turns_are_not_scored(owner):
    ev = evaluator()
    eval_turn = finished_turn(owner, kind="evaluation")
    side_by_side = finished_turn(owner, agent_options={"variant": "b", "temperature": 0.9})
    assert online_score_turn(turn_id=side_by_side.pk, evaluator_id=ev.pk).status == "not finished"
    running = finished_turn(owner)
    running.status = "running"
    running.save()
    assert online_score_turn(turn_id=eval_turn.pk, evaluator_id=ev.pk).status == "not finished"
    assert online_score_turn(turn_id=running.pk, evaluator_id=ev.pk).status == "not finished"
    ev.enabled = False
    ev.save()
    assert online_score_turn(turn_id=finished_turn(owner).pk, evaluator_id=ev.pk).status == "no evaluator"

"""``manage.py backfill_online_scores``: the turns of a past period scored
as the live task would, once; bad input is exit 2 with a message."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from monitoring.models import OnlineScore
from monitoring.sampling import sampled
from tests.monitoring.support import evaluator, finished_turn

pytestmark = pytest.mark.django_db

DAY = datetime(2026, 11, 20, tzinfo=UTC)


def test_backfill_scores_the_period_once(owner, capsys):
    ev = evaluator("past", sampling_rate=1.0, max_steps=3)
    inside = [finished_turn(owner, finished_at=DAY + timedelta(hours=h), steps=h) for h in range(1, 6)]
    finished_turn(owner, finished_at=DAY - timedelta(hours=1))  # before --since
    finished_turn(owner, finished_at=DAY + timedelta(days=1))  # at --until: not included
    finished_turn(owner, finished_at=DAY + timedelta(hours=2), kind="evaluation")  # not a chat turn

    call_command("backfill_online_scores", "past", "--since", "2026-11-20", "--until", "2026-11-21")
    assert capsys.readouterr().out.strip() == "online evaluator 'past': 5 scored"
    scores = {s.turn_id: s.passed for s in OnlineScore.objects.filter(evaluator=ev)}
    assert scores == {t.pk: t.steps <= 3 for t in inside}

    call_command("backfill_online_scores", str(ev.pk), "--since", "2026-11-20T00:00", "--until", "2026-11-21")
    assert capsys.readouterr().out.strip() == "online evaluator 'past': 5 exists"
    assert OnlineScore.objects.filter(evaluator=ev).count() == 5


def test_backfill_keeps_the_sample_unless_told(owner, capsys):
    ev = evaluator("sampled", sampling_rate=0.3)
    turns = [finished_turn(owner, finished_at=DAY + timedelta(minutes=m)) for m in range(30)]
    call_command("backfill_online_scores", "sampled", "--since", "2026-11-20", "--until", "2026-11-21")
    expected = {t.pk for t in turns if sampled(evaluator_id=ev.pk, turn_id=t.pk, rate=0.3)}
    assert set(OnlineScore.objects.values_list("turn_id", flat=True)) == expected
    call_command(
        "backfill_online_scores",
        "sampled",
        "--since",
        "2026-11-20",
        "--until",
        "2026-11-21",
        "--ignore-sampling",
    )
    assert OnlineScore.objects.count() == 30


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--since", "2026-11-20"], "no online evaluator named 'nope'"),
        (["e", "--since", "yesterday"], "--since must be an ISO date or date-time"),
        (["e", "--since", "2026-11-21", "--until", "2026-11-20"], "must be before --until"),
        (["e", "--since", "2026-13-45"], "--since must be an ISO date or date-time"),
    ],
)
def test_bad_input_is_exit_2(args, message):
    evaluator("e")
    with pytest.raises(CommandError, match=message) as caught:
        call_command("backfill_online_scores", *args)
    assert caught.value.returncode == 2

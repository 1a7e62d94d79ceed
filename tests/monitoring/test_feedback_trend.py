"""End users' feedback in the monitoring trend (docs/monitoring.md#feedback):
per window the share of thumbs up among the current ratings of the chat turns
in an evaluator's filters, with its Wilson interval, beside the pass rate; and
a significant drop of that share flags the evaluator and mails ADMINS like a
drop of its pass rate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail

from evaluation.metrics.intervals import wilson_interval
from monitoring.alerts import evaluator_check
from monitoring.windows import trend_data
from tests.monitoring.support import evaluator, finished_turn
from turns.models import TurnFeedback

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 4, 10, 20, tzinfo=UTC)
LAST = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
BEFORE = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def rated(owner, when: datetime, up: int, down: int) -> None:
    """``up + down`` answered chat turns ended at ``when``, each rated once by
    its owner; a first rating replaced (history) must not count twice."""
    for i in range(up + down):
        turn = finished_turn(owner, finished_at=when + timedelta(seconds=i))
        TurnFeedback.objects.create(turn=turn, user=owner, rating="down" if i < up else "up", current=False)
        TurnFeedback.objects.create(turn=turn, user=owner, rating="up" if i < up else "down")


def test_the_trend_has_the_thumbs_up_share_with_its_interval_per_window(owner, teammate):
    ev = evaluator("answers", window="daily")
    rated(owner, BEFORE, up=9, down=1)
    rated(owner, LAST, up=3, down=7)
    finished_turn(owner, finished_at=LAST)  # an unrated turn: not in the share
    rows = {row["label"]: row for row in trend_data(ev, now=NOW, count=3)["rows"]}
    assert rows["2026-12-02"]["rated"] == 10 and rows["2026-12-02"]["up_rate"] == 0.9
    assert (rows["2026-12-03"]["rated"], rows["2026-12-03"]["up_rate"]) == (10, 0.3)
    interval = wilson_interval(3, 10)
    assert interval is not None
    assert [rows["2026-12-03"]["up_low"], rows["2026-12-03"]["up_high"]] == pytest.approx(list(interval))
    assert (rows["2026-12-04"]["rated"], rows["2026-12-04"]["up_rate"], rows["2026-12-04"]["up_low"]) == (
        0,
        None,
        None,
    )


def test_the_evaluators_filters_apply_to_the_feedback(owner, teammate):
    from django.contrib.auth.models import Group

    group = Group.objects.create(name="beta")
    owner.groups.add(group)
    ev = evaluator("beta answers", window="daily", owner_group=group)
    rated(owner, LAST, up=2, down=0)
    rated(teammate, LAST, up=0, down=5)  # outside the evaluator's owner group
    row = {r["label"]: r for r in trend_data(ev, now=NOW, count=2)["rows"]}["2026-12-03"]
    assert (row["rated"], row["up_rate"]) == (2, 1.0)


def test_a_significant_drop_of_thumbs_up_flags_and_mails(owner, settings):
    settings.ADMINS = [("Ops", "ops@example.com")]
    ev = evaluator("answers", window="daily", min_count=30)
    rated(owner, BEFORE, up=45, down=5)  # 90 %
    rated(owner, LAST, up=30, down=20)  # 60 %
    outcome = evaluator_check(evaluator_id=ev.pk, now=NOW)
    assert outcome.status == "drop" and outcome.mailed
    assert outcome.comparison is not None and outcome.comparison.verdict == "too few"  # no online scores
    assert outcome.feedback is not None
    assert (outcome.feedback.k1, outcome.feedback.n1, outcome.feedback.k0, outcome.feedback.n0) == (
        30,
        50,
        45,
        50,
    )
    ev.refresh_from_db()
    assert ev.flagged
    assert "drop; thumbs-up share 30/50 (60.0%) vs 45/50 (90.0%) in the window before" in ev.flag_reason
    (message,) = mail.outbox
    assert message.subject.endswith(
        "Online evaluator answers dropped: thumbs-up share 30/50 (60.0%) vs 45/50 (90.0%) "
        "in the window before; difference -30.0%, interval [-44.9%, -13.2%]"
    )
    assert "its thumbs-up share (end users' feedback) is significantly worse" in message.body


def test_steady_feedback_stays_quiet(owner, settings):
    settings.ADMINS = [("Ops", "ops@example.com")]
    ev = evaluator("answers", window="daily", min_count=30)
    rated(owner, BEFORE, up=40, down=10)
    rated(owner, LAST, up=37, down=13)
    outcome = evaluator_check(evaluator_id=ev.pk, now=NOW)
    assert (
        outcome.status == "too few" and outcome.feedback is not None and outcome.feedback.verdict == "steady"
    )
    assert mail.outbox == []

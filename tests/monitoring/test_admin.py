"""The admin: the turn page shows its online scores; the trend page's
figures and its refusals; the evaluator form's checks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.models import OnlineEvaluator, OnlineScore
from monitoring.scoring import online_score_turn
from monitoring.windows import window_floor
from tests.monitoring.support import evaluator, finished_turn, score_at

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root-123")
    client.force_login(user)
    return client


def test_the_turn_page_shows_its_online_scores(admin_client_, owner):
    ev = evaluator("latency watch", max_latency_ms=1000)
    turn = finished_turn(owner, timings={"total_ms": 1500})
    online_score_turn(turn_id=turn.pk, evaluator_id=ev.pk)
    other = finished_turn(owner)

    page = admin_client_.get(f"/admin/turns/turn/{turn.pk}/change/").content.decode()
    assert "Online scores" in page and "latency watch" in page
    assert "latency: 1500 ms, bound 1000 ms" in page and "<td>0.50</td><td>no</td>" in page
    assert (
        "not scored by any online evaluator"
        in admin_client_.get(f"/admin/turns/turn/{other.pk}/change/").content.decode()
    )


def test_the_trend_page_counts_the_windows(admin_client_, owner):
    ev = evaluator("trend", window="hourly")
    hour = window_floor(timezone.now(), "hourly")
    for i in range(4):
        score_at(ev, owner, hour - timedelta(hours=1) + timedelta(minutes=i), passed=i < 3)
    response = admin_client_.get(f"/admin/monitoring/onlineevaluator/{ev.pk}/trend/?windows=3")
    assert response.status_code == 200
    rows = response.context["trend"]["rows"]
    assert [r["n"] for r in rows] == [0, 4, 0]
    assert rows[1]["rate"] == 0.75 and rows[1]["outcomes"] == {"answered": 3, "failed": 1}
    assert rows[1]["p50_ms"] == 1200.0 and rows[1]["low"] == pytest.approx(0.3006, abs=1e-4)
    assert 'id="trend-data"' in response.content.decode()


@pytest.mark.parametrize("query", ["windows=abc", "windows=0", "windows=400", "windows=-3"])
def test_bad_windows_are_a_400_page_saying_why(admin_client_, query):
    ev = evaluator()
    response = admin_client_.get(f"/admin/monitoring/onlineevaluator/{ev.pk}/trend/?{query}")
    assert response.status_code == 400
    assert "windows must be a whole number from 1 to 366" in response.content.decode()


def test_an_unknown_evaluator_is_a_404(admin_client_):
    assert admin_client_.get("/admin/monitoring/onlineevaluator/999/trend/").status_code == 404
    assert admin_client_.get("/admin/monitoring/onlineevaluator/x/trend/").status_code == 404


def test_the_form_needs_a_scorer_and_writes_the_beat_entry(admin_client_):
    form = {
        "name": "empty",
        "enabled": "on",
        "sampling_rate": "0.5",
        "tool": "",
        "outcome": "",
        "checks_plugin": "",
        "judge_rubric": "",
        "judge_model": "",
        "window": "daily",
        "min_count": "30",
        "alpha": "0.05",
    }
    response = admin_client_.post("/admin/monitoring/onlineevaluator/add/", form)
    assert response.status_code == 200 and "choose at least one scorer" in response.content.decode()
    response = admin_client_.post(
        "/admin/monitoring/onlineevaluator/add/", {**form, "sampling_rate": "1.5", "score_answered": "on"}
    )
    assert "Ensure this value is less than or equal to 1.0" in response.content.decode()
    response = admin_client_.post("/admin/monitoring/onlineevaluator/add/", {**form, "score_answered": "on"})
    assert response.status_code == 302
    ev = OnlineEvaluator.objects.get(name="empty")
    assert ev.periodic_task is not None and ev.periodic_task.task == "monitoring.tasks.online_windows_check"
    assert OnlineScore.objects.count() == 0

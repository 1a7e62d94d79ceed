"""An online evaluator's trend page in headless Chromium through a live
daphne: the pass-rate chart (rate, Wilson band, scored turns) and the turns
chart (outcomes stacked, latency p50/p95) drawn with the vendored Chart.js
from the page's figures; a bad ``?windows=`` is a 400 page saying why. A
screenshot goes to ``/work/notes/shots/monitoring-trend.png``."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from monitoring.windows import window_floor
from tests.evaluation.admin.test_report_browser import admin_log_in, chart, desktop_page  # noqa: F401 - a fixture
from tests.monitoring.support import evaluator, score_at
from tests.test_browser import CHROMIUM, live_server_url  # noqa: F401 - the live daphne fixture

SHOT = Path("/work/notes/shots/monitoring-trend.png")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]

#: per day, oldest first: (passed, failed) — steady near 85 %, then a drop on the last full day
DAYS = [(17, 3), (18, 2), (16, 4), (17, 3), (18, 2), (17, 3), (9, 11)]


def test_the_trend_page_draws_its_charts(live_server_url, desktop_page, django_user_model, owner):
    ev = evaluator("answer quality", min_count=15, max_latency_ms=3000)
    today = window_floor(timezone.now(), "daily")
    for back, (passed, failed) in enumerate(reversed(DAYS), start=1):
        day = today - timedelta(days=back)
        for i in range(passed + failed):
            score = score_at(ev, owner, day + timedelta(hours=8, minutes=i), passed=i < passed)
            score.turn.timings = {"total_ms": 800 + 50 * i + 400 * (back == 1)}
            score.turn.save(update_fields=["timings"])
    django_user_model.objects.create_user("boss", password="pw-boss-123", is_staff=True, is_superuser=True)
    page = desktop_page
    admin_log_in(page, live_server_url, "boss", "pw-boss-123")

    page.goto(f"{live_server_url}/admin/monitoring/onlineevaluator/")
    page.click("a:has-text('trend')")
    page.wait_for_url(f"**/admin/monitoring/onlineevaluator/{ev.pk}/trend/")
    page.goto(page.url + "?windows=10")
    page.wait_for_function("window.agentlabCharts && window.agentlabCharts['chart-turns']")

    score_chart = chart(page, "chart-score")
    low, high, rate, counts, thumbs_up = score_chart["datasets"]
    assert thumbs_up == [None] * 10  # no end user rated these turns (tests/monitoring/test_feedback_trend.py)
    assert len(score_chart["labels"]) == 10 and score_chart["painted"] > 5000
    # ten windows: two empty days, the seven days filled, today (still open, empty)
    assert counts == [0, 0, *(p + f for p, f in DAYS), 0]
    assert rate[2:9] == pytest.approx([p / (p + f) for p, f in DAYS])
    assert rate[:2] == [None, None] and rate[9] is None
    assert all(lo < r < hi for lo, r, hi in zip(low[2:9], rate[2:9], high[2:9], strict=True))
    turns_chart = chart(page, "chart-turns")
    answered, failed, p50, p95 = turns_chart["datasets"]
    assert answered[2:9] == [p for p, _ in DAYS] and failed[2:9] == [f for _, f in DAYS]
    # yesterday's 20 turns took 1200 + 50 i ms: p50 1675, p95 2102.5
    assert (p50[8], p95[8]) == (pytest.approx(1675.0), pytest.approx(2102.5))
    rows = page.locator("#trend-table tbody tr")  # newest first
    assert rows.count() == 10
    assert rows.nth(1).locator("td").nth(1).inner_text() == "20"
    assert rows.nth(1).locator("td").nth(2).inner_text() == "0.450"
    assert page.js_errors == []
    SHOT.parent.mkdir(parents=True, exist_ok=True)
    page.locator("#content").screenshot(path=str(SHOT))

    response = page.goto(f"{live_server_url}/admin/monitoring/onlineevaluator/{ev.pk}/trend/?windows=abc")
    assert response is not None and response.status == 400
    assert "windows must be a whole number from 1 to 366" in page.locator("#trend-error").inner_text()

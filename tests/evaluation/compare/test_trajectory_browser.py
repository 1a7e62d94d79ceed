"""The comparison page's trajectory view in headless Chromium: the diverged
examples with the two runs' paths side by side, and the paired tests, on two
runs of the stub whose paths differ on known examples
(``tests/evaluation/compare/test_trajectory_runs.py``'s). Screenshot:
``trajectory-comparison.png`` in ``/tmp/screens`` (or ``AGENTLAB_SCREENSHOTS``)."""

from __future__ import annotations

import os

import pytest

from tests.evaluation.admin.test_report_browser import SHOTS, admin_log_in, desktop_page  # noqa: F401 - fixture
from tests.evaluation.compare.test_trajectory_runs import SCRIPT_B, run_a
from tests.test_browser import CHROMIUM, live_server_url  # noqa: F401 - the live daphne fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]


@pytest.fixture
def two_runs(endpoint, tmp_path):
    return run_a(endpoint, tmp_path), run_a(endpoint, tmp_path, run_id="B", script=SCRIPT_B)


def test_the_comparison_page_lists_diverged_paths_side_by_side(
    two_runs, live_server_url, desktop_page, django_user_model
):
    base, candidate = two_runs
    django_user_model.objects.create_user("boss", password="pw-boss-123", is_staff=True)
    page = desktop_page
    admin_log_in(page, live_server_url, "boss", "pw-boss-123")
    page.goto(f"{live_server_url}/admin/evaluation/run/compare/{base.pk}/{candidate.pk}/")
    summary = page.locator("#trajectory-summary").inner_text()
    assert "1 identical, 4 diverged, 0 only in base, 0 only in candidate" in summary
    assert "exact McNemar p = 0.2500 (Holm 0.7500)" in summary
    assert "the candidate takes fewer steps than the base (mean 1.80 vs 2.00 over 5 examples)" in summary
    rows = page.locator("#diverged-paths tbody tr")
    assert rows.count() == 4
    extra = rows.filter(has_text="extra")
    cells = extra.locator("td")
    assert cells.nth(1).inner_text() == "step 1: A called search_documents, B called calculator"
    assert cells.nth(2).locator("ol.al-path li").all_inner_texts() == [
        "search_documents(query=two plus two)",
        "calculator(expression=2+2)",
    ]
    assert cells.nth(3).locator("ol.al-path li").all_inner_texts() == ["calculator(expression=2+2)"]
    assert (
        "trajectory failed" in cells.nth(2).inner_text() and "trajectory passed" in cells.nth(3).inner_text()
    )
    assert page.js_errors == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#trajectories").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "trajectory-comparison.png"), full_page=True)
    assert all(url.startswith(live_server_url) for url in page.al_requests)

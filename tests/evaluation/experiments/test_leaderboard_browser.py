"""An experiment's leaderboard page in headless Chromium (issue 29): the
accuracy-vs-cost chart is drawn from the vendored Chart.js (no CDN) with
every finished variant of known cost a point and the frontier a line; the
pairwise matrix links each pair to its comparison. A screenshot goes to
``/tmp/leaderboard.png``.

The live daphne comes from ``tests/test_browser.py``, the browser page and
the chart reader from ``tests/evaluation/admin/test_report_browser.py``; the
experiment is built from rows (``tests/evaluation/experiments/test_leaderboard.py``).
"""

from __future__ import annotations

import os

import pytest

from tests.evaluation.admin.test_report_browser import admin_log_in, chart, desktop_page  # noqa: F401 - a fixture
from tests.evaluation.experiments.test_leaderboard import add_variant, first, make_dataset, make_experiment
from tests.test_browser import CHROMIUM, live_server_url  # noqa: F401 - the live daphne fixture

SCREENSHOT = "/tmp/leaderboard.png"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]


def test_the_leaderboard_page_draws_the_frontier_and_the_pairwise_matrix(
    live_server_url,
    desktop_page,
    django_user_model,
):
    experiment = make_experiment("Models A/B", make_dataset())
    runs = {
        "C": add_variant(experiment, "C", first(5), cost=0.0005),  # 12.5 %, $0.02
        "B": add_variant(experiment, "B", set(range(1, 30)), cost=0.001),  # 72.5 %, $0.04
        "D": add_variant(experiment, "D", first(20), cost=0.0015),  # 50 %, $0.06: dominated by B
        "A": add_variant(experiment, "A", first(30), cost=0.002),  # 75 %, $0.08
        "E": add_variant(experiment, "E", first(25), cost=None),  # 62.5 %, cost unknown
    }
    django_user_model.objects.create_user("boss", password="pw-boss-123", is_staff=True)
    page = desktop_page
    admin_log_in(page, live_server_url, "boss", "pw-boss-123")

    page.goto(f"{live_server_url}/admin/evaluation/experiment/")
    page.click("a:has-text('Models A/B')")
    page.wait_for_url(f"**/admin/evaluation/experiment/{experiment.pk}/change/")
    page.wait_for_function("window.agentlabCharts && window.agentlabCharts['chart-frontier']")

    drawn = chart(page, "chart-frontier")
    assert drawn["type"] == "scatter" and drawn["painted"] > 2000
    points, frontier = drawn["datasets"]
    assert [(p["name"], p["y"]) for p in points] == [("A", 0.75), ("B", 0.725), ("D", 0.5), ("C", 0.125)]
    assert [p["x"] for p in points] == pytest.approx([0.08, 0.04, 0.06, 0.02])
    assert [p["name"] for p in frontier] == ["C", "B", "A"]
    labels = page.evaluate(
        "window.agentlabCharts['chart-frontier'].data.datasets.map((d) => [d.label, d.showLine === true])"
    )
    assert labels == [["variants (green: top group)", False], ["Pareto frontier", True]]
    assert "Not drawn, cost unknown: E" in page.locator(".al-chart").inner_text()

    # the table: best first, the top group and the frontier marked
    names = page.locator("#leaderboard tbody tr a.al-report-link").all_inner_texts()
    assert names == ["A", "B", "E", "D", "C"]
    assert page.locator("#leaderboard tr[data-variant=A] .al-top").count() == 1
    assert page.locator("#leaderboard tr[data-variant=D] .al-front").count() == 0
    # the pairwise matrix: 5 ranked variants, 20 cells off the diagonal
    assert page.locator("#pairs a.al-pair").count() == 20
    a_row = page.locator("#pairs tbody tr", has_text="A").first
    assert "+62.5 pp" in a_row.inner_text()
    assert page.js_errors == []
    page.locator("#content").screenshot(path=SCREENSHOT)

    # a cell opens the comparison of its two runs, the column's as the base
    a_row.locator("a.al-pair", has_text="+62.5 pp").click()
    page.wait_for_url(f"**/admin/evaluation/run/compare/{runs['C'].pk}/{runs['A'].pk}/")
    assert page.js_errors == []
    # everything came from this server: no CDN
    assert all(url.startswith(live_server_url) for url in page.al_requests)


def test_a_leaderboard_without_costs_says_why_there_is_no_chart(
    live_server_url, desktop_page, django_user_model
):
    experiment = make_experiment("Embedded prompts", make_dataset())
    for name, right in (("terse", first(22)), ("chatty", first(20))):  # 55 % vs 50 %: not significant
        run = add_variant(experiment, name, right, cost=None)
        run.config = {**run.config, "provider": "local"}
        run.save(update_fields=["config"])
    django_user_model.objects.create_user("boss", password="pw-boss-123", is_staff=True)
    page = desktop_page
    admin_log_in(page, live_server_url, "boss", "pw-boss-123")
    page.goto(f"{live_server_url}/admin/evaluation/experiment/{experiment.pk}/change/")
    page.wait_for_selector("#leaderboard")
    assert page.locator("canvas#chart-frontier").count() == 0 and page.locator(".al-chart").count() == 0
    why = page.locator("#no-cost-chart").inner_text()
    assert why.startswith("No accuracy-vs-cost chart: no finished variant has a known cost (terse, chatty)")
    # one shared in-process model: the latency columns say they measure queueing
    assert "†" in page.locator("#leaderboard thead").inner_text()
    assert "measure queueing" in page.locator("#queueing-note").inner_text()
    # the best is marked top in green; the worse one, tied with it, in grey
    assert page.locator("#leaderboard tr[data-variant=terse] .al-top").count() == 1
    chatty = page.locator("#leaderboard tr[data-variant=chatty]")
    assert (
        chatty.locator(".al-top").count() == 0 and chatty.locator(".al-tied").inner_text() == "▲ top (tied)"
    )
    assert page.evaluate("getComputedStyle(document.querySelector('.al-tied')).color") != "rgb(32, 122, 32)"
    # a difference that is not significant is coloured neither better nor worse
    assert page.locator("#pairs .al-better, #pairs .al-worse").count() == 0
    assert page.js_errors == []
    page.locator("#content").screenshot(path="/tmp/leaderboard-without-costs.png")

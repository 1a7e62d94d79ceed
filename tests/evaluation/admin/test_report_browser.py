"""The run report and the comparison page in headless Chromium (issue 15):
the Chart.js charts are drawn, with the data of the runs, from the vendored
static file (no CDN). Screenshots — the report, the comparison, and the
candidate's wrong predictions with their answer and gold columns — go to
``/tmp/screens``, or to ``docs/screenshots/`` with
``AGENTLAB_SCREENSHOTS=docs/screenshots``.

The live daphne comes from ``tests/test_browser.py``; the runs are written by
a real ``run_eval`` against a stub OpenAI-compatible server before the pages
are opened.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from agentlab.testing.stub_llm import StubLLMServer, error_reply, final_answer_reply, last_user_text
from evaluation.models import Run
from tests.test_browser import CHROMIUM, live_server_url  # noqa: F401 - the live daphne fixture

ROOT = Path(__file__).resolve().parents[3]
#: where the screenshots go: ``/tmp/screens`` (like ``tests/test_browser.py``), or
#: ``AGENTLAB_SCREENSHOTS=docs/screenshots`` to refresh the ones the README shows
SHOTS = ROOT / os.environ.get("AGENTLAB_SCREENSHOTS", "/tmp/screens")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]

ROWS: list[dict[str, Any]] = (
    [
        {
            "question_id": f"m{i}",
            "question": f"What is {i} times 3?",
            "answer": str(3 * i),
            "task_type": "math",
        }
        for i in range(10)
    ]
    + [
        {
            "question_id": f"c{i}",
            "question": f"Pick the letter for option {i}",
            "answer": "B",
            "task_type": "multiple_choice",
            "choices": ["x", "y", "z"],
        }
        for i in range(6)
    ]
    + [
        {
            "question_id": f"d{i}",
            "question": f"Whose badge is {i}?",
            "answer": f"agent {i}",
            "task_type": "document_qa",
        }
        for i in range(4)
    ]
)


@pytest.fixture
def two_runs(tmp_path, settings):
    """``base`` and ``cand`` on one dataset: the candidate breaks four math
    examples, fixes two multiple-choice ones and errors on d3."""
    path = tmp_path / "report.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    by_question = {r["question"]: r for r in ROWS}
    state: dict[str, set[str]] = {"wrong": set(), "broken": set()}

    def handler(body):
        row = by_question[last_user_text(body)]
        if row["question_id"] in state["broken"]:
            return error_reply(400, "this example breaks the model", type="invalid_request_error")
        answer = row["answer"] if row["question_id"] not in state["wrong"] else "A"
        # a spread of latencies for the histogram
        delay = 0.02 * (int(row["question_id"][1:]) % 5)
        return final_answer_reply(answer, "stub evidence", "stub reasoning", usage=(40, 12), delay=delay)

    with StubLLMServer(handler) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "test-key"
        settings.AGENTLAB_MODEL = "stub-model"
        for run_id, wrong, broken in (
            ("base", {"c0", "c1", "c2"}, set()),
            ("cand", {"m0", "m1", "m2", "m3", "c2"}, {"d3"}),
        ):
            state["wrong"], state["broken"] = wrong, broken
            call_command(
                "run_eval", "--no-review", str(path), "--run-id", run_id, "--concurrency", "4",
                "--price-in", "0.15", "--price-out", "0.6",
            )  # fmt: skip
    return Run.objects.get(run_id="base"), Run.objects.get(run_id="cand")


@pytest.fixture
def desktop_page(monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = browser.new_context(viewport={"width": 1200, "height": 900}, device_scale_factor=1)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        # a failed load is named by its response (the console message has no URL);
        # the browser's own favicon request is not the page's
        page.on(
            "response",
            lambda r: (
                errors.append(f"{r.status} {r.url}")
                if r.status >= 400 and not r.url.endswith("/favicon.ico")
                else None
            ),
        )
        page.js_errors = errors  # type: ignore[attr-defined]
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.al_requests = requests  # type: ignore[attr-defined]
        try:
            yield page
        finally:
            context.close()
            browser.close()


def admin_log_in(page, base_url: str, username: str, password: str) -> None:
    """Log ``page`` in to the admin at ``base_url``."""
    page.goto(base_url + "/admin/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("input[type=submit]")
    page.wait_for_url(base_url + "/admin/")


def chart(page, canvas_id: str) -> dict:
    """What the chart on ``canvas_id`` holds, and how many of its pixels are painted."""
    return page.evaluate(
        """(id) => {
            const c = window.agentlabCharts[id];
            const canvas = document.getElementById(id);
            const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
            let painted = 0;
            for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) painted++;
            return {
                type: c.config.type,
                labels: c.data.labels,
                datasets: c.data.datasets.map((d) => d.data),
                painted: painted,
            };
        }""",
        canvas_id,
    )


def test_run_report_and_comparison_draw_their_charts(
    two_runs,  # first: run_eval runs its own event loop, playwright's sync API keeps one running
    live_server_url,
    desktop_page,
    django_user_model,
):
    base, cand = two_runs
    django_user_model.objects.create_user("boss", password="pw-boss-123", is_staff=True)
    page = desktop_page
    SHOTS.mkdir(parents=True, exist_ok=True)

    admin_log_in(page, live_server_url, "boss", "pw-boss-123")

    # the run report of the candidate
    page.goto(f"{live_server_url}/admin/evaluation/run/{cand.pk}/report/")
    # five charts: a run without review has no review chart
    page.wait_for_function("window.agentlabCharts && Object.keys(window.agentlabCharts).length === 5")
    assert page.locator("canvas#chart-review").count() == 0
    accuracy = chart(page, "chart-accuracy")
    assert accuracy["labels"] == [
        "overall (n=20)",
        "document_qa (n=4)",
        "math (n=10)",
        "multiple_choice (n=6)",
    ]
    # 14 of 20 right: d3 errored, m0–m3 and c2 wrong
    assert accuracy["datasets"][0] == pytest.approx([14 / 20, 3 / 4, 6 / 10, 5 / 6])
    low, high = accuracy["datasets"][1][0]
    assert low < 0.7 < high  # the overall Wilson interval
    assert accuracy["painted"] > 2000
    latency = chart(page, "chart-latency")
    assert sum(latency["datasets"][0]) == 20 and latency["painted"] > 1000
    models = chart(page, "chart-models")
    assert models["labels"] == ["stub-model"] and models["datasets"][0] == [19 * 40]  # d3 used no tokens
    stops = chart(page, "chart-stop-reasons")
    assert dict(zip(stops["labels"], stops["datasets"][0], strict=True)) == {"final": 19, "provider_error": 1}
    assert stops["painted"] > 1000
    # one colour per stop reason, on every report: final green, provider_error red
    colours = page.evaluate("window.agentlabCharts['chart-stop-reasons'].data.datasets[0].backgroundColor")
    assert colours == ["#27ae60", "#c0392b"]
    # accuracy with one decimal, as run_eval prints it
    assert "accuracy 70.0% (14/20 scored" in page.locator("#content-main").inner_text()
    trend = chart(page, "chart-trend")
    assert trend["datasets"][0] == pytest.approx([17 / 20, 14 / 20]) and trend["painted"] > 500
    assert page.js_errors == []
    page.locator("#content").screenshot(path=str(SHOTS / "run-report.png"))

    # a trend point is a link to that run's report
    page.click(f"a.al-trend-link:has-text('{base.run_id}')")
    page.wait_for_url(f"**/admin/evaluation/run/{base.pk}/report/")

    # the comparison page, from the report's link
    page.goto(f"{live_server_url}/admin/evaluation/run/{cand.pk}/report/")
    page.click("#compare-previous")
    page.wait_for_url(f"**/admin/evaluation/run/compare/{base.pk}/{cand.pk}/")
    page.wait_for_function("window.agentlabCharts && window.agentlabCharts['chart-differences']")
    differences = chart(page, "chart-differences")
    assert differences["labels"] == [
        "overall (n=20)",
        "document_qa (n=4)",
        "math (n=10)",
        "multiple_choice (n=6)",
    ]
    assert differences["datasets"][0] == pytest.approx([-3 / 20, -1 / 4, -4 / 10, 2 / 6])
    for value, (low, high) in zip(differences["datasets"][0], differences["datasets"][1], strict=True):
        assert low < value < high
    assert differences["painted"] > 2000
    assert chart(page, "chart-accuracies")["painted"] > 2000
    assert page.locator("table[data-list=broken] tbody tr").count() == 5
    assert page.locator("table[data-list=fixed] tbody tr").count() == 2
    assert page.locator("table[data-list=errored] a.al-turn").count() == 2
    assert page.js_errors == []
    page.locator("#content").screenshot(path=str(SHOTS / "comparison.png"))

    # why an answer is wrong: the broken example's candidate prediction, then its turn
    page.locator("table[data-list=broken] tbody tr", has_text="m0").locator("a", has_text="prediction").nth(
        1
    ).click()
    page.wait_for_selector("h1:has-text('Example m0')")
    m0_pk = cand.predictions.get(example__external_id="m0").pk
    assert page.url.endswith(f"/admin/evaluation/prediction/{m0_pk}/change/")
    page.locator(".field-turn_link a").first.click()
    page.wait_for_selector(".al-system-prompt")
    assert "final_answer" in page.locator(".field-setup_tools").inner_text()
    back = page.locator(".field-prediction_link a", has_text="example m0")
    assert back.get_attribute("href") == f"/admin/evaluation/prediction/{m0_pk}/change/"
    page.goto(f"{live_server_url}/admin/evaluation/prediction/?run__id__exact={cand.pk}&correct__exact=0")
    assert page.locator("td.field-gold_short").count() == 6  # 4 math, c2 and the errored d3
    page.locator("#content").screenshot(path=str(SHOTS / "wrong-predictions.png"))

    # everything came from this server: no CDN
    assert all(url.startswith(live_server_url) for url in page.al_requests)

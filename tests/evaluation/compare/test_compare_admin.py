"""The admin side of comparisons and reports: the "Compare" action on two
runs, the comparison page, the run report, the "compare with the previous
run" link; the prediction list's answer columns, a prediction titled by its
example, and a turn page linking back to its prediction and showing the
system prompt and tools it was given."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from evaluation.models import Prediction, Run
from turns.meta import meta_setup

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = [
    {"question_id": f"q{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i), "task_type": "math"}
    for i in range(6)
] + [
    {"question_id": "d0", "question": "Whose code is 7?", "answer": "agent 7", "task_type": "document_qa"},
]


@pytest.fixture
def runs(tmp_path, settings):
    """Two runs on one dataset: ``base`` gets q1 wrong, ``cand`` q2 and d0;
    and ``other`` on another dataset."""
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    wrong: set[str] = set()
    by_question = {r["question"]: r for r in ROWS}

    def handler(body):
        row = by_question[last_user_text(body)]
        answer = "nope" if row["question_id"] in wrong else row["answer"]
        return final_answer_reply(answer, "stub evidence", "stub reasoning", usage=(10, 5))

    with StubLLMServer(handler) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "test-key"
        settings.AGENTLAB_MODEL = "stub-model"
        for run_id, bad, dataset in (
            ("base", {"q1"}, path),
            ("cand", {"q2", "d0"}, path),
            ("other", set(), other),
        ):
            wrong.clear()
            wrong.update(bad)
            call_command("run_eval", "--no-review", str(dataset), "--run-id", run_id, "--concurrency", "2")
    return {run.run_id: run for run in Run.objects.all()}


@pytest.fixture
def admin_client(staff):
    client = Client()
    client.force_login(staff)
    return client


def test_compare_action_redirects_to_the_comparison_of_the_two_runs(admin_client, runs):
    changelist = reverse("admin:evaluation_run_changelist")
    response = admin_client.post(
        changelist,
        {"action": "compare_runs", "_selected_action": [runs["cand"].pk, runs["base"].pk]},
    )
    # the older run is the baseline
    assert response.status_code == 302
    assert response.url == reverse("admin:evaluation_run_compare", args=[runs["base"].pk, runs["cand"].pk])


@pytest.mark.parametrize(
    ("selected", "message"), [(["base"], "exactly two"), (["base", "other"], "different datasets")]
)
def test_compare_action_refuses_one_run_or_two_datasets(admin_client, runs, selected, message):
    response = admin_client.post(
        reverse("admin:evaluation_run_changelist"),
        {"action": "compare_runs", "_selected_action": [runs[r].pk for r in selected]},
        follow=True,
    )
    assert response.status_code == 200
    assert any(message in str(m) for m in response.context["messages"])


def test_comparison_page_lists_fixed_and_broken_with_links_to_both_turns(admin_client, runs):
    base, cand = runs["base"], runs["cand"]
    response = admin_client.get(reverse("admin:evaluation_run_compare", args=[base.pk, cand.pk]))
    assert response.status_code == 200
    comparison = response.context["comparison"]
    assert [p["example_id"] for p in comparison["fixed"]] == ["q1"]
    assert [p["example_id"] for p in comparison["broken"]] == ["q2", "d0"]
    html = response.content.decode()
    for example_id in ("q1", "q2"):
        for run in (base, cand):
            prediction = Prediction.objects.get(run=run, example__external_id=example_id)
            assert reverse("admin:turns_turn_change", args=[prediction.turn_id]) in html
            assert reverse("admin:evaluation_prediction_change", args=[prediction.pk]) in html
    assert 'id="comparison-data"' in html and 'id="chart-differences"' in html
    charts = json.loads(html.split('id="comparison-data" type="application/json">')[1].split("</script>")[0])
    assert [d["label"] for d in charts["differences"]] == ["overall", "document_qa", "math"]
    assert charts["interval"] == "Newcombe" and "McNemar p" in html and 'id="compare-method"' not in html
    assert charts["differences"][0]["value"] == pytest.approx((1 - 2) / 7)
    # the deltas read as the CLI's: labels, not metric keys; accuracies in %
    assert "latency p95 (ms)" in html and "latency_p95_ms" not in html
    assert "first attempt accuracy" in html and "first_attempt_accuracy" not in html
    assert re.search(r"<td>final accuracy</td><td class=\"num\">\d+\.\d%</td>", html)


def test_comparison_page_warns_when_a_run_did_not_finish(admin_client, runs):
    base, cand = runs["base"], runs["cand"]
    url = reverse("admin:evaluation_run_compare", args=[base.pk, cand.pk])
    assert "did not run count as errored" not in admin_client.get(url).content.decode()
    Run.objects.filter(pk=cand.pk).update(status="cancelled")
    html = admin_client.get(url).content.decode()
    assert (
        '<p class="errornote">warning: the candidate run cand ended cancelled: its examples that did '
        "not run count as errored (wrong) in the pairs below</p>"
    ) in html


def test_comparison_page_of_two_datasets_says_why_with_400(admin_client, runs):
    response = admin_client.get(
        reverse("admin:evaluation_run_compare", args=[runs["base"].pk, runs["other"].pk])
    )
    assert response.status_code == 400
    assert "different datasets" in response.content.decode()
    assert (
        admin_client.get(reverse("admin:evaluation_run_compare", args=[runs["base"].pk, 999999])).status_code
        == 404
    )


def test_run_page_links_to_its_report_and_to_the_previous_run(admin_client, runs):
    cand = runs["cand"]
    html = admin_client.get(reverse("admin:evaluation_run_change", args=[cand.pk])).content.decode()
    assert reverse("admin:evaluation_run_report", args=[cand.pk]) in html
    assert reverse("admin:evaluation_run_compare", args=[runs["base"].pk, cand.pk]) in html
    assert "compare with the previous run on this dataset (base)" in html
    first = admin_client.get(reverse("admin:evaluation_run_change", args=[runs["base"].pk])).content.decode()
    assert "no earlier run on this dataset" in first


def test_run_report_has_its_chart_data(admin_client, runs):
    cand = runs["cand"]
    response = admin_client.get(reverse("admin:evaluation_run_report", args=[cand.pk]))
    assert response.status_code == 200
    report = response.context["report"]
    assert [(b["label"], b["n"]) for b in report["accuracy"]] == [
        ("overall", 7),
        ("document_qa", 1),
        ("math", 6),
    ]
    assert report["accuracy"][0]["value"] == pytest.approx(5 / 7)
    assert report["accuracy"][0]["low"] < 5 / 7 < report["accuracy"][0]["high"]
    assert sum(report["latency"]["counts"]) == 7
    assert report["stop_reasons"] == {"labels": ["final"], "counts": [7]}
    assert [m["label"] for m in report["models"]] == ["stub-model"]
    assert [p["run_id"] for p in report["trend"]] == ["base", "cand"]
    html = response.content.decode()
    assert "evaluation/vendor/chartjs/chart.umd.min.js" in html and "cdn" not in html.lower()
    assert reverse("admin:evaluation_run_report", args=[runs["base"].pk]) in html  # a trend point's link
    assert admin_client.get(reverse("admin:evaluation_run_report", args=[999999])).status_code == 404


def test_report_and_comparison_are_for_staff_only(client, runs, owner):
    url = reverse("admin:evaluation_run_report", args=[runs["base"].pk])
    client.force_login(owner)
    assert client.get(url).status_code == 302  # to the admin login


def test_prediction_list_shows_prediction_and_gold_and_the_page_is_titled_by_example(admin_client, runs):
    html = admin_client.get(
        reverse("admin:evaluation_prediction_changelist") + f"?run__id__exact={runs['cand'].pk}"
    ).content.decode()
    assert "column-prediction_short" in html and "column-gold_short" in html
    assert '<td class="field-prediction_short">nope</td>' in html
    assert '<td class="field-gold_short">agent 7</td>' in html
    prediction = Prediction.objects.get(run=runs["cand"], example__external_id="d0")
    page = admin_client.get(reverse("admin:evaluation_prediction_change", args=[prediction.pk]))
    assert page.context["title"] == "Example d0 · run cand"
    assert "<title>Example d0 · run cand |" in page.content.decode()


def test_turn_page_links_back_to_its_prediction_and_shows_prompt_and_tools(admin_client, runs):
    prediction = Prediction.objects.get(run=runs["cand"], example__external_id="q2")
    setup = meta_setup(prediction.turn.meta)
    assert setup is not None and setup["attempt"] == 1
    assert "final_answer" in [t["name"] for t in setup["tools"]]
    assert setup["system_prompt"]  # the system message as sent
    html = admin_client.get(reverse("admin:turns_turn_change", args=[prediction.turn_id])).content.decode()
    assert reverse("admin:evaluation_prediction_change", args=[prediction.pk]) in html
    assert "example q2" in html
    assert "al-system-prompt" in html and "calculator" in html and "final_answer" in html

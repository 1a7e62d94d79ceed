"""The evaluation admin: runs, predictions, datasets and examples, as a staff
user with Django's test client, over a run made by the evaluation services and
driven by the real driver with a scripted LLM."""

from __future__ import annotations

import html
import re
from typing import Any, cast

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from agentlab.agent.extensions import Extensions
from agentlab.agent.providers.scripted import ScriptedProvider, final, tool_call
from common.db import DatabaseThreads
from evaluation.datasets.services import dataset_import
from evaluation.datasets.spec import ExampleSpec
from evaluation.models import Prediction, Run
from evaluation.run.lifecycle import run_finish, run_start
from evaluation.run.plan import run_plan
from evaluation.run.record import prediction_record
from tests.turns.test_admin import TestThreadDb, drive
from turns.driver import EVALUATION, drive_turn, turn_claim
from turns.events import NewEvent, event_append_many
from turns.models import EventType
from turns.services import turn_interrupt

pytestmark = pytest.mark.django_db

RUN_LIST = reverse("admin:evaluation_run_changelist")
PREDICTION_LIST = reverse("admin:evaluation_prediction_changelist")
DATASET_LIST = reverse("admin:evaluation_dataset_changelist")
EXAMPLE_LIST = reverse("admin:evaluation_example_changelist")

# Pinned query counts (session + user + the page's own); the same for 1 or many rows.
RUN_LIST_QUERIES = 12  # two of them: the schedules and the experiments the filters offer
#: four of them: the review verdicts, failed checks, human labels and failure tags the filters offer
PREDICTION_LIST_QUERIES = 14

TASK_TYPES = ("math", "fact", "unit")


def make_run(*, run_id: str = "nightly", examples: int = 10, staff: Any = None) -> dict[str, Any]:
    """A finished run over ``examples`` examples: e0 right, e1 wrong, e2 failed
    at max steps, e3 interrupted (never recorded), e4 with 5,000 events, and
    the rest never driven (pessimistic rows: stop reason ``error``)."""
    specs = [
        ExampleSpec(
            external_id=f"e{i}", question=f"What is {i}+{i}?", answer=str(2 * i), task_type=TASK_TYPES[i % 3]
        )
        for i in range(examples)
    ]
    dataset = dataset_import(name=f"sums-{run_id}", examples=specs)
    run, _ = run_start(
        run_id=run_id,
        dataset=dataset,
        config={"provider": "scripted", "model": "scripted-7b", "max_steps": 3, "code_version": "abc123"},
        started_by=staff,
    )
    planned, _ = run_plan(run=run, limit=None, max_steps=3, model="scripted-7b")
    by_example = {p.example_id: p for p in planned}
    turns = {}
    for prediction in Prediction.objects.filter(run=run).select_related("example"):
        turns[prediction.example.external_id] = (prediction, by_example[prediction.example_id].turn_id)

    p0, t0 = turns["e0"]
    drive(t0, [final("0", evidence="0+0", usage=(10, 2))])
    p1, t1 = turns["e1"]
    drive(t1, [tool_call("calculator", {"expression": "1+1"}, usage=(12, 3)), final("11", usage=(15, 2))])
    p2, t2 = turns["e2"]
    drive(t2, [tool_call("calculator", {"expression": "2"}, usage=(5, 1))] * 3)
    for p in (p0, p1, p2):
        prediction_record(prediction_id=p.pk)
    _, t3 = turns["e3"]
    turn_claim(turn_id=t3, job_id="killed-worker")
    turn_interrupt(turn_id=t3, reason="worker lost")
    _, t4 = turns["e4"]
    event_append_many(
        turn_id=t4, events=[NewEvent(EventType.THINKING, {"attempt": 1, "n": i}) for i in range(2, 5001)]
    )
    run_finish(run=run, status="success")
    run.refresh_from_db()
    return {
        "run": run,
        "dataset": dataset,
        "turns": {k: v[1] for k, v in turns.items()},
        "predictions": {k: v[0] for k, v in turns.items()},
    }


def prediction_ids(response: Any) -> set[int]:
    pattern = r'class="field-id"><a href="/admin/evaluation/prediction/(\d+)/change/'
    return {int(v) for v in re.findall(pattern, response.content.decode())}


def hrefs(body: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]+)"', body)]


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


@pytest.fixture
def evaluated(staff):
    return make_run(staff=staff)


# --- every list and page renders with 500 turns and 5,000 events -------------------


def test_every_list_and_page_renders_with_500_turns_and_5000_events(staff_client, staff):
    made = make_run(examples=500, staff=staff)
    run, dataset = made["run"], made["dataset"]
    pages = {
        RUN_LIST: ["nightly", "scripted-7b"],
        reverse("admin:evaluation_run_change", args=[run.pk]): ["Per task type", "abc123"],
        PREDICTION_LIST: ["e0", "e99"],
        reverse("admin:evaluation_prediction_change", args=[made["predictions"]["e4"].pk]): ["What is 4+4?"],
        DATASET_LIST: ["sums-nightly", "500"],
        reverse("admin:evaluation_dataset_change", args=[dataset.pk]): ["Examples per task type"],
        EXAMPLE_LIST: ["e0", "What is 0+0?"],
        reverse("admin:evaluation_example_change", args=[dataset.examples.get(external_id="e7").pk]): [
            "What is 7+7?"
        ],
        reverse("admin:turns_turn_change", args=[made["turns"]["e4"]]): ["Event log · 5000 events"],
        reverse("admin:turns_turn_changelist"): ["What is 499+499?"],
    }
    for url, texts in pages.items():
        response = staff_client.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        for text in texts:
            assert text in body, (url, text)
    response = staff_client.get(PREDICTION_LIST, {"run__id__exact": run.pk})
    assert "500 predictions" in response.content.decode()
    # each prediction beside its question (issue 49)
    assert '<th scope="col" class="column-question_short">' in response.content.decode()
    assert '<td class="field-question_short">What is 4+4?</td>' in response.content.decode()


# --- runs ----------------------------------------------------------------------------


def test_run_list_shows_model_accuracy_total_errors_and_duration(staff_client, evaluated):
    run = evaluated["run"]
    body = staff_client.get(RUN_LIST).content.decode()
    row = body[body.index(">nightly<") :]
    row = row[: row.index("</tr>")]
    # e0 right of 10 scored (wrong, errored and never-run rows count as wrong)
    assert '<td class="field-accuracy">10.0% (1/10; 95% CI 1.8–40.4%)</td>' in row
    assert '<td class="field-total">10</td>' in row
    assert "scripted-7b" in row and "sums-nightly" in row and "Success" in row
    errors_link = f"{PREDICTION_LIST}?run__id__exact={run.pk}&amp;errored=yes"
    assert f'<a href="{errors_link}">8</a>' in row  # e2 failed, e3 interrupted, 6 never driven
    assert re.search(r'<td class="field-duration">[\d.]+ (ms|s)</td>', row)


def test_run_list_queries_do_not_grow_with_rows(staff_client, staff, django_assert_num_queries):
    make_run(run_id="first", examples=5, staff=staff)
    staff_client.get(RUN_LIST)  # warm the process-wide caches (content types)
    with django_assert_num_queries(RUN_LIST_QUERIES):
        assert staff_client.get(RUN_LIST).status_code == 200
    for i in range(5):
        make_run(run_id=f"more-{i}", examples=5, staff=staff)
    with django_assert_num_queries(RUN_LIST_QUERIES):
        body = staff_client.get(RUN_LIST).content.decode()
    assert all(f">more-{i}<" in body for i in range(5))


def test_run_filters_and_search(staff_client, staff):
    a = make_run(run_id="alpha", examples=5, staff=staff)["run"]
    b = make_run(run_id="beta", examples=5, staff=staff)["run"]
    Run.objects.filter(pk=b.pk).update(status="error")  # what run_eval writes when it crashes

    def listed(params: dict[str, Any]) -> set[str]:
        body = staff_client.get(RUN_LIST, params).content.decode()
        return set(re.findall(r'<th class="field-run_id"><a [^>]+>([^<]+)</a>', body))

    assert listed({}) == {"alpha", "beta"}
    assert listed({"status__exact": "error"}) == {"beta"}
    assert listed({"dataset__id__exact": a.dataset_id}) == {"alpha"}
    assert listed({"q": "alph"}) == {"alpha"}
    assert listed({"q": "sums-beta"}) == {"beta"}


def test_run_page_shows_config_metrics_and_links_to_what_went_wrong(staff_client, evaluated):
    run = evaluated["run"]
    body = staff_client.get(reverse("admin:evaluation_run_change", args=[run.pk])).content.decode()
    # the config snapshot
    for text in (
        "<td>model</td><td>scripted-7b</td>",
        "<td>code_version</td><td>abc123</td>",
        "<td>max_steps</td><td>3</td>",
    ):
        assert text in body, text
    # the metrics, per task type and per stop reason
    assert "<td>accuracy</td><td>10.0% (1/10; 95% CI 1.8–40.4%)</td>" in body
    # every accuracy with its n and 95 % Wilson interval
    assert re.search(r">math</a></td><td>4</td><td>4</td><td>1</td><td>25.0% \(1/4; 95% CI 4.6–69.9%", body)
    assert re.search(r">fact</a></td><td>3</td><td>3</td><td>0</td><td>0.0% \(0/3; 95% CI 0.0–56.1%\)<", body)
    stop_counts = dict(re.findall(r"<td>(\w+)</td><td><a href=\"[^\"]*stop_reason=\w+\">(\d+)</a>", body))
    assert stop_counts == {"error": "7", "final": "2", "max_steps": "1"}
    # the links: predictions pre-filtered, and the run's turns by status
    links = hrefs(body)
    assert f"{PREDICTION_LIST}?run__id__exact={run.pk}" in links
    assert f"{PREDICTION_LIST}?run__id__exact={run.pk}&errored=yes" in links
    interrupted = f"{reverse('admin:turns_turn_changelist')}?run={run.pk}&status__exact=interrupted"
    assert interrupted in links


def test_stop_reason_counts_match_the_predictions(evaluated):
    run = evaluated["run"]
    counts: dict[str, int] = {}
    for reason in Prediction.objects.filter(run=run).values_list("stop_reason", flat=True):
        counts[reason] = counts.get(reason, 0) + 1
    assert run.metrics["stop_reasons"] == counts


def test_an_unfinished_run_shows_metrics_computed_now(staff_client, staff):
    dataset = dataset_import(
        name="open", examples=[ExampleSpec(external_id="x", question="q", answer="a", task_type="fact")]
    )
    run, _ = run_start(run_id="still-going", dataset=dataset, config={"model": "m"}, started_by=staff)
    run_plan(run=run, limit=None, max_steps=2, model="m")
    body = staff_client.get(reverse("admin:evaluation_run_change", args=[run.pk])).content.decode()
    assert "Computed now from the predictions" in body and "<td>total</td><td>1</td>" in body
    list_body = staff_client.get(RUN_LIST).content.decode()
    assert '<td class="field-duration">running</td>' in list_body


# --- predictions -----------------------------------------------------------------------


def test_prediction_list_queries_do_not_grow_with_rows(staff_client, staff, django_assert_num_queries):
    make_run(run_id="small", examples=5, staff=staff)
    staff_client.get(PREDICTION_LIST)  # warm the process-wide caches (content types)
    with django_assert_num_queries(PREDICTION_LIST_QUERIES):
        assert staff_client.get(PREDICTION_LIST).status_code == 200
    make_run(run_id="big", examples=150, staff=staff)
    with django_assert_num_queries(PREDICTION_LIST_QUERIES):
        response = staff_client.get(PREDICTION_LIST)
    assert len(prediction_ids(response)) == 100  # a full page: runs, examples and turn statuses included
    assert response.content.decode().count("/admin/turns/turn/") >= 100


def test_prediction_list_shows_its_columns(staff_client, evaluated):
    p1 = evaluated["predictions"]["e1"]
    body = staff_client.get(PREDICTION_LIST, {"run__id__exact": evaluated["run"].pk}).content.decode()
    row = body[body.index(f'<a href="/admin/evaluation/prediction/{p1.pk}/change/') :]
    row = row[: row.index("</tr>")]
    assert ">e1<" in row and '<td class="field-task_type">fact</td>' in row
    assert 'alt="False"' in row  # correct
    assert (
        '<td class="field-score">0.0</td>' in row
        and '<td class="field-stop_reason_display">final</td>' in row
    )
    assert '<td class="field-steps">2</td>' in row and '<td class="field-tokens">32</td>' in row
    assert f'href="/admin/turns/turn/{evaluated["turns"]["e1"]}/change/"' in row and "succeeded" in row


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"correct__exact": "1"}, {"e0"}),
        ({"correct__exact": "0"}, {f"e{i}" for i in range(1, 10)}),
        ({"task_type": "math"}, {"e0", "e3", "e6", "e9"}),
        ({"stop_reason": "max_steps"}, {"e2"}),
        ({"stop_reason": "final"}, {"e0", "e1"}),
        ({"errored": "yes"}, {f"e{i}" for i in range(2, 10)}),
        ({"errored": "no"}, {"e0", "e1"}),
        ({"turn__status__exact": "interrupted"}, {"e3"}),
        ({"turn__status__exact": "failed"}, {"e2"}),
        ({"q": "e5"}, {"e5"}),
        ({"q": "11"}, {"e1"}),  # the prediction text
        ({"q": "18"}, {"e9"}),  # the gold answer
    ],
)
def test_each_prediction_filter_narrows(staff_client, evaluated, params, expected):
    ids = {p.pk: name for name, p in evaluated["predictions"].items()}
    response = staff_client.get(PREDICTION_LIST, params)
    assert response.status_code == 200
    assert {ids[pk] for pk in prediction_ids(response)} == expected


def test_prediction_filter_by_run(staff_client, staff):
    first = make_run(run_id="one", examples=5, staff=staff)
    make_run(run_id="two", examples=5, staff=staff)
    response = staff_client.get(PREDICTION_LIST, {"run__id__exact": first["run"].pk})
    assert prediction_ids(response) == {p.pk for p in first["predictions"].values()}


def test_from_a_run_to_the_failing_turns_events_in_four_clicks(staff_client, evaluated):
    """The closing note's path: run → its errored predictions → the failed
    prediction → its turn, whose page shows the event log with turn.failed."""
    run = evaluated["run"]
    body = staff_client.get(RUN_LIST).content.decode()
    run_page = next(h for h in hrefs(body) if h == reverse("admin:evaluation_run_change", args=[run.pk]))
    body = staff_client.get(run_page).content.decode()
    errored = next(h for h in hrefs(body) if h.endswith("errored=yes"))
    body = staff_client.get(errored).content.decode()
    failed = evaluated["predictions"]["e2"]
    assert f"/admin/evaluation/prediction/{failed.pk}/change/" in body
    assert "max_steps" in body
    body = staff_client.get(reverse("admin:evaluation_prediction_change", args=[failed.pk])).content.decode()
    assert "max_steps" in body
    turn_page = next(h for h in hrefs(body) if h.startswith("/admin/turns/turn/") and h.endswith("/change/"))
    body = staff_client.get(turn_page).content.decode()
    assert "turn.failed" in body and "max_steps" in body
    assert "Retry as a new attempt" in body and ">Resume<" in body
    # and the interrupted one, from the run's "turns by status" table
    interrupted = staff_client.get(
        f"{reverse('admin:turns_turn_changelist')}?run={run.pk}&status__exact=interrupted"
    ).content.decode()
    assert f'value="{evaluated["turns"]["e3"]}"' in interrupted
    assert interrupted.count('name="_selected_action"') == 1


# --- datasets and examples ---------------------------------------------------------------


def test_dataset_page_counts_examples_per_task_type(staff_client, evaluated):
    dataset = evaluated["dataset"]
    body = staff_client.get(DATASET_LIST).content.decode()
    assert '<td class="field-example_count">10</td>' in body
    assert '<td class="field-task_type_count">3</td>' in body
    assert '<td class="field-run_count">1</td>' in body
    body = staff_client.get(reverse("admin:evaluation_dataset_change", args=[dataset.pk])).content.decode()
    counts = dict(re.findall(r">(\w+)</a></td><td>(\d+)</td>", body))
    assert counts == {"fact": "3", "math": "4", "unit": "3"}
    assert f"{EXAMPLE_LIST}?dataset__id__exact={dataset.pk}&task_type__exact=math" in hrefs(body)


def test_examples_browse_search_and_filter(staff_client, evaluated):
    dataset = evaluated["dataset"]

    def listed(params: dict[str, Any]) -> set[str]:
        body = staff_client.get(EXAMPLE_LIST, params).content.decode()
        return set(re.findall(r'<th class="field-external_id"><a [^>]+>([^<]+)</a>', body))

    assert listed({"dataset__id__exact": dataset.pk}) == {f"e{i}" for i in range(10)}
    assert listed({"dataset__id__exact": dataset.pk, "task_type__exact": "unit"}) == {"e2", "e5", "e8"}
    assert listed({"q": "e7"}) == {"e7"}
    assert listed({"q": "What is 3+3"}) == {"e3"}
    body = staff_client.get(EXAMPLE_LIST).content.decode()
    assert "math (4)" in body  # the facet counts of the task type filter


def test_evaluation_admin_is_read_only_and_staff_only(client, owner, staff, evaluated):
    run = evaluated["run"]
    client.force_login(owner)
    assert client.get(RUN_LIST).status_code == 302
    client.force_login(staff)
    assert client.get(reverse("admin:evaluation_run_add")).status_code == 403
    delete = reverse("admin:evaluation_run_delete", args=[run.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    body = client.get(reverse("admin:evaluation_run_change", args=[run.pk])).content.decode()
    assert 'name="_save"' not in body
    assert Run.objects.filter(pk=run.pk).exists()


# --- plugins' checks ---------------------------------------------------------------------


def test_run_page_shows_each_check_and_links_to_the_predictions_that_failed_it(staff_client, staff):
    docs = [{"title": "Paris", "text": "Paris is the capital and largest city of France."}]
    specs = [
        ExampleSpec(
            external_id=f"c{i}",
            question=f"Capital of France? ({i})",
            answer="Paris",
            task_type="qa",
            context={"documents": docs},
        )
        for i in range(3)
    ]
    dataset = dataset_import(name="capitals", examples=specs)
    run, _ = run_start(run_id="checked", dataset=dataset, config={"model": "scripted"}, started_by=staff)
    planned, _ = run_plan(run=run, limit=None, max_steps=3, model="scripted")
    search = tool_call("search_documents", {"query": "capital of France"})
    scripts = {
        "c0": [search, final("Paris", evidence="Paris is the capital and largest city of France")],
        "c1": [search, final("Paris", evidence="I just know it")],
        "c2": [final("Paris", evidence="Paris is the capital and largest city of France")],  # no search
    }
    for item in planned:
        async_to_sync(drive_turn)(
            item.turn_id,
            policy=EVALUATION,
            provider=ScriptedProvider(scripts[item.example.external_id]),
            db=cast(DatabaseThreads, TestThreadDb()),  # duck-typed: only .run is used
            extensions=Extensions(plugins=("example",)),
        )
        prediction_record(prediction_id=item.prediction_id)
    run_finish(run=run, status="success")
    ids = {p.pk: p.example.external_id for p in Prediction.objects.filter(run=run).select_related("example")}

    body = staff_client.get(reverse("admin:evaluation_run_change", args=[run.pk])).content.decode()
    failing = f"{PREDICTION_LIST}?run__id__exact={run.pk}&failed_check=evidence_quotes_a_document"
    assert re.search(
        r"<td>evidence_quotes_a_document</td><td>turn</td><td>3</td><td>1</td><td>2</td>"
        r"<td>33.3%</td><td><a href=\"[^\"]+\">2/3</a></td>",
        body,
    )
    assert failing in hrefs(body)
    response = staff_client.get(failing)
    assert {ids[pk] for pk in prediction_ids(response)} == {"c1", "c2"}
    assert "evidence_quotes_a_document" in response.content.decode()  # offered by the filter


def test_an_unfinished_run_shows_its_examples_not_done_as_pending_not_errors(staff_client, evaluated):
    """Before: a run still going listed its queued and running examples as
    errors (run list) and "(error)" (predictions list)."""
    run = evaluated["run"]
    finished = staff_client.get(RUN_LIST).content.decode()
    assert re.search(r'class="field-errors"><a [^>]*>8</a>', finished)  # e2 failed, e3..e9 never finished
    Run.objects.filter(pk=run.pk).update(status="started")
    going = staff_client.get(RUN_LIST).content.decode()
    assert '<td class="field-errors">1 (7 pending)</td>' in going
    rows = staff_client.get(reverse("admin:evaluation_prediction_changelist"), {"run__id__exact": run.pk})
    body = rows.content.decode()
    assert body.count("(pending)") == 7 and body.count(">(error)<") == 1  # e2: a real error


def test_the_lists_fit_beside_their_filters_at_1400_px(staff_client, evaluated):
    """Before: the app sidebar took 300 px and the run and prediction lists
    scrolled their right-hand columns out of sight at 1,400 px."""
    runs = staff_client.get(RUN_LIST).content.decode()
    assert 'id="nav-sidebar"' not in runs
    url = reverse("admin:evaluation_prediction_changelist")
    everything = staff_client.get(url).content.decode()
    assert "column-run" in everything
    one_run = staff_client.get(url, {"run__id__exact": evaluated["run"].pk}).content.decode()
    assert "column-run" not in one_run and "column-epoch" not in one_run and "column-turn_link" in one_run

"""The review page in headless Chromium (issue 30): a reviewer labels three
items of a queue with the keyboard (keys 1–3, no mouse), the automatic score
hidden before each label; then the judge-alignment page shows the confusion
matrix; and (issue 45) a thumbs-down chat turn reviewed and corrected into
a dataset example. Screenshots go to ``/work/notes/shots/`` (``/tmp`` when that is missing).

The live daphne comes from ``tests/test_browser.py``, the browser page from
``tests/evaluation/admin/test_report_browser.py``."""

from __future__ import annotations

import os

import pytest

from evaluation.annotation.queues import create_queue
from evaluation.annotation.turn_queues import create_turn_queue
from evaluation.datasets.versions import examples_at
from evaluation.models import Dataset, HumanLabel
from tests.evaluation.admin.test_report_browser import admin_log_in, desktop_page  # noqa: F401 - a fixture
from tests.evaluation.annotation.annotation_support import make_dataset, make_run, staff
from tests.evaluation.annotation.test_annotation_turns import turns  # noqa: F401 - a fixture
from tests.test_browser import CHROMIUM, live_server_url  # noqa: F401 - the live daphne fixture

SHOTS = "/work/notes/shots" if os.path.isdir("/work/notes/shots") else "/tmp"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]


def test_three_items_labelled_with_the_keyboard_then_the_confusion_matrix(live_server_url, desktop_page):
    dataset = make_dataset(n=3)
    make_run(dataset, "hq-judge", right={0}, judge={0: "correct", 1: "correct", 2: "incorrect"})
    queue = create_queue("hq-judge", name="Capitals", tags=["hallucinated evidence"])
    staff("ann")
    page = desktop_page
    admin_log_in(page, live_server_url, "ann", "pw-ann-123")
    page.goto(f"{live_server_url}/admin/evaluation/annotationqueue/{queue.pk}/review/")
    for n, key in enumerate(["1", "3", "3"]):  # correct, incorrect, incorrect
        page.wait_for_selector("#review-form")
        assert page.locator("#review-progress").inner_text() == f"{n} of 3 labelled"
        assert (
            page.locator("#review-score-hidden").count() == 1 and page.locator("#review-score").count() == 0
        )
        assert page.locator("#review-save").is_disabled()  # no label chosen yet
        if n == 0:
            page.screenshot(path=f"{SHOTS}/annotation-review.png", full_page=True)
        page.locator("body").press(key)
        # the form posts and the page loads again: the element may be absent meanwhile
        page.wait_for_function(
            f"(document.querySelector('#review-progress') || {{}}).innerText === '{n + 1} of 3 labelled'"
        )
        # the item just labelled, now with its automatic score
        score = page.locator("#review-score").inner_text()
        assert f"Item {n + 1}" in page.locator("#content-main").inner_text()
        assert "You labelled this item" in score and "judge said" in score
        if n == 0:
            page.screenshot(path=f"{SHOTS}/annotation-review-labelled.png", full_page=True)
        page.locator("body").press("n")  # on to the next item to label
        page.wait_for_url("**/review/")
    assert page.locator("#review-done").count() == 1
    ends = page.locator("#review-ends")
    assert [ends.locator("a").nth(i).get_attribute("href") for i in range(3)] == [
        f"/admin/evaluation/annotationqueue/{queue.pk}/alignment/",
        f"/admin/evaluation/run/{queue.run_id}/report/",
        "/admin/evaluation/annotationqueue/",
    ]
    assert sorted(HumanLabel.objects.values_list("item__position", "label")) == [
        (1, "correct"),
        (2, "incorrect"),
        (3, "incorrect"),
    ]
    page.goto(f"{live_server_url}/admin/evaluation/annotationqueue/{queue.pk}/review/?item=1")
    page.locator("body").press("j")  # next
    page.wait_for_url("**?item=2")
    assert "judge said correct" in page.locator("#review-score").inner_text()  # shown once labelled
    page.goto(f"{live_server_url}/admin/evaluation/annotationqueue/{queue.pk}/alignment/")
    matrix = page.locator("#confusion-matrix")
    assert matrix.locator("tbody tr").nth(0).inner_text().split() == ["correct", "1", "1"]
    assert matrix.locator("tbody tr").nth(1).inner_text().split() == ["incorrect", "0", "1"]
    page.screenshot(path=f"{SHOTS}/annotation-alignment.png", full_page=True)


def test_save_waits_for_a_label_and_an_undefined_kappa_interval_is_a_dash(live_server_url, desktop_page):
    dataset = make_dataset(n=3)
    make_run(dataset, "hq-agree", right={0}, judge={0: "correct", 1: "correct", 2: "incorrect"})
    queue = create_queue("hq-agree", name="Agreeing")
    staff("bea")
    page = desktop_page
    admin_log_in(page, live_server_url, "bea", "pw-bea-123")
    for label in ("correct", "correct", "incorrect"):  # the judge's own verdicts: κ = 1, no variance
        page.goto(f"{live_server_url}/admin/evaluation/annotationqueue/{queue.pk}/review/")
        assert page.locator("#review-save").is_disabled()
        page.locator(f'input[name="label"][value="{label}"]').check()
        assert page.locator("#review-save").is_enabled()
        page.locator("#review-save").click()
        page.wait_for_selector("#review-score")
    page.goto(f"{live_server_url}/admin/evaluation/annotationqueue/{queue.pk}/alignment/")
    figures = page.locator("#alignment-figures").inner_text()
    assert "Cohen's κ 1.000 (95% CI —: undefined for these labels)" in figures
    assert " to )" not in figures
    page.screenshot(path=f"{SHOTS}/annotation-alignment-undefined-kappa.png", full_page=True)


def test_a_thumbs_down_turn_is_reviewed_and_its_correction_becomes_an_example(
    live_server_url, desktop_page, turns
):
    """Issue 45: the queue from thumbs-down chat turns, in the browser — the
    turn's question, answer and the user's comment on the review page, a
    corrected answer typed and labelled with key 3, then the queue page's
    button adds it to the dataset."""
    queue = create_turn_queue(name="bad answers", dataset_name="chat-gold")
    staff("ann")
    page = desktop_page
    admin_log_in(page, live_server_url, "ann", "pw-ann-123")
    page.goto(f"{live_server_url}/admin/evaluation/annotationqueue/{queue.pk}/review/?item=1")
    assert page.locator("#review-question").inner_text() == "What is the capital of France?"
    assert "wrong city" in page.locator("#review-feedback").inner_text()
    assert page.locator("#review-gold").count() == 0
    corrected = page.locator('input[name="corrected_answer"]')
    corrected.fill("Paris")
    corrected.evaluate("element => element.blur()")  # keys typed into it are text, not shortcuts
    page.screenshot(path=f"{SHOTS}/annotation-turn-review.png", full_page=True)
    page.locator("body").press("3")  # incorrect, saved with the correction
    page.wait_for_function("document.querySelector('#review-progress')?.innerText === '1 of 2 labelled'")
    assert HumanLabel.objects.get().corrected_answer == "Paris"
    page.goto(f"{live_server_url}/admin/evaluation/annotationqueue/{queue.pk}/change/")
    page.locator("#turn-corrections").click()
    page.wait_for_selector(".messagelist")
    assert f"version 1 — 1 added (turn-{turns['lyon'].pk})" in page.locator(".messagelist").inner_text()
    page.screenshot(path=f"{SHOTS}/annotation-turn-queue.png", full_page=True)
    [example] = examples_at(Dataset.objects.get(name="chat-gold"))
    assert (example.question, example.answer) == ("What is the capital of France?", "Paris")

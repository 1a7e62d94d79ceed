"""A dataset's versions, an example's history and the turn list's "Add to
dataset…" form in headless Chromium against a live daphne (the fixtures of
``tests/test_browser.py`` and ``tests/evaluation/admin/test_report_browser.py``).
Screenshots go to ``/tmp/screens`` (or ``AGENTLAB_SCREENSHOTS``)."""

from __future__ import annotations

import os

import pytest

from agentlab.agent.providers.scripted import final
from evaluation.datasets.services import dataset_import
from evaluation.datasets.spec import ExampleSpec
from evaluation.datasets.versions import dataset_change, examples_at
from evaluation.models import Dataset, Example
from tests.evaluation.admin.test_report_browser import SHOTS, admin_log_in, desktop_page  # noqa: F401 - the page fixture
from tests.test_browser import CHROMIUM, live_server_url  # noqa: F401 - the live daphne fixture
from tests.turns.test_admin import drive
from turns.models import Turn
from turns.services import turn_create

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]


@pytest.fixture
def curated(django_user_model):
    """Dataset ``capitals`` at version 2 (Australia's gold corrected), a staff
    user, and a chat turn of that user answered "Ottawa"."""
    boss = django_user_model.objects.create_user("boss", password="pw-boss-123", is_staff=True)
    specs = [
        ExampleSpec(external_id="fr", question="Capital of France?", answer="Paris", task_type="qa"),
        ExampleSpec(external_id="au", question="Capital of Australia?", answer="Sydney", task_type="qa"),
    ]
    dataset = dataset_import(name="capitals", examples=specs)
    fixed = ExampleSpec(external_id="au", question="Capital of Australia?", answer="Canberra", task_type="qa")
    dataset_change(dataset, upserts=[fixed], source="admin: edit of au — gold was wrong", user=boss)
    turn = turn_create(owner=boss, question="What is the capital of Canada?")
    drive(turn.pk, [final("Ottawa", evidence="stub", reasoning="stub", usage=(10, 2))])
    return dataset, Turn.objects.get(pk=turn.pk)


def test_dataset_versions_history_and_add_to_dataset_in_a_browser(curated, live_server_url, desktop_page):
    dataset, turn = curated
    page = desktop_page
    SHOTS.mkdir(parents=True, exist_ok=True)
    admin_log_in(page, live_server_url, "boss", "pw-boss-123")

    # the dataset page: its two versions, newest first, with what each changed
    page.goto(f"{live_server_url}/admin/evaluation/dataset/{dataset.pk}/change/")
    rows = page.locator(".field-versions_list tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).inner_text().split("\t")[0] == "version 2"
    assert "admin: edit of au — gold was wrong" in rows.nth(0).inner_text()
    assert "0 added, 1 changed, 0 removed; 2 in all" in rows.nth(0).inner_text()
    assert "changed: au." in rows.nth(0).inner_text()
    assert "added: fr, au." in rows.nth(1).inner_text()
    page.screenshot(path=str(SHOTS / "dataset-versions.png"), full_page=True)

    # version 1's examples, from the version's link
    page.locator(".field-versions_list a", has_text="version 1").click()
    page.wait_for_url("**/admin/evaluation/example/?*version=1*")
    assert page.locator("td.field-answer_short").all_inner_texts() == ["Paris", "Sydney"]

    # the corrected example's history: both contents, the current one in bold
    current = examples_at(dataset).get(external_id="au")
    page.goto(f"{live_server_url}/admin/evaluation/example/{current.pk}/change/")
    history = page.locator(".field-history_table tbody tr")
    assert [history.nth(i).inner_text().split("\t")[:3] for i in range(2)] == [
        ["1", "Capital of Australia?", "Sydney"],
        ["2–latest", "Capital of Australia?", "Canberra"],
    ]
    assert page.locator(".field-history_table strong").inner_text() == "2–latest"
    page.screenshot(path=str(SHOTS / "example-history.png"), full_page=True)

    # the turn list's "Add to dataset…": the form shows the turn's answer as a draft gold
    page.goto(f"{live_server_url}/admin/turns/turn/")
    page.check(f"input[name=_selected_action][value='{turn.pk}']")
    page.select_option("select[name=action]", "add_to_dataset")
    page.click("button[name=index]")
    page.wait_for_selector("#add-to-dataset")
    assert "What is the capital of Canada?" in page.locator("#add-to-dataset").inner_text()
    assert page.input_value("textarea[name='gold-0-answer']") == "Ottawa"
    page.select_option("select[name=dataset]", "capitals")
    page.select_option("select[name=task_type]", "qa")
    page.screenshot(path=str(SHOTS / "add-to-dataset.png"), full_page=True)
    page.click("#add-to-dataset input[type=submit]")
    page.wait_for_selector(".messagelist")
    assert "version 3" in page.locator(".messagelist").inner_text()

    added = Example.objects.get(dataset=dataset, external_id=f"turn-{turn.pk}")
    assert (added.question, added.answer, added.valid_from) == ("What is the capital of Canada?", "Ottawa", 3)
    assert added.metadata["source_turn"] == turn.pk
    assert Dataset.objects.get(pk=dataset.pk).version == 3
    assert page.js_errors == []
    assert all(url.startswith(live_server_url) for url in page.al_requests)

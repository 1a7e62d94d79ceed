"""The admin site as a whole (``config/admin.py``, issue 49): it says
AgentLab, leaves django-celery-beat's models (written by AgentLab, never to
be edited) off the index while their pages stay reachable, and lists people
apart from the per-run system users."""

from __future__ import annotations

import os

import pytest
from django.urls import reverse

from evaluation.models import Dataset
from evaluation.run.lifecycle import run_start
from tests.evaluation.admin.test_report_browser import admin_log_in, desktop_page  # noqa: F401 - a fixture
from tests.test_browser import CHROMIUM, live_server_url  # noqa: F401 - the live daphne fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, django_user_model):
    boss = django_user_model.objects.create_superuser("boss", password="pw-boss-123")
    client.force_login(boss)
    return client


def test_the_index_says_agentlab_and_leaves_beat_s_models_out(staff_client):
    body = staff_client.get(reverse("admin:index")).content.decode()
    assert "<title>AgentLab | AgentLab admin</title>" in body
    assert "AgentLab administration" in body and "Django administration" not in body
    assert "Periodic tasks" not in body and "Crontabs" not in body and "Intervals" not in body
    assert "Annotation queues" in body  # AgentLab's own models stay
    # the schedule form's "+" still reaches beat's crontab and interval pages
    assert staff_client.get(reverse("admin:django_celery_beat_crontabschedule_add")).status_code == 200
    assert staff_client.get(reverse("admin:django_celery_beat_intervalschedule_add")).status_code == 200


def test_the_user_list_shows_people_and_keeps_run_system_users_apart(staff_client, django_user_model):
    django_user_model.objects.create_user("ann", password="pw-ann-123")
    run, _ = run_start(run_id="nightly", dataset=Dataset.objects.create(name="d"), config={})
    system = run.system_user.username
    users = reverse("admin:auth_user_changelist")
    people = staff_client.get(users).content.decode()
    assert ">ann</a>" in people and ">boss</a>" in people and system not in people
    both = staff_client.get(users, {"account": "all"}).content.decode()
    assert system in both and "run system user" in both and ">ann</a>" in both
    only = staff_client.get(users, {"account": "system"}).content.decode()
    assert system in only and ">ann</a>" not in only


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)")
def test_the_admin_index_in_a_browser(live_server_url, desktop_page, django_user_model):
    django_user_model.objects.create_superuser("boss", password="pw-boss-123")
    page = desktop_page
    admin_log_in(page, live_server_url, "boss", "pw-boss-123")
    assert page.title() == "AgentLab | AgentLab admin"
    assert page.locator("#site-name").inner_text() == "AgentLab administration"
    apps = [a.lower() for a in page.locator("#content-main .module caption").all_inner_texts()]
    assert "periodic tasks" not in apps and not any("celery" in a for a in apps)
    assert {"evaluation", "turns"} <= set(apps)
    assert page.js_errors == []
    page.screenshot(path="/tmp/admin-index.png", full_page=True)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)")
def test_the_runs_list_fits_1280_pixels(live_server_url, desktop_page, django_user_model):
    from tests.evaluation.annotation.annotation_support import make_dataset, make_run

    dataset = make_dataset("arc-challenge-test-100", n=3)
    for run_id in ("nightly-2026-12-07-smollm2-review-off", "nightly-2026-12-08-smollm2-review-on"):
        run = make_run(dataset, run_id, right={0})
        run.config = {"model": "SmolLM2-135M-Instruct.Q4_1", "provider": "local"}
        run.metrics = {"accuracy": 1 / 3, "correct": 1, "scored": 3, "total": 3}
        run.save(update_fields=["config", "metrics"])
    django_user_model.objects.create_superuser("boss", password="pw-boss-123")
    page = desktop_page
    page.set_viewport_size({"width": 1280, "height": 900})
    admin_log_in(page, live_server_url, "boss", "pw-boss-123")
    page.goto(f"{live_server_url}/admin/evaluation/run/")
    assert page.locator("#result_list tbody tr").count() == 2
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    # every column in sight: the results box does not scroll sideways
    box = page.evaluate(
        "(() => { const r = document.querySelector('.results'); return [r.scrollWidth, r.clientWidth]; })()"
    )
    assert box[0] <= box[1], box
    headers = page.locator("#result_list thead th").all_inner_texts()
    assert [h.strip().lower() for h in headers][-2:] == ["started", "duration"]
    assert "arc-challenge-test-100@1" in page.locator("#result_list").inner_text()
    page.screenshot(path="/tmp/admin-runs-1280.png", full_page=True)

"""The admin's turn page in headless Chromium (issue 49): what the model saw
— each LLM call's messages, tools and reply — above the event log read as a
tree of steps. Screenshots go to ``/tmp/turn-page-requests.png`` (and
``/tmp/admin-index.png`` from ``tests/config/test_admin_site.py``).

The live daphne comes from ``tests/test_browser.py``, the browser page from
``tests/evaluation/admin/test_report_browser.py``; the turn is driven by the real
driver with a scripted LLM (``tests/turns/test_llm_calls.py``)."""

from __future__ import annotations

import os

import pytest

from tests.evaluation.admin.test_report_browser import admin_log_in, desktop_page  # noqa: F401 - a fixture
from tests.test_browser import CHROMIUM, live_server_url  # noqa: F401 - the live daphne fixture
from tests.turns.test_llm_calls import native_turn

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]


@pytest.fixture
def driven(django_user_model):
    """A turn driven before the browser starts (playwright's loop would refuse the driver's)."""
    owner = django_user_model.objects.create_user("owner", password="pw-owner-123")
    return native_turn(owner)


def test_the_turn_page_shows_each_call_s_request_and_the_steps(
    live_server_url, driven, desktop_page, django_user_model
):
    turn, provider = driven
    django_user_model.objects.create_user("boss", password="pw-boss-123", is_staff=True)
    page = desktop_page
    admin_log_in(page, live_server_url, "boss", "pw-boss-123")
    page.goto(f"{live_server_url}/admin/turns/turn/{turn.pk}/change/")
    calls = page.locator("#llm-calls details.al-call")
    assert calls.count() == 2
    # the last call is open: its four messages as the provider got them, then the reply
    last = calls.nth(1)
    assert last.get_attribute("open") is not None and calls.nth(0).get_attribute("open") is None
    roles = last.locator(".al-msg .al-role").all_inner_texts()
    assert (
        [r.lower() for r in roles]
        == [m["role"] for m in provider.calls[1]]
        == [
            "system",
            "user",
            "assistant",
            "tool",
        ]
    )
    texts = last.locator(".al-msg > pre").all_inner_texts()
    assert texts[1:] == ["What is six times seven?", "Let me compute.", "42"]
    assert texts[0] == provider.calls[1][0]["content"]  # the system prompt, whole
    assert "calculator" in last.locator("p", has_text="Tools offered").inner_text()
    assert '"answer": "42"' in last.locator(".al-reply").inner_text()
    # the event log: steps as headings, each event folded with its JSON indented
    steps = page.locator("#events .al-step > h3").all_inner_texts()
    assert steps == ["Attempt 1 · step 1", "Attempt 1 · step 2"]
    first_event = page.locator("#events .al-event").first
    first_event.locator("summary").click()
    assert first_event.locator("pre").inner_text().startswith("{\n  ")
    assert page.js_errors == []
    calls.nth(0).locator("> summary").click()
    page.screenshot(path="/tmp/turn-page-requests.png", full_page=True)

"""The chat page in headless Chromium (issue 49): Enter sends the first
question as it does a follow-up, a turn shows a working sign from its first
second until it ends, and the question is shown once (the heading of a new
conversation is not its question again). The live daphne, its stub LLM
(1.5 s a step) and the phone-sized page come from ``tests/test_browser.py``."""

from __future__ import annotations

import os

import pytest

from tests.test_browser import CHROMIUM, browser_page, live_server_url, log_in  # noqa: F401 - fixtures
from turns.models import Turn

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]


def test_enter_sends_the_first_question_and_the_turn_works_visibly(
    live_server_url, browser_page, django_user_model
):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("carol", password="pw-carol-123")
    page = browser_page
    log_in(page, live_server_url, "carol", "pw-carol-123")
    page.fill("textarea[name=question]", "What is 6*7?")
    page.locator("textarea[name=question]").press("Enter")  # no click on "Start conversation"
    page.wait_for_url("**/c/*/")
    turn = Turn.objects.get()
    assert turn.question == "What is 6*7?"
    card = page.locator(f"#turn-{turn.pk}")
    # within its first second, before any answer: the working sign
    expect(card.locator(".badge.working")).to_be_visible(timeout=1000)
    assert card.locator(".outcome").inner_text() == ""
    # the question once on the page: the heading names the conversation, not the question
    assert page.locator("h1").inner_text().startswith("Conversation of ")
    assert page.get_by_text("What is 6*7?", exact=True).count() == 1
    expect(card.locator(".outcome")).to_contain_text("42", timeout=20000)
    expect(card.locator(".badge.working")).to_be_hidden()
    # Shift+Enter on the list page is a new line, not a send
    page.goto(live_server_url + "/")
    box = page.locator("textarea[name=question]")
    box.fill("first line")
    box.press("Shift+Enter")
    assert page.url == live_server_url + "/" and box.input_value() == "first line\n"
    assert page.js_errors == []

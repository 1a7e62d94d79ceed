"""Feedback on the chat page in headless Chromium (tests/test_browser.py's
daphne, stub LLM and Chromium): a user clicks thumbs down under an answer,
adds a comment, and staff see it in the admin's turn list and turn page."""

from __future__ import annotations

import pytest

from tests.test_browser import SCREENS, browser_page, live_server_url, no_horizontal_scroll  # noqa: F401 - fixtures
from turns.models import Turn, TurnFeedback

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _log_in(page, url: str, username: str, password: str) -> None:
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("[type=submit]")
    page.wait_for_load_state()


def test_thumbs_down_with_a_comment_is_stored_and_shown_in_the_admin(
    live_server_url,
    browser_page,
    django_user_model,
):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("carol", password="pw-carol-123")
    django_user_model.objects.create_superuser("root", "root@example.com", "pw-root-123")
    SCREENS.mkdir(parents=True, exist_ok=True)
    page = browser_page

    page.goto(live_server_url + "/")
    _log_in(page, live_server_url, "carol", "pw-carol-123")
    page.fill("textarea[name=question]", "What is 6*7?")
    page.click("text=Start conversation")
    page.wait_for_url("**/c/*/")
    turn = Turn.objects.get()
    card = page.locator(f"#turn-{turn.pk}")
    expect(card.locator(".answer .text")).to_have_text("42", timeout=20000)

    bar = card.locator(".feedback")
    expect(bar.get_by_label("Comment on this answer")).to_be_hidden()
    bar.get_by_role("button", name="Bad answer").click()
    expect(bar.locator(".status")).to_have_text("Thanks: rated bad.")
    expect(bar.get_by_role("button", name="Bad answer")).to_have_attribute("aria-pressed", "true")
    bar.get_by_label("Comment on this answer").fill("It should show the working.")
    bar.get_by_role("button", name="Send comment").click()
    expect(bar.locator(".status")).to_have_text("Thanks: rated bad, with your comment.")
    assert no_horizontal_scroll(page)
    page.screenshot(path=str(SCREENS / "feedback-thumbs-down.png"), full_page=True)

    rows = list(
        TurnFeedback.objects.filter(turn=turn).order_by("pk").values_list("rating", "comment", "current")
    )
    assert rows == [("down", "", False), ("down", "It should show the working.", True)]

    # a reload shows the rating given and the comment
    page.reload()
    bar = page.locator(f"#turn-{turn.pk} .feedback")
    expect(bar.get_by_role("button", name="Bad answer")).to_have_attribute(
        "aria-pressed", "true", timeout=20000
    )
    expect(bar.get_by_label("Comment on this answer")).to_have_value("It should show the working.")

    # staff: the turn list filtered by thumbs down, then the turn's page
    page.context.clear_cookies()
    page.goto(live_server_url + "/admin/turns/turn/?feedback=down")
    _log_in(page, live_server_url, "root", "pw-root-123")
    expect(page.locator("#result_list")).to_contain_text("What is 6*7?")
    expect(page.locator("#result_list .field-feedback_column")).to_have_text("up 0 · down 1")
    page.goto(f"{live_server_url}/admin/turns/turn/{turn.pk}/change/")
    expect(page.locator(".field-feedback_display")).to_contain_text("It should show the working.")
    expect(page.locator(".field-feedback_display")).to_contain_text("replaced")
    page.locator(".field-feedback_display").screenshot(path=str(SCREENS / "feedback-admin.png"))
    assert page.js_errors == []

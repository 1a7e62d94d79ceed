"""The chat pages in headless Chromium against a live daphne (issue 5).

daphne runs in a subprocess on the test database with the inline executor
(no Celery) and a stub OpenAI-compatible LLM on loopback; Chromium is Debian's
``/usr/bin/chromium`` driven by playwright-python (no browser download).
Screenshots go to ``/tmp/screens/``; with ``AGENTLAB_DOCS_SCREENSHOTS=1``
those of the streamed answer go to ``docs/screenshots/`` instead (the ones
committed there).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from agentlab.testing.stub_llm import (
    StubLLMServer,
    final_answer_reply,
    last_user_text,
    text_reply,
    tool_call_reply,
)
from tests.daphne_support import daphne_running
from turns.models import Turn

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
SCREENS = Path("/tmp/screens")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]


REVIEW = '{"verdict": "accept", "note": "the calculator agrees", "retry_instruction": null}'
DOCS_SCREENS = (
    ROOT / "docs" / "screenshots" if os.environ.get("AGENTLAB_DOCS_SCREENSHOTS") == "1" else SCREENS
)
#: A Markdown answer with HTML that must stay text: a script, an onerror handler.
MARKDOWN_ANSWER = (
    "The count is **done**. Here is how:\n\n"
    "1. I asked for your approval\n2. I counted `x` once\n\n"
    "| tool | result |\n|---|---|\n| count | counted x |\n\n"
    "```python\nprint('counted')\n```\n\n"
    "Raw HTML stays text: <script>window.__xss = 1</script> "
    '<img src="nope" onerror="window.__xss = 2"> and that is all, written a few letters at a time.'
)


def stub_handler(body):
    """First call: a calculator tool call; once a tool result is in the
    messages: the final answer; a review (a call without tools): accept.
    Questions with "slow" wait 30 s (to be cancelled); with "truncate" the
    answer is cut by the token limit; "double it" doubles the number the
    assistant last said in the conversation's history (without one it cannot
    know what "it" is); the others take 1.5 s per step, so a turn is visibly
    live. The question is the last user message: a conversation's earlier
    questions come before it."""
    messages = body.get("messages") or []
    question = last_user_text(body)
    delay = 30.0 if "slow" in question else 1.5
    if "no usage" in question:  # a server that reports no tokens (llama.cpp's, streaming)
        if not body.get("tools"):
            return text_reply(REVIEW, usage=None, delay=delay)
        return final_answer_reply("42", "", "", usage=None, delay=delay)
    if not body.get("tools"):
        return text_reply(REVIEW, usage=(12, 6), delay=delay)
    if "approve" in question:  # a tool that needs approval, then a long streamed Markdown answer
        if any(m.get("role") == "tool" for m in messages):
            reply = final_answer_reply(MARKDOWN_ANSWER, "the count tool", "approved, then counted")
            reply.stream_chars, reply.stream_delay = 3, 0.05
            return reply
        return tool_call_reply(
            "count", {"label": "x"}, content="I need to count x; that needs your approval."
        )
    if question == "double it":
        said = [m["content"] for m in messages if m.get("role") == "assistant" and m.get("content")]
        numbers = re.findall(r"-?\d+", said[-1]) if said else []
        if not numbers:
            return final_answer_reply("I do not know what to double.", "", "", delay=delay)
        doubled = str(2 * int(numbers[-1]))
        return final_answer_reply(
            doubled, f"you were told {numbers[-1]} before", f"2 × {numbers[-1]}", delay=delay
        )
    if "truncate" in question:
        return text_reply("The answer is a long story that", finish_reason="length", delay=delay)
    if any(m.get("role") == "tool" for m in messages):
        return final_answer_reply(
            "42", "calculator: 6*7 = 42", "The calculator multiplied 6 by 7.", delay=delay
        )
    return tool_call_reply(
        "calculator", {"expression": "6*7"}, content="I will multiply with the calculator.", delay=delay
    )


@pytest.fixture
def live_server_url(transactional_db):
    """daphne on the test database, in a subprocess."""
    stub = StubLLMServer(stub_handler).start()
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "REDIS_URL", "DATABASE_URL")}
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.postgresql":
        env["DATABASE_URL"] = (
            f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}"
        )
    else:
        env["AGENTLAB_SQLITE_PATH"] = str(db["NAME"])
    env.update(
        {
            "AGENTLAB_LLM_BASE_URL": stub.base_url,
            "AGENTLAB_LLM_API_KEY": "stub",
            "AGENTLAB_MODEL": "stub-model",
            "DEBUG": "1",
            "HEARTBEAT_S": "1",
            "AGENTLAB_PLUGINS": "count",
            "AGENTLAB_TEST_COUNT_APPROVAL": "1",
            "AGENTLAB_TEST_COUNT_FILE": "/tmp/h14-browser-count.txt",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
    )
    try:
        with daphne_running(env, Path("/tmp/h5-daphne.log")) as base_url:
            yield base_url
    finally:
        stub.stop()


@pytest.fixture
def browser_page(monkeypatch):
    from playwright.sync_api import sync_playwright

    # playwright's sync API keeps an event loop running in this thread; the
    # test's own ORM reads are still plain blocking calls (Django's and
    # playwright's documented way to combine them).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        # a phone-sized window: the pages must be readable on a narrow screen
        context = browser.new_context(viewport={"width": 430, "height": 900}, device_scale_factor=2)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda msg: errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None,
        )
        page.js_errors = errors  # type: ignore[attr-defined]
        try:
            yield page
        finally:
            context.close()
            browser.close()


def no_horizontal_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1")


def test_ask_stream_reload_replay_reconnect_and_cancel(live_server_url, browser_page, django_user_model):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("alice", password="pw-alice-123")
    SCREENS.mkdir(parents=True, exist_ok=True)
    page = browser_page

    # log in with Django's auth views
    log_in(page, live_server_url, "alice", "pw-alice-123")
    expect(page.get_by_text("No conversations yet.")).to_be_visible()

    # ask: the conversation page streams the turn
    page.fill("textarea[name=question]", "What is 6*7?")
    page.click("text=Start conversation")
    page.wait_for_url("**/c/*/")
    turn = Turn.objects.get()
    card = page.locator(f"#turn-{turn.pk}")
    expect(card.locator("details.tool summary")).to_contain_text("calculator", timeout=15000)
    expect(card.locator(".badge.status")).to_have_text("running")
    expect(card.locator(".thinking")).to_contain_text("calculator")
    page.screenshot(path=str(SCREENS / "turn-streaming.png"), full_page=True)
    assert Turn.objects.get().status == "running"

    # reload mid-turn: the page replays the log and the stream continues
    reloaded_at = timezone.now()
    page.reload()
    card = page.locator(f"#turn-{turn.pk}")
    expect(card.locator(".answer .text")).to_have_text("42", timeout=15000)
    turn.refresh_from_db()
    assert turn.status == "succeeded" and turn.finished_at is not None and turn.finished_at > reloaded_at
    expect(card.locator("details.tool")).to_have_count(1)  # replay + live, no step twice
    expect(card.locator(".answer .evidence")).to_have_text("calculator: 6*7 = 42")
    expect(card.locator(".answer .reasoning")).to_contain_text("multiplied")
    # two agent calls (10 in / 5 out each) and the review (12 / 6), labelled and summed
    expect(card.locator(".meta")).to_contain_text("tokens: 32 in / 16 out, 3 calls", timeout=15000)
    expect(card.locator(".meta")).to_contain_text("agent: 20 in / 10 out, 2 calls")
    expect(card.locator(".meta")).to_contain_text("review: 12 in / 6 out, 1 call")
    expect(card.locator(".steps")).to_contain_text("Review: accepted — the calculator agrees")
    expect(card.locator(".badge.status")).to_have_text("succeeded")
    expect(card.locator("details.tool")).not_to_have_attribute("open", "")  # collapsed by default
    card.locator("details.tool summary").click()
    expect(card.locator("details.tool pre.result")).to_contain_text("42")
    assert no_horizontal_scroll(page)
    page.screenshot(path=str(SCREENS / "turn-finished-tools-open.png"), full_page=True)

    # a second, slow turn: a dropped socket reconnects visibly, then cancel it
    page.fill("#question", "slow: what is 6*7 again?")
    page.click("#ask button[type=submit]")
    expect(page.locator(".turn")).to_have_count(2)
    second = Turn.objects.exclude(pk=turn.pk).get()
    card2 = page.locator(f"#turn-{second.pk}")
    expect(card2.locator(".badge.status")).to_have_text("running", timeout=15000)
    page.evaluate(f"window.agentlabChat.views[{second.pk}].ws.close(4000)")
    expect(page.locator("#connection")).to_contain_text("Reconnecting")
    expect(page.locator("#connection")).to_be_hidden(timeout=10000)  # back after the next frame
    card2.locator("button[data-action=cancel]").click()
    expect(card2.locator(".badge.status")).to_have_text("cancelled", timeout=15000)
    expect(card2.locator("button[data-action=retry]")).to_be_visible()
    second.refresh_from_db()
    assert (second.status, second.stop_reason) == ("cancelled", "cancelled")
    assert [e.type for e in second.events.order_by("seq")][-1] == "turn.cancelled"

    assert page.js_errors == []


def test_a_truncated_answer_shows_as_truncated_and_usage_is_the_same_in_chat_api_and_admin(
    live_server_url, browser_page, django_user_model
):
    from playwright.sync_api import expect

    user = django_user_model.objects.create_user(
        "bob", password="pw-bob-123", is_staff=True, is_superuser=True
    )
    SCREENS.mkdir(parents=True, exist_ok=True)
    page = browser_page
    log_in(page, live_server_url, "bob", "pw-bob-123")

    # a reviewed turn: the chat page, the API and the admin show the same usage
    page.fill("textarea[name=question]", "What is 6*7?")
    page.click("text=Start conversation")
    page.wait_for_url("**/c/*/")
    turn = Turn.objects.get()
    card = page.locator(f"#turn-{turn.pk}")
    expect(card.locator(".steps")).to_contain_text("Review: accepted", timeout=20000)
    expect(card.locator(".badge.status")).to_have_text("succeeded", timeout=20000)
    meta = card.locator(".meta").inner_text()
    api = Client()
    api.force_login(user)
    usage = api.get(f"/api/turns/{turn.pk}").json()["usage"]
    agent, review = usage["by_role"]["agent"], usage["by_role"]["review"]
    shown = (
        f"tokens: {usage['input_tokens']} in / {usage['output_tokens']} out, {usage['calls']} calls",
        f"agent: {agent['input_tokens']} in / {agent['output_tokens']} out, {agent['calls']} calls",
        f"review: {review['input_tokens']} in / {review['output_tokens']} out, {review['calls']} call",
    )
    assert shown == (
        "tokens: 32 in / 16 out, 3 calls",
        "agent: 20 in / 10 out, 2 calls",
        "review: 12 in / 6 out, 1 call",
    )
    assert all(text in meta for text in shown), meta
    admin_page = api.get(f"/admin/turns/turn/{turn.pk}/change/").content.decode()
    for row in (("all calls", 3, 32, 16), ("agent calls", 2, 20, 10), ("review calls", 1, 12, 6)):
        cells = "".join(f"<td>{v}</td>" for v in (row[0], row[1], 0, row[2], row[3]))
        assert cells in admin_page, row

    # an answer cut by the output-token limit: shown as truncated, not as an answer
    page.fill("#question", "truncate: tell me a long story")
    page.click("#ask button[type=submit]")
    expect(page.locator(".turn")).to_have_count(2)
    cut = Turn.objects.exclude(pk=turn.pk).get()
    card2 = page.locator(f"#turn-{cut.pk}")
    expect(card2.locator(".badge.status")).to_have_text("failed", timeout=20000)
    truncated = card2.locator(".failure.truncated")
    expect(truncated).to_contain_text("Truncated")
    expect(truncated).to_contain_text("cut off by the output-token limit")
    expect(truncated.locator("pre.partial")).to_have_text("The answer is a long story that")
    expect(card2.locator(".answer")).to_have_count(0)
    expect(card2.locator("button[data-action=retry]")).to_be_visible()
    page.screenshot(path=str(SCREENS / "turn-truncated.png"), full_page=True)
    cut.refresh_from_db()
    assert (cut.status, cut.stop_reason) == ("failed", "length")
    assert page.js_errors == []


def test_tokens_no_call_reported_read_unknown_not_zero(live_server_url, browser_page, django_user_model):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("dave", password="pw-dave-123")
    SCREENS.mkdir(parents=True, exist_ok=True)
    page = browser_page
    log_in(page, live_server_url, "dave", "pw-dave-123")
    page.fill("textarea[name=question]", "no usage: what is 6*7?")
    page.click("text=Start conversation")
    page.wait_for_url("**/c/*/")
    turn = Turn.objects.get()
    card = page.locator(f"#turn-{turn.pk}")
    expect(card.locator(".steps")).to_contain_text("Review: accepted", timeout=20000)
    expect(card.locator(".meta")).to_contain_text("tokens: unknown, 2 calls", timeout=20000)
    expect(card.locator(".meta")).to_contain_text("agent: unknown, 1 call")
    expect(card.locator(".meta")).to_contain_text("review: unknown, 1 call")
    assert "0 in / 0 out" not in card.locator(".meta").inner_text()
    page.screenshot(path=str(SCREENS / "turn-unknown-tokens.png"), full_page=True)
    turn.refresh_from_db()
    assert (turn.usage["calls"], turn.usage["unknown_calls"]) == (2, 2)
    assert page.js_errors == []


def log_in(page, base_url: str, username: str, password: str) -> None:
    """Log in through Django's login form, starting from the chat page."""
    page.goto(base_url + "/")
    assert "/accounts/login/" in page.url, f"the chat page did not send to the login form: {page.url}"
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(base_url + "/")


def test_text_grows_while_it_streams_approval_from_the_page_and_markdown_without_html(
    live_server_url, browser_page, django_user_model
):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("carol", password="pw-carol-123")
    SCREENS.mkdir(parents=True, exist_ok=True)
    DOCS_SCREENS.mkdir(parents=True, exist_ok=True)
    page = browser_page
    log_in(page, live_server_url, "carol", "pw-carol-123")

    page.fill("textarea[name=question]", "approve: count x and tell me how")
    page.click("text=Start conversation")
    page.wait_for_url("**/c/*/")
    turn = Turn.objects.get()
    card = page.locator(f"#turn-{turn.pk}")

    # the tool call that needs approval, with its buttons; Ask is off meanwhile
    approval = card.locator(".approval")
    expect(approval).to_contain_text("count", timeout=20000)
    expect(card.locator(".badge.status")).to_have_text("waiting")
    expect(page.locator("#ask button[type=submit]")).to_be_disabled()
    expect(card.locator("button[data-action=retry]")).to_be_hidden()
    page.screenshot(path=str(DOCS_SCREENS / "chat-approval.png"), scale="css")
    approval.get_by_role("button", name="Approve").click()

    # the answer grows as it streams: more text each time we look, never JSON
    live = card.locator(".streaming")
    expect(live).to_be_visible(timeout=20000)
    expect(card.locator(".badge.status")).to_have_text("running")
    lengths = []
    for _ in range(4):
        lengths.append(len(live.inner_text()))
        page.wait_for_timeout(400)
    assert lengths == sorted(lengths) and lengths[-1] > lengths[0] > 0, lengths
    assert '"answer"' not in live.inner_text() and "{" not in live.inner_text()
    page.screenshot(path=str(DOCS_SCREENS / "chat-streaming.png"), scale="css")

    # the answer, rendered once as Markdown; HTML in it is text and runs nothing
    answer = card.locator(".answer .text")
    expect(answer.locator("strong")).to_have_text("done", timeout=30000)
    expect(answer.locator("ol li")).to_have_count(2)
    expect(answer.locator("table td").first).to_have_text("count")
    expect(answer.locator("pre code")).to_contain_text("print('counted')")
    expect(answer).to_contain_text("<script>window.__xss = 1</script>")
    expect(answer).to_contain_text('onerror="window.__xss = 2"')
    assert answer.locator("script, img").count() == 0
    assert page.evaluate("window.__xss === undefined")
    expect(card.locator(".streaming, .draft")).to_have_count(0)
    expect(card.locator(".steps")).to_contain_text("Approval")
    expect(card.locator(".steps")).to_contain_text("approved by carol")
    assert card.locator(".steps").inner_text().count("The count is") == 0  # the answer is shown once
    expect(page.locator("#ask button[type=submit]")).to_be_enabled()
    assert no_horizontal_scroll(page)
    page.screenshot(path=str(DOCS_SCREENS / "chat-markdown-answer.png"), full_page=True, scale="css")

    # keyboard: Shift+Enter is a new line, Enter sends
    page.click("#question")
    page.keyboard.type("line one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("slow: line two")
    assert page.input_value("#question") == "line one\nslow: line two"
    page.keyboard.press("Enter")
    expect(page.locator(".turn")).to_have_count(2, timeout=10000)
    expect(page.locator("#question")).to_have_value("")
    second = Turn.objects.exclude(pk=turn.pk).get()
    assert second.question == "line one\nslow: line two"
    page.locator(f"#turn-{second.pk} button[data-action=cancel]").click()
    expect(page.locator(f"#turn-{second.pk} .badge.status")).to_have_text("cancelled", timeout=15000)
    assert page.js_errors == []


def test_a_follow_up_is_answered_from_the_history_and_the_turn_page_shows_it(
    live_server_url, browser_page, django_user_model
):
    """Issue 41: "double it" only makes sense after "What is 6*7?"; the stub
    answers it from the history the driver gives the second turn, the chat
    page says what the turn was given and the admin's turn page shows it."""
    from playwright.sync_api import expect

    django_user_model.objects.create_user("erin", password="pw-erin-123", is_staff=True, is_superuser=True)
    SCREENS.mkdir(parents=True, exist_ok=True)
    page = browser_page
    log_in(page, live_server_url, "erin", "pw-erin-123")
    page.fill("textarea[name=question]", "What is 6*7?")
    page.click("text=Start conversation")
    page.wait_for_url("**/c/*/")
    first = Turn.objects.get()
    expect(page.locator(f"#turn-{first.pk} .answer .text")).to_have_text("42", timeout=20000)
    expect(page.locator(f"#turn-{first.pk} .steps .history")).to_have_count(0)  # nothing before it
    expect(page.locator("#ask button[type=submit]")).to_be_enabled(timeout=20000)

    page.fill("#question", "double it")
    page.click("#ask button[type=submit]")
    expect(page.locator(".turn")).to_have_count(2)
    second = Turn.objects.exclude(pk=first.pk).get()
    card = page.locator(f"#turn-{second.pk}")
    expect(card.locator(".answer .text")).to_have_text("84", timeout=20000)
    expect(card.locator(".answer .evidence")).to_have_text("you were told 42 before")
    note = card.locator(".steps .history")
    expect(note).to_contain_text("History: 1 earlier turn")
    assert "tokens" in note.inner_text()
    page.screenshot(path=str(SCREENS / "chat-history-follow-up.png"), full_page=True)

    # the turn page: what the turn was given, and the request that held it
    page.goto(f"{live_server_url}/admin/turns/turn/{second.pk}/change/")
    history = page.locator(".al-history")
    expect(history).to_contain_text(f"Mode answers: earlier turns #{first.pk}")
    page.locator("summary", has_text="messages given before the question").click()
    messages = page.locator(".al-history-msg")
    assert messages.all_inner_texts() == ["user\nWhat is 6*7?", "assistant\n42"]
    first_call = page.locator("#llm-calls details.al-call").first
    roles = first_call.locator(".al-msg .al-role").all_inner_texts()
    assert [r.lower() for r in roles] == ["system", "user", "assistant", "user"]
    page.screenshot(path=str(SCREENS / "turn-page-history.png"), full_page=True)
    assert page.js_errors == []


def test_api_docs_render_their_operations_with_the_network_blocked(
    live_server_url, browser_page, django_user_model
):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("dave", password="pw-dave-123")
    page = browser_page
    outside: list[str] = []

    def only_this_server(route):
        if route.request.url.startswith(live_server_url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_server)
    log_in(page, live_server_url, "dave", "pw-dave-123")
    page.goto(live_server_url + "/api/docs")
    expect(page.locator(".opblock").first).to_be_visible(timeout=20000)
    assert page.locator(".opblock").count() > 10
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    assert outside == []

"""The side-by-side page in headless Chromium (issue 45): a staff user
reaches it from the chat pages' nav, asks one question of two variants —
the configured stub endpoint (a calculator call, then "42") and a second
stub at its own base URL (a streamed "41") — and watches both answers stream
in columns, each with its tool calls and usage; "Keep as example…" opens the
turn admin's "Add to dataset…" with that answer as the gold, which makes the
example. A screenshot goes to ``/tmp/screens/side-by-side.png``.

The live daphne and the first stub come from ``tests/test_browser.py``, the
wide browser page from ``tests/evaluation/admin/test_report_browser.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, text_reply
from evaluation.models import Dataset
from tests.evaluation.admin.test_report_browser import admin_log_in, desktop_page  # noqa: F401 - a fixture
from tests.test_browser import CHROMIUM, REVIEW, live_server_url  # noqa: F401 - the live daphne fixture
from turns.models import Turn

SCREENS = Path("/tmp/screens")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]


def second_endpoint(body):
    """The other variant's server: its answer streamed a few letters at a time; a review accepts."""
    if not body.get("tools"):
        return text_reply(REVIEW, usage=(7, 3))
    reply = final_answer_reply(
        "It is **41**, by a different count.", "counted on fingers", "a lively guess", usage=(20, 9)
    )
    reply.stream_chars, reply.stream_delay = 2, 0.05
    return reply


def test_two_variants_stream_side_by_side_and_one_answer_becomes_an_example(
    live_server_url, desktop_page, django_user_model
):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("lead", password="pw-lead-123", is_staff=True)
    SCREENS.mkdir(parents=True, exist_ok=True)
    page = desktop_page
    admin_log_in(page, live_server_url, "lead", "pw-lead-123")
    with StubLLMServer(second_endpoint) as other:
        page.goto(live_server_url + "/")
        page.click("nav >> text=Side by side")
        page.wait_for_url("**/side-by-side/")
        page.fill("textarea[name=question]", "What is 6*7?")
        page.fill(
            "textarea[name=variants]",
            '[[variant]]\nname = "configured"\ntemperature = 0.0\nsystem_prompt = "Use the calculator."\n\n'
            f'[[variant]]\nname = "elsewhere"\nmodel = "other-model"\nbase_url = "{other.base_url}"\n'
            "temperature = 0.9\n",
        )
        page.click("text=Ask every variant")
        page.wait_for_url("**/side-by-side/?turn=*")
        first, second = Turn.objects.order_by("pk")
        left, right = page.locator(f"#turn-{first.pk}"), page.locator(f"#turn-{second.pk}")
        expect(page.locator(".column .variant-name")).to_have_text(["configured", "elsewhere"])
        # both live at once: the left one calls its tool while the right one has answered or streams
        expect(left.locator("details.tool summary")).to_contain_text("calculator", timeout=15000)
        expect(right.locator(".answer .text")).to_contain_text("41", timeout=15000)
        page.screenshot(path=str(SCREENS / "side-by-side-streaming.png"), full_page=True)
        expect(left.locator(".answer .text")).to_have_text("42", timeout=15000)
        expect(left.locator(".meta")).to_contain_text("agent: 20 in / 10 out, 2 calls", timeout=15000)
        expect(right.locator(".meta")).to_contain_text("agent: 20 in / 9 out, 1 call", timeout=15000)
        expect(right.locator(".answer .text strong")).to_have_text("41")
        expect(right.locator("details.tool")).to_have_count(0)
        assert [r["model"] for r in other.requests if r.get("tools")] == ["other-model"]
    keep = page.locator(".column").nth(1).locator("form.keep")
    expect(keep).to_be_visible()
    # side by side, not one under the other: the same top, the second to the right of the first
    boxes = [page.locator(".column").nth(i).bounding_box() for i in (0, 1)]
    assert boxes[0] and boxes[1] and boxes[0]["y"] == boxes[1]["y"]
    assert boxes[1]["x"] >= boxes[0]["x"] + boxes[0]["width"]
    page.screenshot(path=str(SCREENS / "side-by-side.png"), full_page=True)
    assert page.js_errors == []

    # keep the right-hand answer: the turn admin's "Add to dataset…" opens with it as the gold
    with page.context.expect_page() as opened:
        keep.locator("button").click()
    admin = opened.value
    admin.wait_for_load_state()
    expect(admin.locator("textarea[name='gold-0-answer']")).to_have_value(
        "It is **41**, by a different count."
    )
    admin.fill("input[name=new_name]", "side-by-side-picks")
    admin.select_option("select[name=task_type]", "math")
    admin.click("input[type=submit][value='Add to the dataset']")
    admin.wait_for_url("**/admin/turns/turn/**")
    example = Dataset.objects.get(name="side-by-side-picks").examples.get()
    assert (example.question, example.answer) == ("What is 6*7?", "It is **41**, by a different count.")

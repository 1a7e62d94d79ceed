"""The turn admin: lists, filters, the turn page with its event log, and the
resume / cancel / retry actions, as a staff user with Django's test client.

Data is set up through services (``turn_create``, ``turn_interrupt``,
``turn_cancel``, ``event_append``) and real driver runs with a scripted LLM.
"""

from __future__ import annotations

import re
from typing import Any, cast

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.admin.models import LogEntry
from django.contrib.messages import get_messages
from django.urls import reverse

from agentlab.agent.providers.scripted import ScriptedProvider, final, tool_call
from agentlab.agent.providers.scripted import text as text_reply
from agentlab.agent.types import Completion, Usage
from common.db import DatabaseThreads
from turns.admin import EVENTS_PER_PAGE, TURNS_INLINE_LIMIT
from turns.driver import EVALUATION, EvaluationPolicy, drive_turn, turn_claim
from turns.events import NewEvent, event_append, event_append_many
from turns.models import Approval, Conversation, EventType, Turn, TurnAttempt
from turns.selectors import events_after
from turns.services import turn_cancel, turn_create, turn_interrupt

pytestmark = pytest.mark.django_db

TURN_LIST = reverse("admin:turns_turn_changelist")
CONVERSATION_LIST = reverse("admin:turns_conversation_changelist")
APPROVAL_LIST = reverse("admin:turns_approval_changelist")

# Pinned query counts (session + user + the page's own queries). A list page
# must not grow with its rows: see test_turn_list_queries_do_not_grow_with_rows.
TURN_LIST_QUERIES = 11
TURN_PAGE_QUERIES = 11  # four: datasets holding the question, online scores, feedback, LLM calls


# --- helpers ---------------------------------------------------------------------


class TestThreadDb:
    """Runs the driver's ORM calls on the test's own thread (asgiref's
    thread-sensitive executor), so they share the test's transaction —
    ``DatabaseThreads`` would open other connections that cannot see it."""

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)


def drive(turn_id: int, script: list[Any]) -> None:
    """Run the real driver over ``turn_id`` with a scripted LLM."""
    provider = ScriptedProvider(script)
    db = cast(DatabaseThreads, TestThreadDb())  # duck-typed: only .run is used
    async_to_sync(drive_turn)(turn_id, policy=EVALUATION, provider=provider, db=db)


def answered_turn(owner: Any, question: str = "What is 6*7?", **kwargs: Any) -> Turn:
    turn = turn_create(owner=owner, question=question, **kwargs)
    drive(
        turn.pk,
        [
            tool_call("calculator", {"expression": "6*7"}, content="Let me compute.", usage=(20, 8)),
            final("forty-two", evidence="calculator said 42", reasoning="six times seven", usage=(30, 6)),
        ],
    )
    turn.refresh_from_db()
    return turn


def failed_turn(owner: Any, question: str = "loop forever") -> Turn:
    turn = turn_create(owner=owner, question=question, max_steps=1)
    drive(turn.pk, [tool_call("calculator", {"expression": "1+1"}, usage=(5, 1))])
    turn.refresh_from_db()
    assert (turn.status, turn.stop_reason) == ("failed", "max_steps")
    return turn


def interrupted_turn(owner: Any, question: str = "cut off") -> Turn:
    turn = turn_create(owner=owner, question=question)
    turn_claim(turn_id=turn.pk, job_id="job-1")
    assert turn_interrupt(turn_id=turn.pk, reason="worker lost")
    turn.refresh_from_db()
    return turn


def waiting_turn(owner: Any) -> Turn:
    """A running turn whose tool call waits for a human (what the chat policy writes)."""
    turn = turn_create(owner=owner, question="delete the file?")
    turn_claim(turn_id=turn.pk)
    Approval.objects.create(turn=turn, tool_call={"name": "delete_file", "arguments": {"path": "/tmp/x"}})
    event_append(
        turn_id=turn.pk,
        type=EventType.APPROVAL_REQUESTED,
        data={"tool": "delete_file"},
        turn_fields={"status": "waiting"},
    )
    turn.refresh_from_db()
    return turn


def long_turn(owner: Any, events: int = 5000) -> Turn:
    """A turn with ``events`` events in its log (``turn.queued`` is seq 1)."""
    turn = turn_create(owner=owner, question="a very long turn")
    event_append_many(
        turn_id=turn.pk,
        events=[
            NewEvent(EventType.THINKING, {"attempt": 1, "step": i, "text": f"thought number {i}"})
            for i in range(2, events + 1)
        ],
    )
    turn.refresh_from_db()
    assert turn.last_seq == events
    return turn


def result_ids(response: Any) -> set[int]:
    """Turn ids in a changelist page (the action checkboxes)."""
    return {int(v) for v in re.findall(r'name="_selected_action" value="(\d+)"', response.content.decode())}


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    """The job runner's edge (``turns.services.enqueue.turn_enqueue``) records turn ids
    instead of starting the inline executor."""
    calls: list[int] = []
    monkeypatch.setattr("turns.services.enqueue.turn_enqueue", calls.append)
    return calls


@pytest.fixture
def crowd(owner, teammate):
    """500 turns in 10 conversations of two owners, one of them with 5,000 events."""
    turns: list[Turn] = []
    for c in range(10):
        user = owner if c % 2 == 0 else teammate
        conversation = Conversation.objects.create(owner=user, title=f"conversation {c}")
        for i in range(50 if c else 49):
            turns.append(
                turn_create(
                    owner=user,
                    conversation=conversation,
                    question=f"question {c}-{i}",
                    model="model-a" if i % 2 else "model-b",
                )
            )
    big = long_turn(owner)
    return {"turns": turns, "big": big}


# --- access ----------------------------------------------------------------------


def test_only_active_staff_reach_the_admin(client, owner, staff):
    assert client.get(TURN_LIST).status_code == 302
    client.force_login(owner)
    response = client.get(TURN_LIST)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    client.force_login(staff)
    assert client.get(TURN_LIST).status_code == 200
    index = client.get(reverse("admin:index"))
    assert index.status_code == 200
    for name in ("Turns", "Conversations", "Approvals", "Runs", "Predictions", "Datasets", "Examples"):
        assert name in index.content.decode()


def test_pages_are_read_only(staff_client, owner):
    turn = answered_turn(owner)
    response = staff_client.get(reverse("admin:turns_turn_change", args=[turn.pk]))
    assert response.status_code == 200
    assert 'name="_save"' not in response.content.decode()
    assert staff_client.get(reverse("admin:turns_turn_add")).status_code == 403
    delete = reverse("admin:turns_turn_delete", args=[turn.pk])
    assert staff_client.post(delete, {"post": "yes"}).status_code == 403
    # a POST to the change page changes nothing
    staff_client.post(reverse("admin:turns_turn_change", args=[turn.pk]), {"status": "queued"})
    turn.refresh_from_db()
    assert turn.status == "succeeded"


# --- every page renders with 500 turns and 5,000 events ---------------------------


def test_every_list_and_page_renders_with_500_turns_and_5000_events(staff_client, crowd):
    big = crowd["big"]
    waiting = waiting_turn(crowd["turns"][0].owner)
    response = staff_client.get(TURN_LIST)
    assert response.status_code == 200
    assert "501 turns" in response.content.decode()  # 499 + the long one + the waiting one
    assert len(result_ids(response)) == 50

    response = staff_client.get(CONVERSATION_LIST)
    body = response.content.decode()
    assert response.status_code == 200 and "conversation 3" in body
    conversation = Conversation.objects.get(title="conversation 3")
    response = staff_client.get(reverse("admin:turns_conversation_change", args=[conversation.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert "question 3-49" in body and "all 50 turns" in body
    # newest first, and only the newest TURNS_INLINE_LIMIT of them
    assert body.index("question 3-49") < body.index("question 3-48")
    assert f"Turns (newest {TURNS_INLINE_LIMIT})" in body

    response = staff_client.get(APPROVAL_LIST)
    assert response.status_code == 200 and "delete_file" in response.content.decode()
    approval = Approval.objects.get(turn=waiting)
    assert staff_client.get(reverse("admin:turns_approval_change", args=[approval.pk])).status_code == 200

    response = staff_client.get(reverse("admin:turns_turn_change", args=[big.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert "Event log · 5000 events, seq 1–100" in body
    assert body.count('id="seq-') == EVENTS_PER_PAGE


def test_conversation_list_counts_turns_and_shows_last_activity(staff_client, owner):
    conversation = Conversation.objects.create(owner=owner, title="counted")
    for i in range(3):
        turn_create(owner=owner, conversation=conversation, question=f"q{i}")
    empty = Conversation.objects.create(owner=owner, title="empty one")
    response = staff_client.get(CONVERSATION_LIST, {"q": "counted"})
    body = response.content.decode()
    assert response.status_code == 200
    assert re.search(r'<td class="field-turn_count">3</td>', body)
    assert "empty one" not in body
    response = staff_client.get(CONVERSATION_LIST, {"q": "owner"})  # by the owner's username
    assert "counted" in response.content.decode() and "empty one" in response.content.decode()
    # the column's number in ?o= counts the action checkbox ("Add conversation to dataset…")
    column = str(response.context["cl"].list_display.index("turn_count"))
    body = staff_client.get(CONVERSATION_LIST, {"o": f"-{column}"}).content.decode()  # most turns first
    assert body.index("counted") < body.index("empty one")
    body = staff_client.get(CONVERSATION_LIST, {"o": column}).content.decode()
    assert body.index("empty one") < body.index("counted")
    assert empty.turns.count() == 0


def test_conversation_page_shows_only_the_newest_turns_inline(staff_client, owner):
    conversation = Conversation.objects.create(owner=owner, title="long chat")
    for i in range(TURNS_INLINE_LIMIT + 3):
        turn_create(owner=owner, conversation=conversation, question=f"turn {i:03d}")
    page = reverse("admin:turns_conversation_change", args=[conversation.pk])
    body = staff_client.get(page).content.decode()
    shown = re.findall(r"turn (\d{3})", body)
    assert shown == [f"{i:03d}" for i in range(TURNS_INLINE_LIMIT + 2, 2, -1)]
    assert f"all {TURNS_INLINE_LIMIT + 3} turns in the turn list" in body


# --- the turn list -----------------------------------------------------------------


def test_turn_list_shows_status_usage_duration_owner_and_conversation(staff_client, owner):
    conversation = Conversation.objects.create(owner=owner, title="maths chat")
    turn = answered_turn(owner, conversation=conversation)
    response = staff_client.get(TURN_LIST)
    body = response.content.decode()
    assert response.status_code == 200
    row = body[body.index(f'value="{turn.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "succeeded" in row and "Answered" in row and "final" in row and "Finish" in row
    assert '<td class="field-tokens">64</td>' in row  # 20+8+30+6
    assert '<td class="field-cost">—</td>' in row  # the scripted LLM reports no cost
    assert re.search(r'<td class="field-duration">\d+ ms</td>', row)
    assert "maths chat" in row and '<td class="field-owner nowrap">owner</td>' in row


def test_turn_list_queries_do_not_grow_with_rows(staff_client, owner, django_assert_num_queries):
    answered_turn(owner)
    staff_client.get(TURN_LIST)  # warm the process-wide caches (content types)
    with django_assert_num_queries(TURN_LIST_QUERIES):
        assert staff_client.get(TURN_LIST).status_code == 200
    conversation = Conversation.objects.create(owner=owner, title="many")
    for i in range(60):
        turn_create(owner=owner, conversation=conversation, question=f"q{i}", model=f"m{i % 3}")
    interrupted_turn(owner)
    with django_assert_num_queries(TURN_LIST_QUERIES):
        response = staff_client.get(TURN_LIST)
    # the same count for 50 rows with owners, conversations, runs and three models
    assert response.status_code == 200 and len(result_ids(response)) == 50
    assert response.content.decode().count("/admin/turns/conversation/") >= 49


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status__exact": "interrupted"}, {"interrupted"}),
        ({"attention": "interrupted"}, {"interrupted"}),
        ({"attention": "waiting"}, {"waiting"}),
        ({"attention": "failed"}, {"failed"}),
        ({"status__exact": "succeeded"}, {"answered"}),
        ({"outcome__exact": "answered"}, {"answered"}),
        ({"outcome__exact": "cancelled"}, {"cancelled"}),
        ({"phase__exact": "finish"}, {"answered", "failed"}),
        ({"stop_reason": "max_steps"}, {"failed"}),
        ({"stop_reason": "cancelled"}, {"cancelled"}),
        ({"stop_reason": "__none__"}, {"queued", "interrupted", "waiting", "model-x"}),
        ({"model": "model-x"}, {"model-x"}),
        ({"model": "scripted"}, {"answered", "failed"}),
        (
            {"kind__exact": "chat"},
            {"answered", "failed", "queued", "cancelled", "interrupted", "waiting", "model-x"},
        ),
        ({}, {"answered", "failed", "queued", "cancelled", "interrupted", "waiting", "model-x"}),
    ],
)
def test_each_turn_filter_narrows(staff_client, owner, params, expected):
    made = {
        "answered": answered_turn(owner),
        "failed": failed_turn(owner),
        "queued": turn_create(owner=owner, question="just queued"),
        "cancelled": turn_cancel(turn_id=turn_create(owner=owner, question="to cancel").pk),
        "interrupted": interrupted_turn(owner),
        "waiting": waiting_turn(owner),
        "model-x": turn_create(owner=owner, question="other model", model="model-x"),
    }
    response = staff_client.get(TURN_LIST, params)
    assert response.status_code == 200
    assert result_ids(response) == {made[name].pk for name in expected}


def test_stale_shortcut_finds_running_turns_without_a_recent_heartbeat(staff_client, owner, settings):
    running = turn_create(owner=owner, question="running")
    turn_claim(turn_id=running.pk)
    turn_create(owner=owner, question="queued")
    settings.TURN_STALE_S = 3600
    assert result_ids(staff_client.get(TURN_LIST, {"attention": "stale"})) == set()
    settings.TURN_STALE_S = 0
    assert result_ids(staff_client.get(TURN_LIST, {"attention": "stale"})) == {running.pk}


def test_date_hierarchy_narrows_by_creation_date(staff_client, owner):
    turn = turn_create(owner=owner, question="dated")
    year = turn.created_at.year
    assert result_ids(staff_client.get(TURN_LIST, {"created_at__year": year})) == {turn.pk}
    assert result_ids(staff_client.get(TURN_LIST, {"created_at__year": year - 1})) == set()
    response = staff_client.get(
        TURN_LIST,
        {
            "created_at__year": year,
            "created_at__month": turn.created_at.month,
            "created_at__day": turn.created_at.day,
        },
    )
    assert result_ids(response) == {turn.pk}


def test_search_finds_question_answer_and_id(staff_client, owner):
    answered = answered_turn(owner, question="multiply six by seven")
    other = turn_create(owner=owner, question="something else entirely")
    assert result_ids(staff_client.get(TURN_LIST, {"q": "six by"})) == {answered.pk}
    assert result_ids(staff_client.get(TURN_LIST, {"q": "forty-two"})) == {answered.pk}
    assert result_ids(staff_client.get(TURN_LIST, {"q": str(other.pk)})) == {other.pk}
    assert result_ids(staff_client.get(TURN_LIST, {"q": f"#{other.pk}"})) == {other.pk}
    assert result_ids(staff_client.get(TURN_LIST, {"q": "no such words"})) == set()


def test_conversation_link_lists_that_conversations_turns(staff_client, owner):
    conversation = Conversation.objects.create(owner=owner, title="mine")
    inside = [turn_create(owner=owner, conversation=conversation, question=f"q{i}") for i in range(3)]
    turn_create(owner=owner, question="outside")
    response = staff_client.get(TURN_LIST, {"conversation__id__exact": conversation.pk})
    assert result_ids(response) == {t.pk for t in inside}


# --- the turn page -----------------------------------------------------------------


def test_turn_page_shows_question_answer_usage_timings_and_events(staff_client, owner):
    turn = answered_turn(owner, question="What is six times seven?")
    response = staff_client.get(reverse("admin:turns_turn_change", args=[turn.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    for text in (
        "What is six times seven?",
        "forty-two",
        "calculator said 42",
        "six times seven",
        "2 of 6",
        "all calls",
        "agent calls",
        "model scripted",
        "total_ms",
        "act_ms",
        "none: this is the turn&#x27;s first attempt",
    ):
        assert text in body, text
    assert "Event log · 13 events, seq 1–13" in body  # tool.started before the calculator ran
    events = body[body.index('id="events"') :]
    types_in_page = re.findall(r'<span class="al-type">([^<]+)</span>', events)
    assert types_in_page == [e.type for e in events_after(turn_id=turn.pk)]
    assert 'class="al-event al-terminal"' in body  # turn.answered is highlighted
    # a succeeded turn can be neither resumed, cancelled nor retried
    assert "Act on this turn" not in body


def test_turn_page_of_5000_events_reads_one_page_in_pinned_queries(
    staff_client, owner, django_assert_num_queries
):
    big = long_turn(owner)
    url = reverse("admin:turns_turn_change", args=[big.pk])
    staff_client.get(url)  # warm the process-wide caches (content types)
    with django_assert_num_queries(TURN_PAGE_QUERIES):
        response = staff_client.get(url, {"events_page": "37"})
    body = response.content.decode()
    assert response.status_code == 200
    seqs = [int(s) for s in re.findall(r'id="seq-(\d+)"', body)]
    assert seqs == list(range(3601, 3701))
    assert "page 37 of 50" in body and "thought number 3650" in body
    assert "thought number 3701" not in body and "thought number 3600" not in body

    last = staff_client.get(url, {"events_page": "last"}).content.decode()
    assert [int(s) for s in re.findall(r'id="seq-(\d+)"', last)] == list(range(4901, 5001))
    beyond = staff_client.get(url, {"events_page": "999"}).content.decode()
    assert "page 50 of 50" in beyond
    junk = staff_client.get(url, {"events_page": "x"}).content.decode()
    assert "page 1 of 50" in junk


def test_turn_page_of_an_evaluation_turn_links_its_run(staff_client, staff):
    from evaluation.datasets.services import dataset_import
    from evaluation.datasets.spec import ExampleSpec
    from evaluation.run.lifecycle import run_start
    from evaluation.run.plan import run_plan

    dataset = dataset_import(
        name="tiny", examples=[ExampleSpec(external_id="e1", question="1+1?", answer="2", task_type="math")]
    )
    run, _ = run_start(run_id="run-for-link", dataset=dataset, config={"model": "scripted"})
    planned, _ = run_plan(run=run, limit=None, max_steps=3, model="scripted")
    turn_id = planned[0].turn_id
    body = staff_client.get(reverse("admin:turns_turn_change", args=[turn_id])).content.decode()
    assert reverse("admin:evaluation_run_change", args=[run.pk]) in body and "run-for-link" in body
    listing = staff_client.get(TURN_LIST, {"run": run.pk})
    assert result_ids(listing) == {turn_id}
    assert "run-for-link" in listing.content.decode()


# --- actions -------------------------------------------------------------------------


def act(client: Any, action: str, turns: list[Turn]) -> Any:
    return client.post(TURN_LIST, {"action": action, "_selected_action": [t.pk for t in turns]}, follow=True)


def test_resume_action_resumes_interrupted_and_says_why_not_for_others(staff_client, staff, owner, enqueued):
    interrupted = interrupted_turn(owner)
    done = answered_turn(owner)
    response = act(staff_client, "resume_turns", [interrupted, done])
    assert response.status_code == 200
    notes = messages_of(response)
    assert f"Resumed 1 turn(s): #{interrupted.pk}." in notes
    assert f"Turn #{done.pk} not resumed: turn {done.pk} cannot be resumed from status succeeded." in notes

    interrupted.refresh_from_db()
    done.refresh_from_db()
    assert interrupted.status == "queued" and done.status == "succeeded"
    last = events_after(turn_id=interrupted.pk)[-1]
    assert (last.type, last.data) == ("turn.resumed", {"from": "interrupted", "by": staff.username})
    assert enqueued == [interrupted.pk]
    entry = LogEntry.objects.get(object_id=str(interrupted.pk))
    assert entry.user == staff and "Resumed in the admin" in entry.get_change_message()
    assert not LogEntry.objects.filter(object_id=str(done.pk)).exists()


def test_cancel_action_cancels_queued_and_flags_running_turns(staff_client, owner, enqueued):
    queued = turn_create(owner=owner, question="queued")
    running = turn_create(owner=owner, question="running")
    turn_claim(turn_id=running.pk)
    finished = answered_turn(owner)
    response = act(staff_client, "cancel_turns", [queued, running, finished])
    notes = messages_of(response)
    assert f"Cancelled 1 turn(s): #{queued.pk}." in notes
    assert any(n.startswith(f"Cancel requested for 1 running turn(s): #{running.pk}") for n in notes)
    assert f"Turn #{finished.pk} not cancelled: turn {finished.pk} has already finished (succeeded)." in notes

    queued.refresh_from_db()
    running.refresh_from_db()
    assert (queued.status, queued.outcome, queued.stop_reason) == ("cancelled", "cancelled", "cancelled")
    assert (running.status, running.cancel_requested) == ("running", True)
    assert events_after(turn_id=queued.pk)[-1].type == "turn.cancelled"
    assert events_after(turn_id=running.pk)[-1].type == "phase"  # the driver writes turn.cancelled itself
    assert enqueued == []


def test_retry_action_starts_a_new_attempt_and_archives_the_old_one(staff_client, staff, owner, enqueued):
    failed = failed_turn(owner)
    done = answered_turn(owner)
    response = act(staff_client, "retry_turns", [failed, done])
    notes = messages_of(response)
    assert f"Retried 1 turn(s): #{failed.pk} (attempt 2)." in notes
    assert any(
        n.startswith(f"Turn #{done.pk} not retried: turn {done.pk} cannot be retried from status succeeded")
        for n in notes
    )

    failed.refresh_from_db()
    assert (failed.status, failed.attempts, failed.outcome, failed.stop_reason, failed.steps) == (
        "queued",
        2,
        "",
        "",
        0,
    )
    assert failed.usage == {} and failed.timings == {} and "failure_cause" not in failed.meta
    [archived] = TurnAttempt.objects.filter(turn=failed)
    assert archived.number == 1 and archived.status == "failed"
    assert archived.stop_reason == "max_steps" and archived.failure_cause == "max_steps"
    assert archived.usage["input_tokens"] == 5 and archived.steps == 1
    last = events_after(turn_id=failed.pk)[-1]
    assert last.type == "attempt.retry" and last.seq == failed.last_seq
    assert last.data == {
        "attempt": 2,
        "reason": "retry",
        "from": "failed",
        "by": staff.username,
        "previous": {"attempt": 1, "status": "failed", "outcome": "failed", "stop_reason": "max_steps"},
    }
    assert enqueued == [failed.pk]
    done.refresh_from_db()
    assert done.status == "succeeded" and done.attempts == 1

    # the archived attempt is on the turn page
    body = staff_client.get(reverse("admin:turns_turn_change", args=[failed.pk])).content.decode()
    assert re.search(r"<td>1</td><td>failed</td><td>failed</td><td>max_steps</td>", body)


def test_a_retried_turn_runs_its_new_attempt_from_scratch(staff_client, owner, enqueued):
    failed = failed_turn(owner)
    act(staff_client, "retry_turns", [failed])
    drive(failed.pk, [final("2", evidence="arithmetic", usage=(4, 1))])
    failed.refresh_from_db()
    assert (failed.status, failed.answer, failed.attempts, failed.steps) == ("succeeded", "2", 2, 1)
    assert failed.usage["input_tokens"] == 4
    started = [e for e in events_after(turn_id=failed.pk) if e.type == "turn.started"]
    assert [e.data["attempt"] for e in started] == [1, 2]


def test_retry_of_a_turn_cancelled_before_it_ran(staff_client, owner, enqueued):
    cancelled = turn_cancel(turn_id=turn_create(owner=owner, question="never ran").pk)
    act(staff_client, "retry_turns", [cancelled])
    cancelled.refresh_from_db()
    assert (cancelled.status, cancelled.attempts, cancelled.cancel_requested) == ("queued", 2, False)
    assert TurnAttempt.objects.get(turn=cancelled, number=1).status == "cancelled"


def test_retry_keeps_one_active_turn_per_conversation(staff_client, owner, enqueued):
    conversation = Conversation.objects.create(owner=owner, title="busy")
    failed = turn_create(owner=owner, conversation=conversation, question="first", max_steps=1)
    drive(failed.pk, [tool_call("calculator", {"expression": "1"})])
    active = turn_create(owner=owner, conversation=conversation, question="second")
    notes = messages_of(act(staff_client, "retry_turns", [failed]))
    assert (
        f"Turn #{failed.pk} not retried: conversation {conversation.pk} already has an active turn "
        f"({active.pk})." in notes
    )
    failed.refresh_from_db()
    assert (failed.status, failed.attempts) == ("failed", 1) and enqueued == []


def test_the_real_job_runner_is_handed_the_turn_after_commit(
    staff_client, owner, django_capture_on_commit_callbacks
):
    interrupted = interrupted_turn(owner)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        notes = messages_of(act(staff_client, "resume_turns", [interrupted]))
    assert f"Resumed 1 turn(s): #{interrupted.pk}." in notes
    # the doorbell of turn.resumed and the hand-over to turns.jobs.handover
    assert len(callbacks) == 2


def test_turn_page_buttons_call_the_same_services(staff_client, owner, enqueued):
    interrupted = interrupted_turn(owner)
    page = reverse("admin:turns_turn_change", args=[interrupted.pk])
    body = staff_client.get(page).content.decode()
    for verb in ("resume", "cancel", "retry"):
        assert f'formaction="{reverse("admin:turns_turn_act", args=[interrupted.pk, verb])}"' in body
    response = staff_client.post(reverse("admin:turns_turn_act", args=[interrupted.pk, "resume"]))
    assert response.status_code == 302 and response["Location"] == page
    interrupted.refresh_from_db()
    assert interrupted.status == "queued" and enqueued == [interrupted.pk]
    body = staff_client.get(page).content.decode()
    assert f"Resumed 1 turn(s): #{interrupted.pk}." in body
    assert "admin:turns_turn_act" not in body and "/act/resume/" not in body and "/act/cancel/" in body

    # a second resume is a conflict, reported on the page
    staff_client.post(reverse("admin:turns_turn_act", args=[interrupted.pk, "resume"]))
    body = staff_client.get(page).content.decode()
    assert "cannot be resumed from status queued" in body
    resume = reverse("admin:turns_turn_act", args=[interrupted.pk, "resume"])
    assert staff_client.get(resume).status_code == 405
    explode = reverse("admin:turns_turn_act", args=[interrupted.pk, "explode"])
    assert staff_client.post(explode).status_code == 404


def test_non_staff_cannot_act(client, owner):
    interrupted = interrupted_turn(owner)
    client.force_login(owner)
    response = client.post(reverse("admin:turns_turn_act", args=[interrupted.pk, "resume"]))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    response = client.post(TURN_LIST, {"action": "resume_turns", "_selected_action": [interrupted.pk]})
    assert response.status_code == 302
    interrupted.refresh_from_db()
    assert interrupted.status == "interrupted"


# --- approvals -------------------------------------------------------------------------


def test_approval_actions_decide_through_the_service_once(staff_client, staff, owner):
    turn = waiting_turn(owner)
    approval = Approval.objects.get(turn=turn)
    response = staff_client.post(
        APPROVAL_LIST, {"action": "approve", "_selected_action": [approval.pk]}, follow=True
    )
    assert f"Approved 1 approval(s): #{approval.pk} (turn #{turn.pk})." in messages_of(response)
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == ("approved", staff)
    last = events_after(turn_id=turn.pk)[-1]
    assert last.type == "approval.resolved"
    assert last.data == {
        "approval_id": approval.pk,
        "status": "approved",
        "by": "staff",
        "tool": "delete_file",
    }

    response = staff_client.post(
        APPROVAL_LIST, {"action": "reject", "_selected_action": [approval.pk]}, follow=True
    )
    assert any(
        n.startswith(f"Approval #{approval.pk} not rejected: approval {approval.pk} cannot be decided")
        for n in messages_of(response)
    )
    approval.refresh_from_db()
    assert approval.status == "approved"


def test_approval_list_filters_and_searches(staff_client, owner):
    waiting = waiting_turn(owner)
    other = waiting_turn(owner)
    decided = Approval.objects.get(turn=other)
    staff_client.post(APPROVAL_LIST, {"action": "reject", "_selected_action": [decided.pk]})

    def listed(params: dict[str, Any]) -> set[int]:
        return result_ids(staff_client.get(APPROVAL_LIST, params))

    pending = Approval.objects.get(turn=waiting)
    assert listed({"status__exact": "pending"}) == {pending.pk}
    assert listed({"status__exact": "rejected"}) == {decided.pk}
    assert listed({"q": str(waiting.pk)}) == {pending.pk}
    assert listed({"q": "delete_file"}) == {pending.pk, decided.pk}
    assert listed({"turn__id__exact": other.pk}) == {decided.pk}
    body = staff_client.get(reverse("admin:turns_turn_change", args=[waiting.pk])).content.decode()
    assert f"{APPROVAL_LIST}?turn__id__exact={waiting.pk}" in body and "delete_file" in body


def test_a_truncated_turn_says_truncated_in_the_list_and_on_its_page(staff_client, owner):
    turn = turn_create(owner=owner, question="Tell me about ducks.", max_output_tokens=5)
    cut = Completion(text="Ducks are", usage=Usage(9, 5), model="scripted", finish_reason="length")
    provider = ScriptedProvider([cut], native_tools=False)
    db = cast(DatabaseThreads, TestThreadDb())
    async_to_sync(drive_turn)(turn.pk, policy=EVALUATION, provider=provider, db=db)
    listing = staff_client.get(reverse("admin:turns_turn_changelist")).content.decode()
    assert "length — truncated (output-token limit)" in listing
    page = staff_client.get(reverse("admin:turns_turn_change", args=[turn.pk])).content.decode()
    assert "length — truncated (output-token limit)" in page
    assert (
        "truncated — the final answer was cut off by the output-token limit (5 tokens) before it was complete"
        in page
    )


def test_the_turn_page_explains_the_review_or_that_it_gave_no_readable_verdict(staff_client, owner):
    db = cast(DatabaseThreads, TestThreadDb())
    pages = {}
    for reply in ("hm, hard to say", '{"verdict": "accept", "note": "the calculator agrees"}'):
        turn = turn_create(owner=owner, question="What is 6*7?")
        provider = ScriptedProvider([final("42", evidence="calculator"), text_reply(reply)])
        async_to_sync(drive_turn)(turn.pk, policy=EvaluationPolicy(review=True), provider=provider, db=db)
        pages[reply] = staff_client.get(reverse("admin:turns_turn_change", args=[turn.pk])).content.decode()
    assert (
        "the reviewer gave no readable verdict; the answer stands "
        "(no verdict in the reviewer&#x27;s reply: &#x27;hm, hard to say&#x27;)"
    ) in pages["hm, hard to say"]
    assert (
        "accepted — the calculator agrees" in pages['{"verdict": "accept", "note": "the calculator agrees"}']
    )

"""The conversations/turns/approvals API (docs/chat-and-api.md#the-http-api) against the real database.

Turns are started through ``turn_start``; in these (non-transactional) tests
the job hand-over waits for a commit that never comes, so turns stay queued
unless a test moves them on through services.
"""

from __future__ import annotations

import pytest

from tests.api_support import ApiClient, assert_error
from turns.models import Approval, Conversation, Turn, TurnEvent
from turns.selectors import events_after
from turns.services import conversation_create, turn_cancel, turn_interrupt, turn_start

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_owner(owner):
    return ApiClient(owner)


@pytest.fixture
def conversation(owner):
    return conversation_create(owner=owner, title="Sums")


def start(conversation, owner, question="What is 6*7?") -> Turn:
    return turn_start(conversation=conversation, question=question, acting_user=owner)


def test_create_conversation_returns_201_and_lists_only_mine(as_owner, owner, teammate):
    conversation_create(owner=teammate, title="not mine")
    response = as_owner.post("/api/conversations", {"title": "  Capitals  "})
    assert response.status_code == 201
    body = response.json()
    assert body["title"] == "Capitals" and body["owner"] == "owner"
    listed = as_owner.get("/api/conversations").json()
    assert listed["count"] == 1
    assert [c["id"] for c in listed["items"]] == [body["id"]]
    assert Conversation.objects.get(pk=body["id"]).owner == owner


def test_staff_lists_everyone_only_when_asked(staff, owner):
    conversation_create(owner=owner, title="owner's")
    client = ApiClient(staff)
    assert client.get("/api/conversations").json()["count"] == 0
    assert client.get("/api/conversations?everyone=true").json()["count"] == 1


def test_everyone_flag_is_ignored_for_non_staff(as_owner, teammate):
    conversation_create(owner=teammate, title="teammate's")
    assert as_owner.get("/api/conversations?everyone=true").json()["count"] == 0


def test_start_turn_returns_202_with_turn_id_and_queues_it(as_owner, conversation):
    response = as_owner.post(f"/api/conversations/{conversation.pk}/turns", {"question": "What is 6*7?"})
    assert response.status_code == 202
    turn_id = response.json()["turn_id"]
    assert set(response.json()) == {"turn_id"}
    turn = Turn.objects.get(pk=turn_id)
    assert (turn.conversation_id, turn.status, turn.question, turn.position) == (
        conversation.pk,
        "queued",
        "What is 6*7?",
        1,
    )
    assert [(e.seq, e.type) for e in events_after(turn_id=turn_id)] == [(1, "turn.queued")]


def test_second_active_turn_in_a_conversation_is_409(as_owner, owner, conversation):
    first = start(conversation, owner)
    response = as_owner.post(f"/api/conversations/{conversation.pk}/turns", {"question": "And 7*8?"})
    error = assert_error(response, 409, "state_conflict")
    assert str(first.pk) in error["message"]
    assert Turn.objects.filter(conversation=conversation).count() == 1


def test_new_turn_is_allowed_once_the_previous_one_ended(as_owner, owner, conversation):
    first = start(conversation, owner)
    turn_cancel(turn_id=first.pk)
    response = as_owner.post(f"/api/conversations/{conversation.pk}/turns", {"question": "Again?"})
    assert response.status_code == 202
    assert Turn.objects.get(pk=response.json()["turn_id"]).position == 2


@pytest.mark.parametrize(
    "body", [{"question": ""}, {"question": "   \n"}, {}, {"question": 7}, {"question": None}]
)
def test_blank_or_missing_question_is_422_and_writes_nothing(as_owner, conversation, body):
    response = as_owner.post(f"/api/conversations/{conversation.pk}/turns", body)
    error = assert_error(response, 422, "invalid")
    assert error["details"] and error["details"][0]["loc"][0] == "body"
    assert not Turn.objects.exists()


def test_nul_characters_in_a_question_are_stored_as_replacement_characters(as_owner, conversation):
    response = as_owner.post(f"/api/conversations/{conversation.pk}/turns", {"question": "a\x00b"})
    assert response.status_code == 202
    assert Turn.objects.get().question == "a\ufffdb"


def test_malformed_json_body_is_an_error_in_the_one_shape(as_owner, conversation):
    response = as_owner.client.post(
        f"/api/conversations/{conversation.pk}/turns",
        data="{not json",
        content_type="application/json",
        headers={"X-CSRFToken": as_owner.token},
    )
    assert response.status_code in (400, 422)
    assert set(response.json()) == {"error"}


def test_turn_detail_shows_the_turn(as_owner, owner, conversation):
    turn = start(conversation, owner)
    body = as_owner.get(f"/api/turns/{turn.pk}").json()
    assert body["id"] == turn.pk and body["status"] == "queued" and body["last_seq"] == 1
    assert body["conversation_id"] == conversation.pk and body["usage"] == {}


def test_conversation_detail_lists_turns_and_the_active_one(as_owner, owner, conversation):
    first = start(conversation, owner)
    turn_cancel(turn_id=first.pk)
    second = start(conversation, owner, "next?")
    body = as_owner.get(f"/api/conversations/{conversation.pk}").json()
    assert [t["id"] for t in body["turns"]] == [first.pk, second.pk]
    assert [t["status"] for t in body["turns"]] == ["cancelled", "queued"]
    assert body["active_turn_id"] == second.pk


# --- events: the websocket's contract over HTTP --------------------------------------


def test_events_after_a_seq_are_the_rest_in_order_and_not_ended_while_active(as_owner, owner, conversation):
    turn = start(conversation, owner)
    turn_interrupt(turn_id=turn.pk, reason="test")
    body = as_owner.get(f"/api/turns/{turn.pk}/events?after=0").json()
    assert [(e["seq"], e["type"]) for e in body["events"]] == [(1, "turn.queued"), (2, "turn.interrupted")]
    assert body["ended"] is False and body["status"] == "interrupted" and body["next_after"] == 2
    assert set(body["events"][0]) == {"seq", "type", "data", "at"}
    again = as_owner.get(f"/api/turns/{turn.pk}/events?after=2").json()
    assert again["events"] == [] and again["next_after"] == 2 and again["ended"] is False


def test_events_end_with_the_terminal_event(as_owner, owner, conversation):
    turn = start(conversation, owner)
    turn_cancel(turn_id=turn.pk)
    body = as_owner.get(f"/api/turns/{turn.pk}/events?after=1").json()
    assert [(e["seq"], e["type"]) for e in body["events"]] == [(2, "turn.cancelled")]
    assert body["ended"] is True and body["status"] == "cancelled" and body["last_seq"] == 2
    # a client that already has the whole log is told it ended, with nothing to send
    done = as_owner.get(f"/api/turns/{turn.pk}/events?after=2").json()
    assert done["events"] == [] and done["ended"] is True


def test_events_page_with_limit_does_not_end_before_the_last_event(as_owner, owner, conversation):
    turn = start(conversation, owner)
    turn_cancel(turn_id=turn.pk)
    first = as_owner.get(f"/api/turns/{turn.pk}/events?after=0&limit=1").json()
    assert [e["seq"] for e in first["events"]] == [1] and first["ended"] is False
    second = as_owner.get(f"/api/turns/{turn.pk}/events?after={first['next_after']}&limit=1").json()
    assert [e["seq"] for e in second["events"]] == [2] and second["ended"] is True


@pytest.mark.parametrize("after", ["-1", "x", "99999999999999999999"])
def test_bad_after_is_422(as_owner, owner, conversation, after):
    turn = start(conversation, owner)
    assert_error(as_owner.get(f"/api/turns/{turn.pk}/events?after={after}"), 422, "invalid")


def test_events_endpoint_query_count_is_fixed(as_owner, owner, conversation, django_assert_num_queries):
    turn = start(conversation, owner)
    turn_cancel(turn_id=turn.pk)
    as_owner.get(f"/api/turns/{turn.pk}/events")  # warm the session
    # session, user, the turn (ownership), its status and last_seq, the events
    with django_assert_num_queries(5):
        assert as_owner.get(f"/api/turns/{turn.pk}/events").status_code == 200


# --- cancel, resume, retry -------------------------------------------------------------


def test_cancel_a_queued_turn_ends_it_and_a_second_cancel_is_409(as_owner, owner, conversation):
    turn = start(conversation, owner)
    response = as_owner.post(f"/api/turns/{turn.pk}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    turn.refresh_from_db()
    assert (turn.status, turn.outcome, turn.stop_reason) == ("cancelled", "cancelled", "cancelled")
    assert [e.type for e in events_after(turn_id=turn.pk)] == ["turn.queued", "turn.cancelled"]
    assert_error(as_owner.post(f"/api/turns/{turn.pk}/cancel"), 409, "state_conflict")
    assert TurnEvent.objects.filter(turn=turn).count() == 2


def test_resume_an_interrupted_turn_queues_it_again(as_owner, owner, conversation):
    turn = start(conversation, owner)
    turn_interrupt(turn_id=turn.pk, reason="worker lost")
    response = as_owner.post(f"/api/turns/{turn.pk}/resume")
    assert response.status_code == 202 and response.json()["status"] == "queued"
    assert [e.type for e in events_after(turn_id=turn.pk)][-1] == "turn.resumed"
    assert_error(as_owner.post(f"/api/turns/{turn.pk}/resume"), 409, "state_conflict")


def test_retry_a_cancelled_turn_starts_a_new_attempt(as_owner, owner, conversation):
    turn = start(conversation, owner)
    turn_cancel(turn_id=turn.pk)
    response = as_owner.post(f"/api/turns/{turn.pk}/retry")
    assert response.status_code == 202
    assert response.json()["status"] == "queued" and response.json()["attempts"] == 2
    event = events_after(turn_id=turn.pk)[-1]
    assert event.type == "attempt.retry" and event.data["by"] == "owner"


def test_retry_while_another_turn_of_the_conversation_is_active_is_409(as_owner, owner, conversation):
    old = start(conversation, owner)
    turn_cancel(turn_id=old.pk)
    start(conversation, owner, "the active one")
    assert_error(as_owner.post(f"/api/turns/{old.pk}/retry"), 409, "state_conflict")
    old.refresh_from_db()
    assert old.status == "cancelled" and old.attempts == 0


def test_retry_of_a_queued_turn_is_409(as_owner, owner, conversation):
    turn = start(conversation, owner)
    assert_error(as_owner.post(f"/api/turns/{turn.pk}/retry"), 409, "state_conflict")


# --- delete ------------------------------------------------------------------------------


def test_delete_conversation_cancels_its_turn_then_removes_turns_and_events(as_owner, owner, conversation):
    turn = start(conversation, owner)
    response = as_owner.delete(f"/api/conversations/{conversation.pk}")
    assert response.status_code == 204 and response.content == b""
    assert not Conversation.objects.filter(pk=conversation.pk).exists()
    assert not Turn.objects.filter(pk=turn.pk).exists()
    assert not TurnEvent.objects.filter(turn_id=turn.pk).exists()
    assert_error(as_owner.get(f"/api/turns/{turn.pk}"), 404, "not_found")


def test_delete_runs_turn_cancel_before_removing(
    owner, conversation, django_capture_on_commit_callbacks, monkeypatch
):
    """The cancel's doorbell (carrying ``turn.cancelled``) is queued for the
    commit, so a watcher hears the turn end before its rows go."""
    import turns.events as events_module
    from turns.services import conversation_delete

    turn = start(conversation, owner)
    rung: list[tuple[int, list[dict]]] = []
    monkeypatch.setattr(
        events_module, "ring_turn", lambda turn_id, frames: rung.append((turn_id, list(frames)))
    )
    with django_capture_on_commit_callbacks(execute=True):
        conversation_delete(conversation_id=conversation.pk)
    assert [(turn_id, [(f["seq"], f["type"]) for f in frames]) for turn_id, frames in rung] == [
        (turn.pk, [(2, "turn.cancelled")])
    ]
    assert not Turn.objects.filter(pk=turn.pk).exists()


# --- approvals ----------------------------------------------------------------------------


@pytest.fixture
def approval(owner, conversation):
    turn = start(conversation, owner)
    return Approval.objects.create(
        turn=turn, tool_call={"id": "c1", "name": "delete_everything", "arguments": {}}
    )


@pytest.mark.parametrize(("verb", "status"), [("approve", "approved"), ("reject", "rejected")])
def test_exactly_one_approval_decision_counts(as_owner, approval, verb, status):
    response = as_owner.post(f"/api/approvals/{approval.pk}/{verb}")
    assert response.status_code == 200
    assert response.json()["status"] == status and response.json()["decided_by"] == "owner"
    approval.refresh_from_db()
    assert approval.status == status and approval.decided_at is not None
    resolved = events_after(turn_id=approval.turn_id)[-1]
    assert resolved.type == "approval.resolved" and resolved.data["status"] == status
    for second in ("approve", "reject"):
        assert_error(as_owner.post(f"/api/approvals/{approval.pk}/{second}"), 409, "state_conflict")
    approval.refresh_from_db()
    assert approval.status == status
    assert TurnEvent.objects.filter(turn_id=approval.turn_id, type="approval.resolved").count() == 1


def test_an_expired_approval_cannot_be_decided(as_owner, approval):
    from datetime import timedelta

    from django.utils import timezone

    Approval.objects.filter(pk=approval.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    error = assert_error(as_owner.post(f"/api/approvals/{approval.pk}/approve"), 409, "state_conflict")
    assert "expired" in error["message"]


# --- auth details -------------------------------------------------------------------------


def test_session_post_without_csrf_token_is_403(owner, conversation):
    client = ApiClient(owner, csrf=False)
    assert_error(
        client.post(f"/api/conversations/{conversation.pk}/turns", {"question": "hi"}), 403, "forbidden"
    )
    assert not Turn.objects.exists()


def test_openapi_document_and_docs_page_are_served():
    client = ApiClient()
    schema = client.get("/api/openapi.json").json()
    paths = set(schema["paths"])
    assert {
        "/api/conversations",
        "/api/conversations/{conversation_id}",
        "/api/conversations/{conversation_id}/turns",
        "/api/turns/{turn_id}",
        "/api/turns/{turn_id}/events",
        "/api/turns/{turn_id}/cancel",
        "/api/turns/{turn_id}/resume",
        "/api/turns/{turn_id}/retry",
        "/api/approvals/{approval_id}/approve",
        "/api/approvals/{approval_id}/reject",
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/predictions",
        "/api/runs/{base}/compare/{candidate}",
    } <= paths
    assert client.get("/api/docs").status_code == 200


def test_resume_while_another_turn_of_the_conversation_is_active_is_409(as_owner, owner, conversation):
    old = start(conversation, owner)
    turn_interrupt(turn_id=old.pk, reason="worker lost")
    start(conversation, owner, "the active one")
    assert_error(as_owner.post(f"/api/turns/{old.pk}/resume"), 409, "state_conflict")
    old.refresh_from_db()
    assert old.status == "interrupted"


def test_delete_with_several_turns_removes_them_all(as_owner, owner, conversation):
    first = start(conversation, owner)
    turn_cancel(turn_id=first.pk)
    second = start(conversation, owner, "again")
    assert as_owner.delete(f"/api/conversations/{conversation.pk}").status_code == 204
    assert not Turn.objects.filter(pk__in=[first.pk, second.pk]).exists()

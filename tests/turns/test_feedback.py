"""End users' feedback on chat turns (docs/chat-and-api.md#feedback):
``POST /api/turns/{id}/feedback``, one current rating per user and turn with
its history, who may rate what, and the admin's turn page and list filter."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.api_support import ApiClient, assert_error
from turns.models import Turn, TurnFeedback, TurnKind
from turns.services import conversation_create, turn_create, turn_start

pytestmark = pytest.mark.django_db


def _answered(owner, question: str = "What is 6*7?") -> Turn:
    """A chat turn that answered. The driver's own tests drive turns to an
    answer; here only the end state matters (the browser test drives it)."""
    conversation = conversation_create(owner=owner, title="Sums")
    turn = turn_start(conversation=conversation, question=question, acting_user=owner)
    Turn.objects.filter(pk=turn.pk).update(
        status="succeeded", outcome="answered", answer="42", stop_reason="final"
    )
    return Turn.objects.get(pk=turn.pk)


def _rate(client: ApiClient, turn: Turn, body: dict):
    return client.post(f"/api/turns/{turn.pk}/feedback", body)


def test_a_rating_is_stored_changed_and_its_history_kept(owner):
    turn = _answered(owner)
    client = ApiClient(owner)
    first = _rate(client, turn, {"rating": "down", "comment": "  the total is wrong  "})
    assert first.status_code == 200, first.content
    assert {k: first.json()[k] for k in ("turn_id", "user", "rating", "comment", "history")} == {
        "turn_id": turn.pk,
        "user": "owner",
        "rating": "down",
        "comment": "the total is wrong",
        "history": 1,
    }
    second = _rate(client, turn, {"rating": "up"})
    assert (second.json()["rating"], second.json()["comment"], second.json()["history"]) == ("up", "", 2)
    rows = list(
        TurnFeedback.objects.filter(turn=turn).order_by("pk").values_list("rating", "comment", "current")
    )
    assert rows == [("down", "the total is wrong", False), ("up", "", True)]


def test_staff_may_rate_anothers_turn_each_with_their_own_current_rating(owner, staff):
    turn = _answered(owner)
    assert _rate(ApiClient(owner), turn, {"rating": "up"}).status_code == 200
    assert _rate(ApiClient(staff), turn, {"rating": "down", "comment": "no source"}).status_code == 200
    current = sorted(
        TurnFeedback.objects.filter(turn=turn, current=True).values_list("user__username", "rating")
    )
    assert current == [("owner", "up"), ("staff", "down")]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"rating": "meh"}, 422, "invalid"),
        ({"rating": ""}, 422, "invalid"),
        ({}, 422, "invalid"),
        ({"rating": "up", "comment": "x" * 4001}, 422, "invalid"),
    ],
)
def test_a_rating_that_is_not_up_or_down_is_refused_and_nothing_is_written(owner, body, status, code):
    turn = _answered(owner)
    assert_error(_rate(ApiClient(owner), turn, body), status, code)
    assert not TurnFeedback.objects.exists()


def test_someone_elses_turn_is_404_and_a_turn_not_yet_answered_is_409(owner, teammate):
    turn = _answered(owner)
    assert_error(_rate(ApiClient(teammate), turn, {"rating": "up"}), 404, "not_found")
    running = turn_start(
        conversation=conversation_create(owner=owner, title="Busy"),
        question="Still going?",
        acting_user=owner,
    )
    error = assert_error(_rate(ApiClient(owner), running, {"rating": "up"}), 409, "state_conflict")
    assert error["message"] == f"turn {running.pk} has not answered (status queued): feedback rates an answer"
    Turn.objects.filter(pk=running.pk).update(status="succeeded", outcome="asked")
    assert_error(_rate(ApiClient(owner), running, {"rating": "down"}), 409, "state_conflict")
    assert not TurnFeedback.objects.exists()


def test_an_evaluation_turn_takes_no_feedback(staff):
    turn = turn_create(owner=staff, question="What is 1+1?", kind=TurnKind.EVALUATION)
    Turn.objects.filter(pk=turn.pk).update(status="succeeded", outcome="answered", answer="2")
    error = assert_error(_rate(ApiClient(staff), turn, {"rating": "up"}), 409, "state_conflict")
    assert error["message"].endswith("is of kind evaluation: feedback is for chat turns")


def test_an_api_key_cannot_rate(owner):
    from apikeys.services import apikey_create

    turn = _answered(owner)
    _, secret = apikey_create(name="bot", created_by=owner)
    response = ApiClient(api_key=secret).post(f"/api/turns/{turn.pk}/feedback", {"rating": "up"})
    assert_error(response, 403, "forbidden")
    assert not TurnFeedback.objects.exists()


def test_the_turn_page_shows_every_rating_and_the_list_filters_by_rating(
    client, owner, teammate, django_user_model
):
    admin_user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root-123")
    down = _answered(owner, "Capital of Australia?")
    up = _answered(owner, "What is 2+2?")
    silent = _answered(teammate, "What is 3+3?")
    _rate(ApiClient(owner), down, {"rating": "up"})
    _rate(ApiClient(owner), down, {"rating": "down", "comment": "it is Canberra"})
    _rate(ApiClient(owner), up, {"rating": "up"})
    client.force_login(admin_user)

    page = client.get(reverse("admin:turns_turn_change", args=[down.pk])).content.decode()
    assert "<td>thumbs down</td><td>it is Canberra</td>" in page
    assert page.count("<td>current</td>") == 1 and page.count("<td>replaced</td>") == 1

    listing = reverse("admin:turns_turn_changelist")

    def listed(query: str) -> set[int]:
        body = client.get(f"{listing}?{query}").content.decode()
        return {
            t.pk
            for t in (down, up, silent)
            if f'href="{reverse("admin:turns_turn_change", args=[t.pk])}' in body
        }

    assert listed("feedback=down") == {down.pk}
    assert listed("feedback=up") == {up.pk}
    assert listed("feedback=comment") == {down.pk}
    assert listed("feedback=none") == {silent.pk}
    assert "up 0 · down 1" in client.get(f"{listing}?feedback=down").content.decode()

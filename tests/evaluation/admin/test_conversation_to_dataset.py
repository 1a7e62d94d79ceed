"""From chat to dataset (issue 41): the conversation list's "Add conversation
to dataset…" makes a conversation example of each chosen conversation — its
user messages in order, its answers as draft gold answers to confirm
(``evaluation.datasets.from_conversations``)."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.urls import reverse

from evaluation.datasets.jsonl import parse_records
from evaluation.datasets.versions import examples_at
from evaluation.models import Dataset, DatasetVersion
from tests.evaluation.datasets.test_examples_from_turns import answered, messages_of
from tests.turns.test_admin import failed_turn
from turns.models import Conversation, Turn

pytestmark = pytest.mark.django_db

CONVERSATION_LIST = reverse("admin:turns_conversation_changelist")


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


@pytest.fixture
def talk(staff) -> dict[str, Any]:
    """A conversation: two answered turns around a failed one."""
    conversation = Conversation.objects.create(owner=staff, title="sums")
    first = answered(staff, "What is 6*7?", "42", conversation)
    broken = failed_turn(staff)
    Turn.objects.filter(pk=broken.pk).update(conversation=conversation, position=2)
    last = answered(staff, "And that plus one?", "44", conversation)
    return {"conversation": conversation, "first": first, "broken": broken, "last": last}


def action(client: Any, conversations: list[Conversation], **fields: Any) -> Any:
    data = {
        "action": "add_conversation_to_dataset",
        "_selected_action": [c.pk for c in conversations],
        "index": "0",
        **fields,
    }
    return client.post(CONVERSATION_LIST, data)


def submit(client: Any, conversations: list[Conversation], golds: dict[Turn, str], **fields: Any) -> Any:
    data = {"post": "yes", "task_type": "math", "scorer": "", **fields}
    data.update({f"gold_{turn.pk}": gold for turn, gold in golds.items()})
    return action(client, conversations, **data)


def test_the_page_shows_each_conversations_finished_turns_with_their_answers_as_drafts(staff_client, talk):
    page = html.unescape(action(staff_client, [talk["conversation"]]).content.decode())
    assert "What is 6*7?" in page and "And that plus one?" in page
    assert f'name="gold_{talk["first"].pk}" rows="2">42</textarea>' in page
    assert f'name="gold_{talk["last"].pk}" rows="2">44</textarea>' in page
    assert f"gold_{talk['broken'].pk}" not in page  # a failed turn is left out
    assert not Dataset.objects.exists()


def test_submitting_makes_a_conversation_example_in_one_new_version(staff_client, talk, staff):
    first, last, conversation = talk["first"], talk["last"], talk["conversation"]
    response = submit(
        staff_client, [conversation], {first: "42", last: "43"}, new_name="chats", scorer="numeric"
    )
    assert response.status_code == 302
    assert messages_of(response) == [f"dataset chats: version 1 — 1 added (conversation-{conversation.pk})"]
    dataset = Dataset.objects.get(name="chats")
    (example,) = examples_at(dataset)
    assert example.external_id == f"conversation-{conversation.pk}"
    assert example.question == "What is 6*7?" and example.task_type == "math"
    assert example.metadata == {
        "turns": [
            {"user": "What is 6*7?", "answer": "42", "scorer": "numeric"},
            {"user": "And that plus one?", "answer": "43", "scorer": "numeric"},
        ],
        "source_conversation": conversation.pk,
    }
    assert DatasetVersion.objects.get(dataset=dataset).source == f"conversations {conversation.pk}"
    # the example reads back as a dataset line would
    line = {"question_id": "x", "task_type": "math", "turns": example.metadata["turns"]}
    assert parse_records([line], source="check")[0].metadata["turns"] == example.metadata["turns"]
    # the same conversation again: reported, not added
    again = submit(staff_client, [conversation], {first: "42", last: "43"}, dataset="chats")
    assert messages_of(again)[-1].endswith(f"already there, not added: conversation {conversation.pk}")
    dataset.refresh_from_db()
    assert dataset.version == 1


def test_an_empty_gold_leaves_its_turn_unscored_and_no_gold_at_all_is_refused(staff_client, talk):
    first, last, conversation = talk["first"], talk["last"], talk["conversation"]
    refused = submit(staff_client, [conversation], {first: " ", last: ""}, new_name="chats")
    assert refused.status_code == 200
    assert "give at least one turn a gold answer" in html.unescape(refused.content.decode())
    assert not Dataset.objects.exists()
    submit(staff_client, [conversation], {first: "", last: "43"}, new_name="chats")
    (example,) = examples_at(Dataset.objects.get(name="chats"))
    assert example.metadata["turns"] == [
        {"user": "What is 6*7?"},
        {"user": "And that plus one?", "answer": "43"},
    ]

"""From chat to dataset: "Add to dataset…" offers the turn's tool calls as
the expected trajectory, to keep, edit or drop; a bad one is an error on its
row and nothing is written."""

from __future__ import annotations

import html
import json

import pytest

from agentlab.agent.providers.scripted import final, tool_call
from evaluation.models import Example
from tests.evaluation.datasets.test_examples_from_turns import (  # noqa: F401 - fixtures
    action_post,
    arithmetic,
    form_post,
    staff_client,
)
from tests.turns.test_admin import drive
from turns.models import Turn
from turns.services import turn_create

pytestmark = pytest.mark.django_db(transaction=True)

CALLS = [{"tool": "calculator", "args": {"expression": "6*7"}}]


@pytest.fixture
def computed(staff) -> Turn:
    """A turn that called the calculator, then answered 42."""
    turn = turn_create(owner=staff, question="What is 6*7?")
    drive(turn.pk, [tool_call("calculator", {"expression": "6*7"}), final("42", evidence="e", reasoning="r")])
    return Turn.objects.get(pk=turn.pk)


def test_the_form_offers_the_turns_tool_calls_as_the_expected_trajectory(staff_client, computed, arithmetic):
    body = html.unescape(action_post(staff_client, [computed]).content.decode())
    assert "expected trajectory (the turn's tool calls: keep, edit or empty)" in body
    draft = body.split('name="gold-0-trajectory"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    assert json.loads(draft) == CALLS  # final_answer is the protocol's, not offered


@pytest.mark.parametrize(
    ("trajectory", "stored"),
    [
        (json.dumps(CALLS), CALLS),  # kept
        (
            '[{"tool": "calculator", "args": {"expression": "7*6"}}]',
            [{"tool": "calculator", "args": {"expression": "7*6"}}],
        ),
        ("", None),  # dropped
    ],
)
def test_kept_edited_or_dropped(staff_client, computed, arithmetic, trajectory, stored):
    form_post(staff_client, {computed: "42"}, dataset="arithmetic", **{"gold-0-trajectory": trajectory})
    example = Example.objects.get(external_id=f"turn-{computed.pk}")
    assert example.metadata.get("trajectory") == stored


def test_a_bad_trajectory_is_an_error_on_its_row_and_nothing_is_written(staff_client, computed, arithmetic):
    response = form_post(
        staff_client, {computed: "42"}, dataset="arithmetic", **{"gold-0-trajectory": '[{"args": {}}]'}
    )
    assert "field &#x27;trajectory&#x27; item 1: &#x27;tool&#x27; is missing" in response.content.decode()
    not_json = form_post(
        staff_client, {computed: "42"}, dataset="arithmetic", **{"gold-0-trajectory": "[oops"}
    )
    assert "not JSON" in not_json.content.decode()
    assert not Example.objects.filter(external_id=f"turn-{computed.pk}").exists()

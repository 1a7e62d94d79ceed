"""From chat turns to examples: the turn list's "Add to dataset…" action, the
``POST /api/datasets/{name}/examples`` endpoint, the example page's source
turn and the turn page's datasets (``evaluation.datasets.from_turns``).

Turns are made with ``turn_create`` and answered by the real driver with a
scripted LLM; datasets with ``dataset_import``.
"""

from __future__ import annotations

import html
from typing import Any

import httpx
import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from agentlab.agent.providers.scripted import final
from apikeys.services import apikey_create
from evaluation.datasets.services import dataset_import
from evaluation.datasets.spec import ExampleSpec
from evaluation.datasets.versions import examples_at
from evaluation.models import Dataset, DatasetVersion, Example
from tests.api_support import ApiClient, assert_error
from tests.config.test_http_edges import server  # noqa: F401 - the daphne fixture
from tests.turns.test_admin import drive, failed_turn
from turns.models import Conversation, Turn
from turns.services import turn_create

pytestmark = pytest.mark.django_db

TURN_LIST = reverse("admin:turns_turn_changelist")


def answered(owner: Any, question: str, answer: str, conversation: Conversation | None = None) -> Turn:
    """A turn of ``conversation`` that the driver answered with ``answer``."""
    turn = turn_create(owner=owner, question=question, conversation=conversation)
    drive(turn.pk, [final(answer, evidence="stub", reasoning="stub", usage=(10, 2))])
    turn.refresh_from_db()
    assert (turn.status, turn.answer) == ("succeeded", answer)
    return turn


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


@pytest.fixture
def arithmetic(staff) -> Dataset:
    """A dataset at version 1 holding one example, "What is 2+2?"."""
    return dataset_import(
        name="arithmetic",
        examples=[ExampleSpec(external_id="a1", question="What is 2+2?", answer="4", task_type="math")],
    )


@pytest.fixture
def chat(staff) -> dict[str, Turn]:
    """A conversation of two answered turns, and a turn of its own."""
    conversation = Conversation.objects.create(owner=staff, title="sums")
    return {
        "first": answered(staff, "What is 6*7?", "42", conversation),
        "second": answered(staff, "And that plus one?", "44", conversation),
        "alone": answered(staff, "What is 2+2?", "4"),
    }


def action_post(client: Any, turns: list[Turn], **fields: Any) -> Any:
    """POST the "Add to dataset…" action for ``turns`` to the turn list (no
    ``post`` field: the first step, which shows the form)."""
    data = {"action": "add_to_dataset", "_selected_action": [t.pk for t in turns], "index": "0", **fields}
    return client.post(TURN_LIST, data)


def form_post(client: Any, golds: dict[Turn, str], **fields: Any) -> Any:
    """Submit the intermediate form: one row per turn with its gold answer."""
    data: dict[str, Any] = {
        "action": "add_to_dataset",
        "post": "yes",
        "_selected_action": [t.pk for t in golds],
        "gold-TOTAL_FORMS": str(len(golds)),
        "gold-INITIAL_FORMS": str(len(golds)),
        "task_type": "math",
        "scorer": "",
        **fields,
    }
    for i, (turn, gold) in enumerate(golds.items()):
        data[f"gold-{i}-turn_id"] = str(turn.pk)
        data[f"gold-{i}-answer"] = gold
    return client.post(TURN_LIST, data)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


# --- the admin action ------------------------------------------------------------------


def test_the_action_shows_each_turns_question_and_its_answer_as_a_draft_gold(staff_client, chat, arithmetic):
    response = action_post(staff_client, [chat["first"], chat["second"]])
    assert response.status_code == 200
    assert response.templates[0].name == "admin/evaluation/add_to_dataset.html"
    body = html.unescape(response.content.decode())
    assert "What is 6*7?" in body and "And that plus one?" in body
    assert '<textarea name="gold-0-answer" cols="60" rows="2" id="id_gold-0-answer">\n42</textarea>' in body
    assert '<textarea name="gold-1-answer" cols="60" rows="2" id="id_gold-1-answer">\n44</textarea>' in body
    assert '<option value="arithmetic">arithmetic</option>' in body
    assert '<option value="numeric">numeric</option>' in body
    assert DatasetVersion.objects.filter(dataset=arithmetic).count() == 1  # showing writes nothing


def test_submitting_makes_one_version_with_the_corrected_gold_and_the_conversation(
    staff_client, staff, chat, arithmetic
):
    first, second = chat["first"], chat["second"]
    response = form_post(staff_client, {first: "42", second: "43"}, dataset="arithmetic", scorer="numeric")
    assert response.status_code == 302 and response.url == TURN_LIST
    assert messages_of(response) == [
        f"dataset arithmetic: version 2 — 2 added (turn-{first.pk}, turn-{second.pk})"
    ]
    arithmetic.refresh_from_db()
    assert arithmetic.version == 2
    version = DatasetVersion.objects.get(dataset=arithmetic, number=2)
    assert (version.added, version.changed, version.removed, version.total) == (2, 0, 0, 3)
    assert version.source == f"chat turns {first.pk}, {second.pk}"
    assert version.created_by == staff
    made = {e.external_id: e for e in examples_at(arithmetic)}
    assert sorted(made) == ["a1", f"turn-{first.pk}", f"turn-{second.pk}"]
    corrected = made[f"turn-{second.pk}"]
    assert (corrected.question, corrected.answer, corrected.task_type, corrected.scorer) == (
        "And that plus one?",
        "43",
        "math",
        "numeric",
    )
    assert corrected.metadata == {
        "source_turn": second.pk,
        "conversation": [{"question": "What is 6*7?", "answer": "42"}],
    }
    assert made[f"turn-{first.pk}"].metadata == {"source_turn": first.pk, "conversation": []}
    assert made[f"turn-{first.pk}"].valid_from == 2


def test_a_turn_whose_question_is_in_the_dataset_is_reported_not_added(staff_client, chat, arithmetic):
    alone, first = chat["alone"], chat["first"]  # alone asks "What is 2+2?", as example a1 does
    response = form_post(staff_client, {first: "42", alone: "4"}, dataset="arithmetic")
    assert messages_of(response) == [
        f"dataset arithmetic: version 2 — 1 added (turn-{first.pk}); "
        f"already there, not added: turn {alone.pk}"
    ]
    again = form_post(staff_client, {first: "42"}, dataset="arithmetic")
    assert messages_of(again)[-1] == (
        f"dataset arithmetic: nothing added, still version 2; already there, not added: turn {first.pk}"
    )
    assert [e.external_id for e in examples_at(arithmetic)] == ["a1", f"turn-{first.pk}"]
    assert list(DatasetVersion.objects.filter(dataset=arithmetic).values_list("number", "source")) == [
        (2, f"chat turns {first.pk}"),
        (1, "import "),
    ]


def test_a_turn_without_an_answer_needs_a_gold_answer_on_its_row(staff_client, staff, chat, arithmetic):
    failed = failed_turn(staff, "Loop until told to stop")
    assert failed.answer == ""
    shown = html.unescape(action_post(staff_client, [failed]).content.decode())
    assert '<textarea name="gold-0-answer" cols="60" rows="2" id="id_gold-0-answer">\n</textarea>' in shown
    refused = form_post(staff_client, {chat["first"]: "42", failed: "  "}, dataset="arithmetic")
    assert refused.status_code == 200
    row_errors = [form.errors for form in refused.context["rows"]]
    assert row_errors == [{}, {"answer": ["it has no answer (failed); give the gold answer"]}]
    assert DatasetVersion.objects.filter(dataset=arithmetic).count() == 1  # nothing written
    accepted = form_post(staff_client, {chat["first"]: "42", failed: "stop"}, dataset="arithmetic")
    assert accepted.status_code == 302
    assert Example.objects.get(external_id=f"turn-{failed.pk}", valid_to=None).answer == "stop"


def test_a_new_dataset_name_makes_its_version_1_and_a_bad_one_is_refused(staff_client, chat, arithmetic):
    first = chat["first"]
    bad = form_post(staff_client, {first: "42"}, new_name="from/chat")
    assert bad.status_code == 200
    assert bad.context["form"].non_field_errors() == [
        "dataset name 'from/chat' contains '/'; control characters and / \\ ? # % @ are not allowed "
        "(NAME@2 names a version)"
    ]
    both = form_post(staff_client, {first: "42"}, new_name="x", dataset="arithmetic")
    assert both.context["form"].non_field_errors() == [
        "Choose an existing dataset or give a new name, not both."
    ]
    assert Dataset.objects.count() == 1  # neither wrote anything
    named = form_post(staff_client, {first: "42"}, new_name="from chat")
    assert named.status_code == 302
    created = Dataset.objects.get(name="from chat")
    assert (created.version, created.source) == (1, "chat turns")
    assert [e.external_id for e in examples_at(created)] == [f"turn-{first.pk}"]
    version = DatasetVersion.objects.get(dataset=created)
    assert (version.number, version.added, version.total) == (1, 1, 1)


def test_the_example_links_its_source_turn_and_the_turn_page_lists_its_datasets(
    staff_client, chat, arithmetic
):
    first = chat["first"]
    form_post(staff_client, {first: "42"}, dataset="arithmetic")
    example = Example.objects.get(external_id=f"turn-{first.pk}")
    page = staff_client.get(reverse("admin:evaluation_example_change", args=[example.pk])).content.decode()
    turn_url = reverse("admin:turns_turn_change", args=[first.pk])
    assert f'<a href="{turn_url}">turn #{first.pk}</a>' in page
    turn_page = html.unescape(staff_client.get(turn_url).content.decode())
    example_url = reverse("admin:evaluation_example_change", args=[example.pk])
    assert f'<a href="{example_url}">arithmetic · turn-{first.pk}</a>' in turn_page
    alone_page = html.unescape(
        staff_client.get(reverse("admin:turns_turn_change", args=[chat["alone"].pk])).content.decode()
    )
    a1_url = reverse("admin:evaluation_example_change", args=[Example.objects.get(external_id="a1").pk])
    assert f'<a href="{a1_url}">arithmetic · a1</a>' in alone_page  # same question text
    second_page = html.unescape(
        staff_client.get(reverse("admin:turns_turn_change", args=[chat["second"].pk])).content.decode()
    )
    assert "in no dataset" in second_page


def test_the_turn_pages_dataset_list_is_one_query(chat, arithmetic, django_assert_num_queries):
    from evaluation.datasets.from_turns import turn_examples

    with django_assert_num_queries(1):
        found = [(e.dataset.name, e.external_id) for e in turn_examples(turn=chat["alone"])]
    assert found == [("arithmetic", "a1")]


# --- the API -----------------------------------------------------------------------------


def url(name: str) -> str:
    return f"/api/datasets/{name}/examples"


def test_the_api_adds_turns_and_reports_duplicates(staff, chat, arithmetic):
    api = ApiClient(staff)
    first, second, alone = chat["first"], chat["second"], chat["alone"]
    body = {
        "examples": [
            {"turn_id": second.pk, "answer": "43", "task_type": "math", "scorer": "numeric"},
            {"turn_id": alone.pk, "task_type": "math"},
            {"turn_id": first.pk, "task_type": "math"},
        ]
    }
    response = api.post(url("arithmetic"), body)
    assert response.status_code == 201, response.content
    assert response.json() == {
        "dataset": "arithmetic",
        "version": 2,
        "added": [f"turn-{second.pk}", f"turn-{first.pk}"],
        "duplicates": [alone.pk],
    }
    made = Example.objects.get(external_id=f"turn-{first.pk}", valid_to=None)
    assert (made.answer, made.scorer, made.metadata["source_turn"]) == ("42", "", first.pk)
    assert Example.objects.get(external_id=f"turn-{second.pk}", valid_to=None).answer == "43"
    again = api.post(url("arithmetic"), {"examples": [{"turn_id": first.pk, "task_type": "math"}]})
    assert again.status_code == 200
    assert again.json() == {"dataset": "arithmetic", "version": 2, "added": [], "duplicates": [first.pk]}


def test_the_api_creates_a_dataset_only_when_asked(staff, chat):
    api = ApiClient(staff)
    body: dict[str, Any] = {"examples": [{"turn_id": chat["first"].pk, "task_type": "math"}]}
    missing = assert_error(api.post(url("from-chat"), body), 404, "not_found")
    assert missing["message"] == "no dataset named 'from-chat' (ask to create it to make a new one)"
    created = api.post(url("from-chat"), {**body, "create": True})
    assert created.status_code == 201
    assert created.json()["version"] == 1 and created.json()["added"] == [f"turn-{chat['first'].pk}"]
    assert Dataset.objects.get(name="from-chat").version == 1


def test_the_api_is_for_staff_sessions_only(staff, owner, chat, arithmetic):
    body = {"examples": [{"turn_id": chat["first"].pk, "task_type": "math"}]}
    forbidden = assert_error(ApiClient(owner).post(url("arithmetic"), body), 403, "forbidden")
    assert forbidden["message"] == "only staff may add examples to a dataset"
    _, raw = apikey_create(name="staff key", created_by=staff)
    keyed = assert_error(ApiClient(api_key=raw).post(url("arithmetic"), body), 403, "forbidden")
    assert keyed["message"] == "API keys may read runs and predictions only"
    assert_error(ApiClient().post(url("arithmetic"), body), 401, "unauthenticated")
    assert_error(ApiClient(staff, csrf=False).post(url("arithmetic"), body), 403, "forbidden")
    assert Dataset.objects.get(name="arithmetic").version == 1


def test_the_api_names_an_unknown_turn_and_writes_nothing(staff, chat, arithmetic):
    body = {
        "examples": [
            {"turn_id": chat["first"].pk, "task_type": "math"},
            {"turn_id": 987654, "task_type": "x"},
        ]
    }
    error = assert_error(ApiClient(staff).post(url("arithmetic"), body), 404, "not_found")
    assert error["message"] == "no turn 987654"
    assert Dataset.objects.get(name="arithmetic").version == 1
    assert not Example.objects.filter(external_id__startswith="turn-").exists()


@pytest.mark.parametrize(
    ("examples", "loc"),
    [
        (None, ["body", "payload", "examples"]),
        ([], ["body", "payload", "examples"]),
        ([{"turn_id": "x", "task_type": "math"}], ["body", "payload", "examples", "0", "turn_id"]),
        ([{"turn_id": 0, "task_type": "math"}], ["body", "payload", "examples", "0", "turn_id"]),
        ([{"turn_id": 1}], ["body", "payload", "examples", "0", "task_type"]),
        ([{"turn_id": 1, "task_type": ""}], ["body", "payload", "examples", "0", "task_type"]),
    ],
)
def test_a_malformed_body_is_422_naming_the_field(staff, arithmetic, examples, loc):
    body = {} if examples is None else {"examples": examples}
    error = assert_error(ApiClient(staff).post(url("arithmetic"), body), 422, "invalid")
    assert [d["loc"] for d in error["details"]] == [loc]


@pytest.mark.parametrize(
    ("example", "message"),
    [
        (
            {"scorer": "bogus"},
            "turn {pk}: unknown scorer 'bogus'; known scorers: choice, contains, exact, f1, judge, "
            "numeric, sql_result",
        ),
        ({"answer": " "}, "turn {pk}: the gold answer is empty; give one; nothing done"),
        ({"task_type": "   "}, "turn {pk}: the task type must be 1 to 64 characters"),
    ],
)
def test_a_bad_example_is_400_and_writes_nothing(staff, chat, arithmetic, example, message):
    pk = chat["first"].pk
    body = {
        "examples": [
            {"turn_id": chat["second"].pk, "task_type": "math"},
            {"turn_id": pk, "task_type": "math", **example},
        ]
    }
    error = assert_error(ApiClient(staff).post(url("arithmetic"), body), 400, "bad_input")
    assert error["message"] == message.format(pk=pk)
    assert Dataset.objects.get(name="arithmetic").version == 1
    assert not Example.objects.filter(external_id__startswith="turn-").exists()


def test_odd_bodies_and_names_are_refused_in_the_error_shape(staff, chat, arithmetic):
    api = ApiClient(staff)
    one = {"turn_id": chat["first"].pk, "task_type": "math"}
    twice = assert_error(api.post(url("arithmetic"), {"examples": [one, one]}), 400, "bad_input")
    assert twice["message"] == f"turn {chat['first'].pk} is given twice; nothing done"
    assert_error(api.post(url("arithmetic"), [one]), 422, "invalid")
    assert_error(api.post(url("arithmetic"), {"examples": one}), 422, "invalid")
    raw = api.client.post(
        url("arithmetic"),
        data=b'{"examples": [',
        content_type="application/json",
        headers={"X-CSRFToken": api.token},
    )
    assert (raw.status_code, raw.json()) == (
        400,
        {
            "error": {
                "code": "bad_input",
                "message": "the body is not JSON: Expecting value: line 1 column 15 (char 14)",
                "details": None,
            }
        },
    )
    demo = assert_error(api.post(url("demo"), {"examples": [one], "create": True}), 400, "bad_input")
    reserved = "dataset name 'demo' is reserved for the project's demo dataset; choose another name"
    assert demo["message"] == reserved
    at = assert_error(api.post(url("x@2"), {"examples": [one], "create": True}), 400, "bad_input")
    assert "contains '@'" in at["message"]
    # a name no dataset may have is refused as such, not "no dataset named … (ask to create it)"
    at = assert_error(api.post(url("x@2"), {"examples": [one]}), 400, "bad_input")
    assert "contains '@'" in at["message"]
    assert Dataset.objects.count() == 1
    # the demo dataset, once registered, does not change
    from evaluation.datasets.services import dataset_resolve

    dataset_resolve(name_or_path="demo")
    demo = assert_error(api.post(url("demo"), {"examples": [one]}), 400, "bad_input")
    assert "is the project's own demo and does not change" in demo["message"]
    assert Dataset.objects.get(name="demo").version == 1


def test_a_failed_turn_through_the_api_needs_an_answer(staff, arithmetic):
    failed = failed_turn(staff, "Loop until told to stop")
    api = ApiClient(staff)
    refused = assert_error(
        api.post(url("arithmetic"), {"examples": [{"turn_id": failed.pk, "task_type": "math"}]}),
        400,
        "bad_input",
    )
    assert refused["message"] == (
        f"turn {failed.pk}: it has no answer (failed); give the gold answer; nothing done"
    )
    given = api.post(
        url("arithmetic"), {"examples": [{"turn_id": failed.pk, "task_type": "math", "answer": "stop"}]}
    )
    assert given.status_code == 201 and given.json()["added"] == [f"turn-{failed.pk}"]


# --- a real server -------------------------------------------------------------------------


def test_multipart_and_form_posts_get_415_in_the_error_shape_under_daphne(server):
    client: httpx.Client = server["client"]
    multipart = client.post(url("anything"), files={"examples": (None, "[]")})
    form = client.post(url("anything"), data={"examples": "[]", "create": "true"})
    for response, kind in ((multipart, "multipart/form-data"), (form, "application/x-www-form-urlencoded")):
        assert response.status_code == 415
        assert response.headers["content-type"].startswith("application/json")
        assert response.json() == {
            "error": {
                "code": "unsupported_media_type",
                "message": f"the API takes a JSON body (Content-Type: application/json), not {kind}",
                "details": None,
            }
        }
    broken = client.post(
        url("anything"), content=b'{"examples": [', headers={"Content-Type": "application/json"}
    )
    assert (broken.status_code, broken.json()["error"]["code"]) == (
        403,
        "forbidden",
    )  # not staff: before the body
    assert "Traceback" not in server["log"].read_text()

"""Who may do what: owner, teammate, outsider, anonymous, staff and API key ×
every API route and the websocket, each with the expected status (issue 5).

404, not 403, for objects the caller may not see; 401 when not logged in;
403 for an API key anywhere but runs and predictions (and for a session POST
without CSRF, tested in ``tests/turns/test_api.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from channels.testing import WebsocketCommunicator

from apikeys.services import apikey_create
from evaluation.models import Dataset
from evaluation.run.lifecycle import run_start
from tests.api_support import ApiClient
from tests.turns.conftest import _close_process_pools, stream_settings, ws_app  # noqa: F401 - fixtures
from turns.models import Approval
from turns.services import conversation_create, turn_interrupt, turn_start

ACTORS = ("owner", "teammate", "outsider", "anonymous", "staff", "api_key")


@dataclass
class World:
    users: dict
    raw_key: str
    ids: dict


@pytest.fixture
def world(owner, teammate, outsider, staff) -> World:
    empty = conversation_create(owner=owner, title="empty")
    busy = conversation_create(owner=owner, title="busy")
    queued = turn_start(conversation=busy, question="6*7?", acting_user=owner)
    paused_conversation = conversation_create(owner=owner, title="paused")
    paused = turn_start(conversation=paused_conversation, question="7*8?", acting_user=owner)
    turn_interrupt(turn_id=paused.pk, reason="worker lost")
    approval = Approval.objects.create(
        turn=queued, tool_call={"id": "c1", "name": "send_email", "arguments": {}}
    )
    dataset = Dataset.objects.create(name="tiny")
    run, _ = run_start(run_id="r1", dataset=dataset, config={}, started_by=staff)
    later, _ = run_start(run_id="r2", dataset=dataset, config={}, started_by=staff)
    _, raw = apikey_create(name="ci")
    return World(
        users={"owner": owner, "teammate": teammate, "outsider": outsider, "staff": staff},
        raw_key=raw,
        ids={
            "empty": empty.pk,
            "busy": busy.pk,
            "queued": queued.pk,
            "paused": paused.pk,
            "approval": approval.pk,
            "run": run.run_id,
            "later": later.run_id,
        },
    )


def client_for(world: World, actor: str) -> ApiClient:
    if actor == "anonymous":
        return ApiClient()
    if actor == "api_key":
        return ApiClient(api_key=world.raw_key)
    return ApiClient(world.users[actor])


def mine(ok: int) -> dict[str, int]:
    """Owned objects: the owner and staff succeed, others cannot see them."""
    return {"owner": ok, "staff": ok, "teammate": 404, "outsider": 404, "anonymous": 401, "api_key": 403}


def any_user(ok: int) -> dict[str, int]:
    return {"owner": ok, "staff": ok, "teammate": ok, "outsider": ok, "anonymous": 401, "api_key": 403}


def readers(ok: int) -> dict[str, int]:
    """Runs and predictions: every logged-in user and API keys."""
    return {"owner": ok, "staff": ok, "teammate": ok, "outsider": ok, "anonymous": 401, "api_key": ok}


ROUTES = [
    ("POST", "/api/conversations", {"title": "new"}, any_user(201)),
    ("GET", "/api/conversations", None, any_user(200)),
    ("GET", "/api/conversations/{empty}", None, mine(200)),
    ("DELETE", "/api/conversations/{busy}", None, mine(204)),
    ("POST", "/api/conversations/{empty}/turns", {"question": "hi"}, mine(202)),
    ("GET", "/api/turns/{queued}", None, mine(200)),
    ("GET", "/api/turns/{queued}/events?after=0", None, mine(200)),
    ("POST", "/api/turns/{queued}/cancel", None, mine(200)),
    ("POST", "/api/turns/{paused}/resume", None, mine(202)),
    ("POST", "/api/turns/{paused}/retry", None, mine(202)),
    ("POST", "/api/approvals/{approval}/approve", None, mine(200)),
    ("POST", "/api/approvals/{approval}/reject", None, mine(200)),
    ("GET", "/api/runs", None, readers(200)),
    ("GET", "/api/runs/{run}", None, readers(200)),
    ("GET", "/api/runs/{run}/predictions?correct=false", None, readers(200)),
    ("GET", "/api/runs/{run}/compare/{later}", None, readers(200)),
]

CASES = [
    pytest.param(method, path, body, actor, expected[actor], id=f"{actor}-{method}-{path}")
    for method, path, body, expected in ROUTES
    for actor in ACTORS
]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path", "body", "actor", "status"), CASES)
def test_route_permission_matrix(world, method, path, body, actor, status):
    client = client_for(world, actor)
    response = client.request(method, path.format(**world.ids), body)
    assert response.status_code == status, response.content
    if status >= 400:
        assert set(response.json()) == {"error"}


@pytest.mark.django_db
def test_unknown_ids_are_404_like_hidden_ones(world):
    client = client_for(world, "owner")
    for path in ("/api/conversations/999999", "/api/turns/999999", "/api/turns/999999/events"):
        assert client.get(path).status_code == 404
    assert client.post("/api/approvals/999999/approve").status_code == 404


@pytest.mark.django_db
def test_hidden_objects_are_untouched_by_a_refused_caller(world):
    from turns.models import Approval as ApprovalModel
    from turns.models import Conversation, Turn

    for actor in ("teammate", "outsider", "anonymous", "api_key"):
        client = client_for(world, actor)
        client.post("/api/turns/{queued}/cancel".format(**world.ids))
        client.post("/api/approvals/{approval}/approve".format(**world.ids))
        client.delete("/api/conversations/{busy}".format(**world.ids))
    assert Turn.objects.get(pk=world.ids["queued"]).status == "queued"
    assert ApprovalModel.objects.get(pk=world.ids["approval"]).status == "pending"
    assert Conversation.objects.filter(pk=world.ids["busy"]).exists()


# --- the websocket ------------------------------------------------------------------------

#: Close codes of ``turns.consumers`` (4401 not logged in, 4403 someone else's turn).
WS_EXPECTED = {
    "owner": "stream",
    "staff": "stream",
    "teammate": 4403,
    "outsider": 4403,
    "anonymous": 4401,
    "api_key": 4401,
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("stream_settings")
@pytest.mark.parametrize("actor", ACTORS)
async def test_websocket_permission_matrix(world, actor):
    user = world.users.get(actor)
    headers = [(b"x-api-key", world.raw_key.encode())] if actor == "api_key" else []
    communicator = WebsocketCommunicator(
        ws_app(user), f"/ws/turns/{world.ids['queued']}/?after=0", headers=headers
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected  # accepted, then closed with a code the page can explain
    expected = WS_EXPECTED[actor]
    if expected == "stream":
        frame = json.loads(await communicator.receive_from(timeout=5))
        assert (frame["seq"], frame["type"]) == (1, "turn.queued")
    else:
        assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": expected}
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("stream_settings")
async def test_websocket_unknown_turn_is_4404(world):
    communicator = WebsocketCommunicator(ws_app(world.users["owner"]), "/ws/turns/999999/")
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    await communicator.disconnect()

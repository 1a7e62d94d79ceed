"""The API's error shape everywhere under ``/api/`` (issue 47, item 10): a
path no route matches is a 404 in ``{"error": {"code", "message",
"details"}}``, not Django's HTML page; a dataset name holding U+FFFD — what a
URL path's bytes that are not UTF-8 are decoded to (daphne decodes the path
with ``errors="replace"``) — is refused as a bad name, and nothing is made."""

from __future__ import annotations

import pytest
from django.test import Client

from common.errors import BadInput
from evaluation.datasets.names import dataset_name_check
from evaluation.models import Dataset
from tests.api_support import ApiClient
from tests.turns.test_admin import answered_turn

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/nope"),
        ("GET", "/api/turns/abc/stream"),  # the SSE route takes an int
        ("POST", "/api/no/such/route"),
        ("DELETE", "/api/runs/x/y/z"),
    ],
)
def test_an_unknown_path_under_api_is_404_in_the_error_shape(staff, method, path):
    client = Client()
    client.force_login(staff)
    response = client.generic(method, path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "error": {
            "code": "not_found",
            "message": f"no API route at {path!r}; see /api/docs for the routes",
            "details": None,
        }
    }


def test_a_page_outside_api_keeps_django_s_not_found_page(staff):
    client = Client()
    client.force_login(staff)
    response = client.get("/no-such-page")
    assert response.status_code == 404 and not response["Content-Type"].startswith("application/json")


def test_a_known_route_s_own_404_is_unchanged(staff):
    turn = answered_turn(staff)
    response = ApiClient(staff).post(
        "/api/datasets/from-chat/examples", {"examples": [{"turn_id": turn.pk, "task_type": "math"}]}
    )
    assert response.status_code == 404
    assert (
        response.json()["error"]["message"]
        == "no dataset named 'from-chat' (ask to create it to make a new one)"
    )


def test_a_name_decoded_from_bytes_that_are_not_utf8_is_a_bad_name(staff):
    name = "a\ufffd\ufffd\ufffdb"  # b"a\xff\xfe\xfdb" in a URL path, as daphne decodes it
    turn = answered_turn(staff)
    body = {"examples": [{"turn_id": turn.pk, "task_type": "math"}], "create": True}
    response = ApiClient(staff).post(f"/api/datasets/{name}/examples", body)
    assert response.status_code == 400, response.content
    assert response.json()["error"] == {
        "code": "bad_input",
        "message": f"dataset name {name!r} contains the replacement character U+FFFD (what bytes that are "
        "not UTF-8 decode to); give the name as UTF-8 text",
        "details": None,
    }
    assert not Dataset.objects.exists()
    with pytest.raises(BadInput, match="U\\+FFFD"):
        dataset_name_check("\ufffd")
    assert dataset_name_check(" arc-é ") == "arc-é"  # other non-ASCII names stay fine

"""HTTP edge cases through a real daphne (Django's test client hides some:
a multipart POST to a JSON endpoint is a 400 there and was a 500 here).

One daphne per module, on a SQLite file of its own with in-process jobs and
the in-memory channel layer; a logged-in session with its CSRF cookie.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_support import session_script
from tests.daphne_support import daphne_running

ROOT = Path(__file__).resolve().parents[2]

SETUP = (
    session_script("edge-owner")
    + """
conversation = Conversation.objects.create(owner=user, title="edges")
print(json.dumps({"session": session.session_key, "conversation": conversation.pk}))
"""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("edges")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTLAB_", "DJANGO_", "CELERY_"))},
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "AGENTLAB_SQLITE_PATH": str(tmp / "edges.sqlite3"),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        env.pop(name, None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=180
    )
    out = subprocess.run(
        [sys.executable, "-c", SETUP],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    setup = json.loads(out.stdout.strip().splitlines()[-1])
    log = tmp / "daphne.log"
    with daphne_running(env, log) as base, httpx.Client(base_url=base, timeout=30) as client:
        client.cookies.set("sessionid", setup["session"])
        client.get("/")  # sets the csrftoken cookie
        token = client.cookies.get("csrftoken")
        assert token
        client.headers["X-CSRFToken"] = token
        yield {"client": client, "conversation": setup["conversation"], "log": log, "base": base}


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text[:200]
    body: dict[str, Any] = response.json()["error"]
    return body


def test_a_multipart_or_form_post_to_a_json_endpoint_is_415_not_500(server: dict[str, Any]) -> None:
    client: httpx.Client = server["client"]
    turns = f"/api/conversations/{server['conversation']}/turns"
    multipart = client.post(turns, files={"question": (None, "hi")})
    assert multipart.status_code == 415
    error = _error(multipart)
    assert error["code"] == "unsupported_media_type"
    assert (
        error["message"]
        == "the API takes a JSON body (Content-Type: application/json), not multipart/form-data"
    )
    form = client.post("/api/conversations", data={"title": "x"})
    assert (form.status_code, _error(form)["code"]) == (415, "unsupported_media_type")
    bare = client.post("/api/conversations", content=b'{"title": "x"}')  # no Content-Type at all
    assert bare.status_code == 415
    assert _error(bare)["message"].endswith(", not a body without a Content-Type")
    anonymous = httpx.post(f"{server['base']}/api/conversations", data={"title": "x"})
    assert anonymous.status_code == 415
    assert "RawPostDataException" not in server["log"].read_text()


def test_a_body_over_the_limit_is_413_in_the_api_s_shape(server: dict[str, Any]) -> None:
    client: httpx.Client = server["client"]
    big = json.dumps({"title": "x" * (8 * 1024 * 1024)})
    response = client.post("/api/conversations", content=big, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert _error(response) == {
        "code": "too_large",
        "message": "the request body is over the limit of 2,621,440 bytes",
        "details": None,
    }
    assert "Traceback" not in server["log"].read_text()


def test_a_lone_surrogate_in_json_text_becomes_the_replacement_character(server: dict[str, Any]) -> None:
    client: httpx.Client = server["client"]
    raw = '{"title": "before \\ud800 after"}'  # the JSON escape of a lone surrogate
    response = client.post("/api/conversations", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    assert response.json()["title"] == "before \ufffd after"


@pytest.mark.parametrize("after", ["", "\u0663", "-1", "1.0", " ", "12345678901234567890"])
def test_sse_after_takes_ascii_digits_only(server: dict[str, Any], after: str) -> None:
    client: httpx.Client = server["client"]
    response = client.get("/api/turns/1/stream", params={"after": after})
    assert response.status_code == 400
    assert "ASCII digits" in _error(response)["message"]


def test_the_site_icon_is_served(server: dict[str, Any]) -> None:
    """Before: ``/favicon.ico``, asked for by every browser, was a 404."""
    response = httpx.get(f"{server['base']}/favicon.ico")
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/x-icon"
    assert response.content[:4] == b"\x00\x00\x01\x00" and len(response.content) == 1150


def test_a_60000_character_api_key_gets_431_not_a_dropped_connection(server: dict[str, Any]) -> None:
    response = httpx.get(f"{server['base']}/api/runs", headers={"X-API-Key": "k" * 60_000})
    assert response.status_code == 431
    assert response.json()["error"]["code"] == "header_too_large"
    # a long key that fits in a line is only an unknown key
    assert httpx.get(f"{server['base']}/api/runs", headers={"X-API-Key": "k" * 10_000}).status_code == 401


def test_a_method_a_route_does_not_take_is_405_in_the_api_s_shape(server: dict[str, Any]) -> None:
    client: httpx.Client = server["client"]
    for method, path, allowed in (
        ("PUT", "/api/conversations", "GET, POST"),
        ("GET", "/api/datasets/any/examples", "POST"),
        ("DELETE", "/api/runs", "GET, POST"),
    ):
        response = client.request(method, path)
        assert response.status_code == 405, (method, path, response.text)
        assert _error(response) == {
            "code": "method_not_allowed",
            "message": f"{method} is not allowed here; use {allowed}",
            "details": None,
        }
        assert response.headers["allow"] == allowed


def test_an_experiment_s_leaderboard_edges_answer_in_the_api_s_shape(server: dict[str, Any]) -> None:
    client: httpx.Client = server["client"]
    for path, status in (
        ("/api/experiments/nope", 404),
        ("/api/experiments/Models%20A/B", 404),  # a name may hold "/"
        ("/api/experiments/" + "x" * 101, 422),
        ("/api/experiments/nope?alpha=abc", 422),
        ("/api/experiments/nope?alpha=2", 422),
    ):
        response = client.get(path)
        assert response.status_code == status, (path, response.text)
        assert _error(response)["message"], path
    response = client.post("/api/experiments/nope", json={})
    assert response.status_code == 405 and response.headers["allow"] == "GET"
    response = client.post("/api/experiments/nope", data={"a": "b"})  # a form: refused before the route
    assert response.status_code == 415 and _error(response)["code"] == "unsupported_media_type"
    assert "Traceback" not in server["log"].read_text()


def test_starting_or_cancelling_a_run_with_a_bad_body_is_a_4xx_not_500(server: dict[str, Any]) -> None:
    """``POST /api/runs`` (issue 46) through daphne: multipart and form bodies
    are 415 before the route; a broken JSON body and a non-staff session are 4xx."""
    client: httpx.Client = server["client"]
    multipart = client.post("/api/runs", files={"dataset": (None, "gsm8k")})
    assert (multipart.status_code, _error(multipart)["code"]) == (415, "unsupported_media_type")
    form = client.post("/api/runs/some-run/cancel", data={"x": "y"})
    assert (form.status_code, _error(form)["code"]) == (415, "unsupported_media_type")
    broken = client.post("/api/runs", content=b'{"dataset": ', headers={"Content-Type": "application/json"})
    assert 400 <= broken.status_code < 500 and _error(broken)["message"]
    not_staff = client.post("/api/runs", json={"dataset": "gsm8k"})
    assert (not_staff.status_code, _error(not_staff)["code"]) == (403, "forbidden")
    assert "Traceback" not in server["log"].read_text()


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ('"hello world"', "string"),
        ("42", "number"),
        ("[1, 2]", "array"),
        ("true", "boolean"),
        ("null", "null"),
    ],
)
def test_a_json_body_that_is_not_an_object_is_422_and_creates_nothing(
    server: dict[str, Any], body: str, kind: str
) -> None:
    client: httpx.Client = server["client"]
    before = client.get("/api/conversations").json()["count"]
    for path in ("/api/conversations", f"/api/conversations/{server['conversation']}/turns"):
        response = client.post(path, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 422, (path, response.text[:300])
        assert _error(response)["message"] == f"the body must be a JSON object, got a JSON {kind}"
    assert client.get("/api/conversations").json()["count"] == before

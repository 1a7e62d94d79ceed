"""Helpers for API tests: clients that log in the way browsers and programs do."""

from __future__ import annotations

from typing import Any

from django.middleware.csrf import _get_new_csrf_string
from django.test import Client


class ApiClient:
    """A test client that sends JSON, and — like the chat page — the CSRF
    cookie's value as ``X-CSRFToken`` on unsafe methods. ``csrf=False``
    leaves the header out; ``api_key`` sends ``X-API-Key``."""

    def __init__(self, user: Any = None, *, api_key: str | None = None, csrf: bool = True) -> None:
        self.client = Client(enforce_csrf_checks=True)
        if user is not None:
            self.client.force_login(user)
        self.token = _get_new_csrf_string()
        self.client.cookies["csrftoken"] = self.token
        self.csrf = csrf
        self.api_key = api_key

    def request(self, method: str, path: str, body: Any = None) -> Any:
        headers: dict[str, str] = {}
        if self.csrf and method not in ("GET", "HEAD"):
            headers["X-CSRFToken"] = self.token
        if self.api_key:
            headers["X-API-Key"] = self.api_key
        kwargs: dict[str, Any] = {"headers": headers}
        if body is not None:
            kwargs.update(data=body, content_type="application/json")
        return getattr(self.client, method.lower())(path, **kwargs)

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body if body is not None else {})

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    """The one error shape: ``{"error": {"code", "message", "details"}}``."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def session_script(username: str) -> str:
    """The start of a ``python -c`` script for a server the tests start in
    a process of its own: Django set up, and ``user`` (``username``) logged
    in as ``session`` — a database session whose key is the cookie a client
    sends. The caller appends what else it needs and prints the key."""
    return f"""
import json, django
django.setup()
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from turns.models import Conversation
user = get_user_model().objects.create_user({username!r}, password="pw-{username}-123")
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
"""


def session_turn_script(username: str, *, title: str, question: str) -> str:
    """A ``python -c`` script (``session_script``) that also starts a chat
    turn asking ``question`` in a new conversation and prints
    ``{"session": <cookie>, "turn": <turn id>}`` as its last line."""
    return (
        session_script(username)
        + f"""
from turns.services import turn_start
conversation = Conversation.objects.create(owner=user, title={title!r})
turn = turn_start(conversation=conversation, question={question!r}, acting_user=user)
print(json.dumps({{"session": session.session_key, "turn": turn.pk}}))
"""
    )

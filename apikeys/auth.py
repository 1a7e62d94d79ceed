"""The API's two ways in (docs/chat-and-api.md#the-http-api): the Django session, and ``X-API-Key``.

Browsers use the Django session: ``SessionAuth`` accepts a logged-in user and
checks CSRF on unsafe methods (the ``X-CSRFToken`` header, as Django's own
forms do). Programs use ``X-API-Key``: a key may read runs and predictions,
and one with the ``run`` scope start and cancel runs (``evaluation.api_runs``)
— on any other route a valid key gets 403, an unknown one 401.
``session_auth`` is the API's default (``config.api``); the evaluation
routes accept either (``evaluation.api``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import APIKeyCookie, APIKeyHeader
from ninja.utils import check_csrf

from .services import apikey_authenticate

API_KEY_HEADER = "X-API-Key"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


def _api_key_sent(request: HttpRequest) -> bool:
    return apikey_authenticate(raw=request.headers.get(API_KEY_HEADER)) is not None


class SessionAuth(APIKeyCookie):
    """The Django session, with CSRF checked on unsafe methods.

    Unlike ninja's ``django_auth`` the user is checked before CSRF, so an
    anonymous POST is 401 (log in), not 403. A request that carries a valid
    API key and no session is 403: keys never reach these routes.
    """

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self) -> None:
        super().__init__(csrf=False)  # checked below, after the user

    def authenticate(self, request: HttpRequest, key: str | None) -> User | None:
        user = request.user
        if not user.is_authenticated:
            if _api_key_sent(request):
                raise HttpError(403, "API keys may read runs and predictions only")
            return None
        if (
            request.method not in _SAFE_METHODS
            and not getattr(request, "_ninja_csrf_exempt", False)
            and check_csrf(request) is not None
        ):
            raise HttpError(403, "CSRF check failed: send the csrftoken cookie's value as X-CSRFToken")
        return user


class ApiKeyAuth(APIKeyHeader):
    """``X-API-Key: al_…`` — an ``apikeys.ApiKey`` that is not revoked."""

    param_name = API_KEY_HEADER

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        return apikey_authenticate(raw=key)


session_auth = SessionAuth()
api_key_auth = ApiKeyAuth()

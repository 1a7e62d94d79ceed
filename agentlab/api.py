"""The HTTP API (DESIGN.md §7): one ``NinjaAPI``, its auth and its one error shape.

Routers live with their apps (``turns.api``, ``evaluation.api``); handlers
parse input, call one selector or service and shape the output.

**Auth.** Browsers use the Django session: ``SessionAuth`` accepts a logged-in
user and checks CSRF on unsafe methods (the ``X-CSRFToken`` header, as
Django's own forms do). Programs use ``X-API-Key`` (``apikeys``): a key may
read runs and predictions and nothing else — on any other route a valid key
gets 403, an unknown one 401.

**Errors.** Every error, ours (``common.errors``) or the framework's, leaves
as ``{"error": {"code": …, "message": …, "details": […] | null}}`` with the
status of the error class (STYLE.md 13): 400 bad input, 401 not logged in,
403 forbidden (CSRF, API key off its routes), 404 not found — also for an
object the caller may not see —, 409 state conflict, 422 invalid request.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Field, NinjaAPI, Schema
from ninja.errors import HttpError, ValidationError
from ninja.pagination import LimitOffsetPagination
from ninja.security import APIKeyCookie, APIKeyHeader
from ninja.utils import check_csrf

from common.errors import AgentLabError

API_KEY_HEADER = "X-API-Key"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
#: Largest id a path accepts: beyond a bigint column's range a lookup would be a database error.
MAX_ID = 2**63 - 1

_CODES = {
    400: "bad_input",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "state_conflict",
    422: "invalid",
    429: "throttled",
}


class ErrorBody(Schema):
    code: str = Field(
        description="machine-readable: bad_input, unauthenticated, forbidden, not_found, "
        "state_conflict, invalid …"
    )
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorOut(Schema):
    """The one error shape of the API."""

    error: ErrorBody


#: ``responses`` entries every authenticated route shares, for the OpenAPI document.
ERRORS: dict[int, type[Schema]] = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut}


def _api_key_sent(request: HttpRequest) -> bool:
    from apikeys.services import apikey_authenticate

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

    def authenticate(self, request: HttpRequest, key: str | None) -> AbstractBaseUser | None:
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
        return user  # type: ignore[return-value]


class ApiKeyAuth(APIKeyHeader):
    """``X-API-Key: al_…`` — an ``apikeys.ApiKey`` that is not revoked."""

    param_name = API_KEY_HEADER

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        from apikeys.services import apikey_authenticate

        return apikey_authenticate(raw=key)


session_auth = SessionAuth()
api_key_auth = ApiKeyAuth()


class Pagination(LimitOffsetPagination):
    """``limit`` (1–500, default 50) and ``offset`` (bounded, so no database overflows)."""

    class Input(Schema):
        limit: int = Field(50, ge=1, le=500)
        offset: int = Field(0, ge=0, le=2**31 - 1)


api = NinjaAPI(
    title="AgentLab API",
    version="1",
    description="Conversations, turns and their event logs (session + CSRF); evaluation runs and "
    "predictions (session or X-API-Key). Errors: " + '`{"error": {"code", "message", "details"}}`.',
    auth=session_auth,
    urls_namespace="api",
)


def error_response(
    request: HttpRequest, status: int, message: str, details: list[dict[str, Any]] | None = None
) -> HttpResponse:
    body = {"error": {"code": _CODES.get(status, "error"), "message": message, "details": details}}
    return api.create_response(request, body, status=status)


@api.exception_handler(AgentLabError)
def _agentlab_error(request: HttpRequest, exc: AgentLabError) -> HttpResponse:
    return error_response(request, exc.status_code, str(exc))


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return error_response(request, exc.status_code, str(exc) or _CODES.get(exc.status_code, "error"))


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(request, 404, str(exc) or "not found")


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    details = [
        {
            "loc": [str(part) for part in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in exc.errors
    ]
    return error_response(request, 422, "the request is invalid; see details", details)


from evaluation.api import router as evaluation_router  # noqa: E402
from turns.api import router as turns_router  # noqa: E402

api.add_router("", turns_router)
api.add_router("", evaluation_router)

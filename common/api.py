"""What every app's API router shares: the one error shape, pagination and id bounds.

The ``NinjaAPI`` instance, its default auth and the exception handlers that
produce the error shape are the Django wiring (``config.api``); the auth
classes are ``apikeys.auth``. Routers (``turns.api``, ``evaluation.api``)
import from here, never from the wiring.

**Errors.** Every error leaves as ``{"error": {"code": …, "message": …,
"details": […] | null}}`` (``error_body``) with the status of the error class
(CONTRIBUTING.md#one-error-hierarchy): 400 bad input, 401 not logged in, 403 forbidden, 404 not found
— also for an object the caller may not see —, 409 state conflict, 422
invalid request.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja import Field, Schema
from ninja.pagination import LimitOffsetPagination

#: Largest id a path accepts: beyond a bigint column's range a lookup would be a database error.
MAX_ID = 2**63 - 1

#: The ``code`` of an error body, by HTTP status (``error`` for any other status).
ERROR_CODES = {
    400: "bad_input",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "state_conflict",
    413: "too_large",
    415: "unsupported_media_type",
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


def error_body(status: int, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON body of an error with HTTP ``status`` (``ErrorOut``'s shape).

    ``details`` is a list of ``{"loc": [...], "msg": …, "type": …}`` for
    invalid requests, else None.
    """
    return {"error": {"code": ERROR_CODES.get(status, "error"), "message": message, "details": details}}


class Pagination(LimitOffsetPagination):
    """``limit`` (1–500, default 50) and ``offset`` (bounded, so no database overflows)."""

    class Input(Schema):
        limit: int = Field(50, ge=1, le=500)
        offset: int = Field(0, ge=0, le=2**31 - 1)


class AuthedRequest(HttpRequest):
    """The request a router's handler receives once django-ninja's auth has passed:
    ``auth`` is what the auth callable returned, the acting user. For type checking
    only — ninja hands the handler an ordinary ``HttpRequest`` with ``auth`` set,
    and finds the request parameter by its name."""

    auth: User

"""The HTTP API (docs/chat-and-api.md#the-http-api): one ``NinjaAPI``, its default auth and the
exception handlers that give every error one shape.

Routers live with their apps (``turns.api``, ``evaluation.api``) and are
registered by dotted path, so this module imports no app module at load time
and no app imports it. Handlers parse input, call one selector or service and
shape the output.

**Auth** (``apikeys.auth``). Browsers use the Django session, with CSRF on
unsafe methods (the API's default); the evaluation routes that read runs and
predictions also accept ``X-API-Key``; starting and cancelling a run
(``evaluation.api_runs``) takes a key with the ``run`` scope (a ``read`` key
gets 403) or a staff session — on any other route (adding examples to a
dataset included) a valid key gets 403, an unknown one 401.

**Bodies** are JSON: a form or multipart body gets 415 and a body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` 413 (``config.middleware``), and text in
a body follows the one text rule (:class:`TextSafeParser`).

**Errors.** Every error, ours (``common.errors``) or the framework's, leaves
as ``{"error": {"code": …, "message": …, "details": […] | null}}``
(``common.api.error_body``) with the status of the error class (CONTRIBUTING.md#one-error-hierarchy):
400 bad input, 401 not logged in, 403 forbidden (CSRF, API key off its
routes), 404 not found — also for an object the caller may not see —, 405
a method the route does not take (``config.middleware``), 409 state
conflict, 422 invalid request.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import HttpError, Throttled, ValidationError
from ninja.parser import Parser

from agentlab.agent.text import json_body_safe
from apikeys.auth import session_auth
from common.api import ERROR_CODES, error_body
from common.errors import AgentLabError


class TextSafeParser(Parser):
    """django-ninja's JSON body parser with the project's one text rule: a
    character no database here can store — a lone UTF-16 surrogate sent as a
    JSON escape (``"\\ud800"``), NUL — becomes U+FFFD, as in a dataset
    import and in what the driver records (``agentlab.agent.text``), instead
    of pydantic's 422 "unable to parse raw data as a unicode string"."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        """The body as a JSON object; any other JSON value (a string, a number,
        a list) is a 422 — every body this API takes is an object, and a body
        that was not one used to pass as "no fields given" (a string created
        a conversation)."""
        parsed = json_body_safe(super().parse_body(request))
        if not isinstance(parsed, dict):
            raise HttpError(422, f"the body must be a JSON object, got a JSON {_json_kind(parsed)}")
        return parsed


def _json_kind(value: Any) -> str:
    return {str: "string", bool: "boolean", int: "number", float: "number", list: "array"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


api = NinjaAPI(
    parser=TextSafeParser(),
    title="AgentLab API",
    version="1",
    description="Conversations, turns and their event logs (session + CSRF); evaluation runs and "
    "predictions (session or X-API-Key). Errors: " + '`{"error": {"code", "message", "details"}}`. '
    "A turn's events also stream as server-sent events: `GET /api/turns/{id}/stream?after=N` "
    "(`id:` = seq, `Last-Event-ID`, `event: stream.end`).",
    auth=session_auth,
    urls_namespace="api",
)
api.add_router("", "turns.api.router")
# evaluation.api's router, with the routes that start and cancel runs added
api.add_router("", "evaluation.api_runs.router")


def error_response(
    request: HttpRequest, status: int, message: str, details: list[dict[str, Any]] | None = None
) -> HttpResponse:
    """An error response in the API's one shape (``common.api.ErrorOut``)."""
    return api.create_response(request, error_body(status, message, details), status=status)


@api.exception_handler(AgentLabError)
def _agentlab_error(request: HttpRequest, exc: AgentLabError) -> HttpResponse:
    return error_response(request, exc.status_code, str(exc))


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # django-ninja turns any failure of the body parser into 400 "Cannot parse
    # request body"; the parser's own error (a body that is not an object)
    # and JSON's (where the text stops being JSON) say more
    cause = exc.__cause__
    if isinstance(cause, HttpError):
        exc = cause
    elif isinstance(cause, json.JSONDecodeError):
        return error_response(request, 400, f"the body is not JSON: {cause}")
    return error_response(request, exc.status_code, str(exc) or ERROR_CODES.get(exc.status_code, "error"))


@api.exception_handler(Throttled)
def _throttled(request: HttpRequest, exc: Throttled) -> HttpResponse:
    # an API key over AGENTLAB_API_KEY_RATE (apikeys.throttle)
    response = error_response(request, 429, "too many requests for this API key; slow down")
    if exc.wait is not None:
        response["Retry-After"] = str(max(1, math.ceil(exc.wait)))
    return response


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

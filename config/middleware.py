"""The API's body rules, checked before anything reads a request body.

Every API operation that takes a body takes JSON (docs/chat-and-api.md#the-http-api). Two
bodies used to fail outside the API's error shape, and only under a real
server (Django's test client hides both):

- a ``multipart/form-data`` or form-encoded body: Django's CSRF middleware
  parses it as a form (reading the stream), and django-ninja then cannot read
  ``request.body`` — ``RawPostDataException``, a 500 under daphne. Such a
  body now gets **415** before either looks at it.
- a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE``: Django raises
  ``RequestDataTooBig``, which became its HTML "Bad Request (400)" page and a
  logged traceback. It now gets **413** with the limit in the message.

Both answer in the API's one error shape (``common.api.error_body``), as
does a method a route does not take: django-ninja answers it with a plain
text "Method not allowed"; it becomes **405** in the error shape, with the
``Allow`` header kept. So does a path under ``/api/`` that no route matches:
Django's HTML "Not Found" page becomes **404** in the error shape.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse

from common.api import error_body

#: Methods whose body an API operation reads.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _is_json(media_type: str) -> bool:
    """``media_type`` is Django's ``request.content_type`` (parameters left out)."""
    media_type = media_type.lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _carries_data(body: bytes, media_type: str) -> bool:
    """Whether a body says anything: an empty form (a bodiless POST as some
    clients send it: no field, or a multipart body with no part) does not."""
    if not body.strip():
        return False
    if media_type.lower().startswith("multipart/"):
        return b"content-disposition" in body.lower()
    return True


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse(error_body(status, message), status=status)


class ApiBodyMiddleware:
    """Answer 415 to an API request whose body is not JSON and 413 to one
    over the upload limit, in the API's error shape; leave every other
    request as it is. Must come before ``CsrfViewMiddleware`` (which reads a
    form body)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path.startswith("/api/")
        if api and request.method in _BODY_METHODS:
            refused = self._refusal(request)
            if refused is not None:
                return refused
        response = self.get_response(request)
        if not api or response.get("Content-Type", "").startswith("application/json"):
            return response
        if response.status_code == 404:
            return _error(404, f"no API route at {request.path!r}; see /api/docs for the routes")
        if response.status_code == 405:
            # in a stable order (django-ninja's follows a set's)
            allowed = ", ".join(sorted(m.strip() for m in response.get("Allow", "").split(",") if m.strip()))
            shaped = _error(
                405, f"{request.method} is not allowed here" + (f"; use {allowed}" if allowed else "")
            )
            if allowed:
                shaped["Allow"] = allowed
            return shaped
        return response

    @staticmethod
    def _refusal(request: HttpRequest) -> JsonResponse | None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            # read now, before the CSRF middleware parses a form from the
            # stream (which left ninja unable to read it), and where the
            # limit can be answered in the API's shape
            body = request.body
        except RequestDataTooBig:
            return _error(413, f"the request body is over the limit of {limit:,} bytes")
        media_type = request.content_type or ""
        if _carries_data(body, media_type) and not _is_json(media_type):
            shown = media_type or "a body without a Content-Type"
            return _error(415, f"the API takes a JSON body (Content-Type: application/json), not {shown}")
        return None

"""The ``ProviderError`` of an OpenAI SDK error: which failures of an
OpenAI-compatible endpoint are retried and which are permanent.

Error classes (HTTP status → ProviderError):

- 429 with code/type ``insufficient_quota`` → permanent, kind ``quota``
  (retrying cannot help: the account is out of credit);
- any other error saying the context length was exceeded (code
  ``context_length_exceeded``, or "maximum context length" / "context length"
  / "context window" in the message) → permanent, kind ``context_overflow``;
- a 5xx whose body says the request itself was invalid (a pydantic "N
  validation errors for …", as llama-cpp-python's server answers a message
  it cannot read, or error type ``invalid_request_error``) → permanent, kind
  ``bad_request``: the same request would fail the same way (issue 46);
- other 429, 408, 409, 5xx, timeouts, connection errors → transient;
- other 4xx → permanent (kinds ``auth``, ``not_found``, ``bad_request``).
"""

from __future__ import annotations

import re

import aiohttp
import openai

from agentlab.agent.types import ProviderError

_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "exceeds the available context size",
)

#: A 5xx body that says the request was invalid: pydantic's "N validation
#: error(s) for <Model>" (llama-cpp-python's server answers a request it
#: cannot validate with a 500 carrying it).
_INVALID_REQUEST_RE = re.compile(r"\b\d+ validation errors?\b|\binvalid[_ ]request\b", re.IGNORECASE)


def _error_text(exc: openai.APIError) -> str:
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) else exc.message


def classify_status_error(exc: openai.APIStatusError) -> ProviderError:
    """Map an HTTP error from the SDK to a ``ProviderError`` (see module doc)."""
    status = exc.status_code
    code = (exc.code or "").lower()
    err_type = (getattr(exc, "type", None) or "").lower()
    message = _error_text(exc)
    text = f"HTTP {status}: {message}"
    lowered = f"{code} {message}".lower()
    if status == 429 and "insufficient_quota" in (code, err_type):
        return ProviderError(text, transient=False, kind="quota", status=status)
    # Before the 5xx rule: some servers (older llama.cpp) answer a too-long
    # prompt with a 500, and retrying it cannot help.
    if status != 429 and any(marker in lowered for marker in _CONTEXT_MARKERS):
        return ProviderError(text, transient=False, kind="context_overflow", status=status)
    if status >= 500 and (err_type == "invalid_request_error" or _INVALID_REQUEST_RE.search(message)):
        return ProviderError(text, transient=False, kind="bad_request", status=status)
    if status in (408, 409, 429) or status >= 500:
        kind = "rate_limit" if status == 429 else "server_error" if status >= 500 else "timeout"
        return ProviderError(text, transient=True, kind=kind, status=status)
    kind = {401: "auth", 403: "auth", 404: "not_found"}.get(status, "bad_request")
    return ProviderError(text, transient=False, kind=kind, status=status)


def _could_not_connect(exc: BaseException) -> bool:
    """Whether a timeout error is really a failed connect: the aiohttp
    transport maps every ``ClientConnectionError`` — a refused connection
    included — to httpx's ``ConnectTimeout``, which the SDK raises as
    ``APITimeoutError``. The original error is kept in the cause chain."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, aiohttp.ClientConnectorError | ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def provider_error(exc: openai.OpenAIError) -> ProviderError:
    """The ``ProviderError`` of an SDK error (see the module docstring)."""
    if isinstance(exc, openai.APIStatusError):
        return classify_status_error(exc)
    if isinstance(exc, openai.APITimeoutError):
        if _could_not_connect(exc):
            return ProviderError(
                f"connection error: {exc.__cause__ or exc}", transient=True, kind="connection"
            )
        return ProviderError(f"request timed out: {exc}", transient=True, kind="timeout")
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError(f"connection error: {exc}", transient=True, kind="connection")
    return ProviderError(f"{type(exc).__name__}: {exc}", transient=False, kind="invalid_response")

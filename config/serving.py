"""What daphne's HTTP server (Twisted's ``HTTPChannel``) does with a header
line too long to read: answer, rather than drop the connection.

Twisted reads a request line by line with a limit of 16,384 bytes per line
(``LineReceiver.MAX_LENGTH``); a longer one — a 60,000-character
``X-API-Key`` — reached ``LineReceiver.lineLengthExceeded``, which closes the
connection without a word, so a client saw "connection reset". The request
never reaches Django, so this is answered here, at the server: **431 Request
Header Fields Too Large** (RFC 6585, §5) with the API's error shape, then
the connection is closed (the rest of the request cannot be read).
"""

from __future__ import annotations

import json
from typing import Any

_BODY = json.dumps(
    {
        "error": {
            "code": "header_too_large",
            "message": "a request header line is over 16,384 bytes: send shorter headers",
            "details": None,
        }
    }
).encode()

_RESPONSE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: " + str(len(_BODY)).encode() + b"\r\n"
    b"Connection: close\r\n\r\n" + _BODY
)


def _line_too_long(channel: Any, line: bytes) -> None:
    channel.transport.write(_RESPONSE)
    channel.transport.loseConnection()


def answer_oversized_header_lines() -> None:
    """Make Twisted's HTTP channel answer a too-long header line with 431
    (see the module docstring). Idempotent; without Twisted (not under
    daphne) it does nothing."""
    try:
        from twisted.web.http import HTTPChannel
    except ImportError:  # pragma: no cover - daphne always brings Twisted
        return
    HTTPChannel.lineLengthExceeded = _line_too_long  # type: ignore[method-assign]

"""A real OpenAI-compatible HTTP server on loopback, for tests and benchmarks.

The LLM is the edge we fake (CONTRIBUTING.md#tests-that-assert), but through real HTTP so the
official SDK, its error mapping and our retry policy are exercised as in production::

    with StubLLMServer(lambda body: text_reply("18")) as stub:
        provider = OpenAICompatibleProvider(base_url=stub.base_url, api_key="x", model="stub")
        ...
        assert stub.request_count == 1

``handler(request_body) -> StubReply`` decides each reply: a chat-completion
body, an HTTP error with an OpenAI-style error body, optionally after a delay.
``StubLLMServer.script([...])`` plays a list of replies in order.

A request with ``"stream": true`` gets the same reply streamed as OpenAI
streams it (``stream_chunks``): ``chat.completion.chunk`` server-sent events
with the content and each tool call's arguments in pieces of
``StubReply.stream_chars`` characters, ``stream_delay`` seconds apart, a
chunk with the finish reason, a usage-only chunk with empty ``choices`` when
``stream_options.include_usage`` asks for it (and the reply has usage), then
``data: [DONE]``. ``cut_after=N`` stops after N chunks: the connection is
dropped mid-body, or with ``cut_clean`` the body just ends there (no finish
reason, no ``[DONE]``).

Benchmark mode (every request is answered with a ``final_answer`` tool call
whose answer is the last number in the user's question, or "42")::

    python -m agentlab.testing.stub_llm --port 8011 --latency-ms 50

No Django here. Binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentlab.testing.stub_stream import stream_chunks


@dataclass
class StubReply:
    """One HTTP reply: ``status`` and a JSON ``body`` (a dict, or a raw
    ``str`` sent as is), sent after ``delay`` seconds."""

    body: dict[str, Any] | str
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    #: streamed replies (module docstring): characters per piece, seconds between chunks
    stream_chars: int = 4
    stream_delay: float = 0.0
    #: stop a streamed reply after this many chunks (``None``: send it all)
    cut_after: int | None = None
    #: end the cut body cleanly instead of dropping the connection
    cut_clean: bool = False


Handler = Callable[[dict[str, Any]], StubReply | dict[str, Any]]

_ids = itertools.count(1)
_DEFAULT_USAGE = (10, 5)


def _usage_body(usage: tuple[int, int] | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": usage[0] + usage[1]}


def completion_body(
    message: dict[str, Any],
    *,
    finish_reason: str = "stop",
    usage: tuple[int, int] | None = _DEFAULT_USAGE,
    model: str = "stub-model",
) -> dict[str, Any]:
    """A ``chat.completion`` body with one choice. ``usage=None`` leaves the
    ``usage`` key out (as some servers do)."""
    body: dict[str, Any] = {
        "id": f"chatcmpl-stub-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
    }
    usage_body = _usage_body(usage)
    if usage_body is not None:
        body["usage"] = usage_body
    return body


def text_reply(
    content: str | None,
    *,
    usage: tuple[int, int] | None = _DEFAULT_USAGE,
    model: str = "stub-model",
    finish_reason: str = "stop",
    delay: float = 0.0,
) -> StubReply:
    """A plain assistant text reply (default usage 10 in / 5 out)."""
    message = {"role": "assistant", "content": content}
    return StubReply(
        completion_body(message, finish_reason=finish_reason, usage=usage, model=model), delay=delay
    )


def tool_calls_reply(
    calls: Sequence[tuple[str, str] | tuple[str, str, str]],
    *,
    content: str | None = None,
    usage: tuple[int, int] | None = _DEFAULT_USAGE,
    model: str = "stub-model",
    finish_reason: str = "tool_calls",
    delay: float = 0.0,
) -> StubReply:
    """Tool calls given as ``(name, raw_arguments)`` or ``(name,
    raw_arguments, id)``; ``raw_arguments`` is sent verbatim, so a test can
    send truncated JSON. ``content=None`` sends ``"content": null``."""
    tool_calls = []
    for i, item in enumerate(calls):
        name, raw = item[0], item[1]
        call_id = item[2] if len(item) > 2 else f"call_stub_{next(_ids)}_{i}"
        tool_calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}})
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    return StubReply(
        completion_body(message, finish_reason=finish_reason, usage=usage, model=model), delay=delay
    )


def tool_call_reply(
    name: str,
    raw_arguments: str | dict[str, Any],
    *,
    id: str | None = None,
    content: str | None = None,
    usage: tuple[int, int] | None = _DEFAULT_USAGE,
    model: str = "stub-model",
    delay: float = 0.0,
) -> StubReply:
    """One tool call; a dict ``raw_arguments`` is JSON-encoded, a string is
    sent verbatim."""
    raw = raw_arguments if isinstance(raw_arguments, str) else json.dumps(raw_arguments)
    call = (name, raw, id) if id else (name, raw)
    return tool_calls_reply([call], content=content, usage=usage, model=model, delay=delay)


def final_answer_reply(answer: Any, evidence: Any = "", reasoning: Any = "", **kwargs: Any) -> StubReply:
    """A ``final_answer`` tool call."""
    return tool_call_reply(
        "final_answer", {"answer": answer, "evidence": evidence, "reasoning": reasoning}, **kwargs
    )


def error_reply(
    status: int, message: str, *, type: str | None = None, code: str | None = None, delay: float = 0.0
) -> StubReply:
    """An HTTP error with OpenAI's error body: ``{"error": {"message", "type",
    "param", "code"}}``."""
    body = {"error": {"message": message, "type": type, "param": None, "code": code}}
    return StubReply(body, status=status, delay=delay)


def insufficient_quota() -> StubReply:
    """429 that retrying cannot fix (the account has no credit)."""
    return error_reply(
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        type="insufficient_quota",
        code="insufficient_quota",
    )


def rate_limited() -> StubReply:
    """429 rate limit (transient)."""
    return error_reply(
        429,
        "Rate limit reached for requests. Please try again in 20ms.",
        type="requests",
        code="rate_limit_exceeded",
    )


def server_error() -> StubReply:
    """500 (transient)."""
    return error_reply(500, "The server had an error while processing your request.", type="server_error")


def context_length_exceeded(max_tokens: int = 8192, requested: int = 9000) -> StubReply:
    """400 context_length_exceeded, worded as OpenAI does."""
    return error_reply(
        400,
        f"This model's maximum context length is {max_tokens} tokens. However, your messages resulted in "
        f"{requested} tokens. Please reduce the length of the messages.",
        type="invalid_request_error",
        code="context_length_exceeded",
    )


# --------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 4096  # 1,024 clients at once: socketserver's 5 drops SYNs (1 s stalls)
    allow_reuse_address = True

    stub: StubLLMServer


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per client
    # Headers and body go out in separate writes; with Nagle's algorithm on,
    # the body waits for the client's delayed ACK (~40 ms) on every request.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _send(self, status: int, body: dict[str, Any] | str, headers: dict[str, str] | None = None) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. a cancelled call)

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
        else:
            self._send(
                404, {"error": {"message": f"no route {self.path}", "type": "not_found", "code": None}}
            )

    def do_POST(self) -> None:
        stub = self.server.stub
        try:
            body = self._read_json()
        except (ValueError, UnicodeDecodeError):
            self._send(400, {"error": {"message": "invalid JSON body", "type": "invalid_request_error"}})
            return
        if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
            self._send(
                404, {"error": {"message": f"no route {self.path}", "type": "not_found", "code": None}}
            )
            return
        stub._record(body)
        try:
            reply = stub.handler(body)
        except Exception as exc:  # a bug in a test's handler: say so loudly
            self._send(500, {"error": {"message": f"stub handler raised {exc!r}", "type": "stub_error"}})
            return
        if isinstance(reply, dict):
            reply = StubReply(reply)
        if reply.delay > 0 and stub._closing.wait(reply.delay):
            self.close_connection = True
            return
        if body.get("stream") and reply.status == 200 and isinstance(reply.body, dict):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_stream(reply, include_usage=include_usage)
            return
        self._send(reply.status, reply.body, reply.headers)

    def _send_stream(self, reply: StubReply, *, include_usage: bool) -> None:
        """``reply`` as server-sent events, one HTTP chunk per event."""
        assert isinstance(reply.body, dict)
        events = [
            f"data: {json.dumps(c)}\n\n"
            for c in stream_chunks(reply.body, chars=reply.stream_chars, include_usage=include_usage)
        ]
        events.append("data: [DONE]\n\n")
        cut = reply.cut_after is not None and reply.cut_after < len(events)
        if cut:
            events = events[: reply.cut_after]
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, event in enumerate(events):
                if i and reply.stream_delay and self.server.stub._closing.wait(reply.stream_delay):
                    break
                data = event.encode("utf-8")
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            if cut and not reply.cut_clean:
                self.close_connection = True  # dropped mid-body: no last chunk
                return
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class StubLLMServer:
    """An OpenAI-compatible ``/v1/chat/completions`` on ``127.0.0.1``
    (port 0 = any free port), served from a background thread.

    Use as a context manager (or ``start()`` / ``stop()``). ``base_url`` ends
    in ``/v1``. ``requests`` holds every chat-completion request body
    received, in order (unless ``record=False``, for long benchmarks);
    ``request_count`` is their number.
    """

    def __init__(
        self, handler: Handler, *, host: str = "127.0.0.1", port: int = 0, record: bool = True
    ) -> None:
        self.handler = handler
        self.record = record
        self.requests: list[dict[str, Any]] = []
        self._count = 0
        self._requests_lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = _Server((host, port), _RequestHandler)
        self._httpd.stub = self
        self._thread: threading.Thread | None = None

    @classmethod
    def script(cls, replies: Sequence[StubReply], **kwargs: Any) -> StubLLMServer:
        """A server that sends ``replies`` in order (an HTTP 500 with a clear
        message once they run out)."""
        queue = list(replies)
        lock = threading.Lock()
        position = itertools.count()

        def handler(body: dict[str, Any]) -> StubReply:
            with lock:
                i = next(position)
            if i >= len(queue):
                return error_reply(500, f"stub script exhausted: request {i + 1}, {len(queue)} replies")
            return queue[i]

        return cls(handler, **kwargs)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def request_count(self) -> int:
        with self._requests_lock:
            return self._count

    def _record(self, body: dict[str, Any]) -> None:
        with self._requests_lock:
            self._count += 1
            if self.record:
                self.requests.append(body)

    def start(self) -> StubLLMServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="stub-llm", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()  # wakes handlers sleeping in a delay
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> StubLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- benchmark mode

_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            return content
    return ""


def final_answer_handler(latency: float = 0.0) -> Handler:
    """Answers every request with ``final_answer``: the last number in the
    last user message (commas removed), or ``"42"``; after ``latency`` s."""

    def handler(body: dict[str, Any]) -> StubReply:
        numbers = _NUMBER_RE.findall(last_user_text(body).replace(",", ""))
        answer = numbers[-1] if numbers else "42"
        reply = final_answer_reply(
            answer, "stub evidence", "stub reasoning", model=str(body.get("model") or "stub")
        )
        reply.delay = latency
        return reply

    return handler


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a socket per client: 1,024 at once
    if resource.RLIM_INFINITY not in (soft, hard) and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = StubLLMServer(final_answer_handler(args.latency_ms / 1000.0), port=args.port, record=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with server:
        print(f"stub LLM listening on {server.base_url} (latency {args.latency_ms:g} ms)", flush=True)
        while not stop.wait(0.5):
            pass
        print(f"stub LLM stopping after {server.request_count} requests", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

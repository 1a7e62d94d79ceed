"""A real OTLP/HTTP trace receiver for tests and benchmarks: ``POST /v1/traces`` with an
``ExportTraceServiceRequest`` in protobuf (the OTLP specification's HTTP
binding), decoded with ``opentelemetry-proto``; every span kept as a plain
``ReceivedSpan``. ``hold()`` makes it keep each request waiting (unanswered)
until ``release()``: an exporter blocked on a slow collector."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it; ids in hex (``parent_id`` ``""``: a root)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    start_ns: int
    end_ns: int
    service: str


def any_value(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a Python value (arrays as lists)."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest`` body."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: any_value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes={kv.key: any_value(kv.value) for kv in span.attributes},
                        status_code=span.status.code,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        service=str(resource.get("service.name", "")),
                    )
                )
    return spans


class OTLPReceiver:
    """The receiver on ``127.0.0.1`` and a free port (``endpoint`` is the base
    URL the exporter's ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.waiting = 0  # requests held unanswered right now
        self.content_types: list[str] = []
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._received(body, self.headers.get("Content-Type", ""))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _received(self, body: bytes, content_type: str) -> None:
        with self._lock:
            self.requests += 1
            self.waiting += 1
        self._open.wait(timeout=60)
        with self._lock:
            self.waiting -= 1
            self.content_types.append(content_type)
            self.spans.extend(decode(body))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def hold(self) -> None:
        """Keep every request waiting from now on (the exporter blocks)."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def start(self) -> OTLPReceiver:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def by_name(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

"""The process's OpenTelemetry tracer: the SDK's ``TracerProvider`` with a
``BatchSpanProcessor`` in front of the OTLP exporter (HTTP/protobuf, the
specification's default protocol), set up once per process on first use
(docs/production.md#traces).

The SDK is imported only here and only when tracing is on
(``switches().tracing``): settings and app loading never import it
(tests/config/test_startup_imports.py). Everything the exporter reads is the
standard environment — ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` is
appended) or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``…_HEADERS``,
``…_TIMEOUT``, ``…_COMPRESSION``, ``…_CERTIFICATE``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*`` — as the OpenTelemetry
specification defines them (its "SDK environment variables" and "OTLP
exporter" pages). The provider is this module's own, not the global one, so
a test or the benchmark can set it up again (``reset_tracing``).

No turn waits on an export: a span's end only queues it (the batch
processor drops spans when its queue is full) and a background thread
exports. A failing export is logged once per process (``WARNING``) and the
turn never sees it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from agentlab.telemetry.switches import switches

logger = logging.getLogger(__name__)

#: the name the tracer is registered under (the instrumentation scope)
SCOPE = "agentlab"

_lock = threading.Lock()
_state: tuple[int, Any, Any] | None = None  # (pid, provider, tracer)


def tracer() -> Any | None:
    """This process's tracer (an ``opentelemetry.trace.Tracer``), set up on
    the first call; ``None`` when tracing is off. A forked child sets up its
    own (the batch processor's thread does not survive a fork)."""
    if not switches().tracing:
        return None
    state = _state
    if state is None or state[0] != os.getpid():
        state = _set_up()
    return state[2]


def _set_up() -> tuple[int, Any, Any]:
    global _state
    with _lock:
        if _state is not None and _state[0] == os.getpid():
            return _state
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "agentlab"}))
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(_exporter()))
        _state = (os.getpid(), provider, provider.get_tracer(SCOPE))
        return _state


def _exporter() -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class LoggedOnceExporter(SpanExporter):
        """The OTLP exporter, its failures logged once per process: an
        endpoint that is down would otherwise log every batch."""

        def __init__(self) -> None:
            self.inner = OTLPSpanExporter()
            self.failed = False

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            try:
                result = self.inner.export(spans)
            except Exception as exc:
                self._failed(f"{type(exc).__name__}: {exc}")
                return SpanExportResult.FAILURE
            if result is not SpanExportResult.SUCCESS:
                self._failed("the endpoint did not accept the spans")
            return result

        def _failed(self, why: str) -> None:
            if not self.failed:
                self.failed = True
                logger.warning(
                    "OpenTelemetry: exporting spans to %s failed (%s); further failures are not logged",
                    self.inner._endpoint,
                    why,
                )

        def shutdown(self) -> None:
            self.inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(self.inner.force_flush(timeout_millis))

    _quiet_exporter_logs()
    return LoggedOnceExporter()


class _FirstOnly(logging.Filter):
    """Lets one record through: the SDK's exporter logs each failed batch."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        first, self.seen = not self.seen, True
        return first


def _quiet_exporter_logs() -> None:
    for name in EXPORTER_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, _FirstOnly) for f in log.filters):
            log.addFilter(_FirstOnly())


#: the loggers the SDK's HTTP exporter reports a failed batch on
EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
)


def flush_tracing(timeout_s: float = 30.0) -> bool:
    """Export the spans queued so far (at the end of ``run_eval``, a test or
    a benchmark round); False when they could not all be exported in
    ``timeout_s``. Nothing set up: True."""
    state = _state
    if state is None or state[0] != os.getpid():
        return True
    return bool(state[1].force_flush(int(timeout_s * 1000)))


def reset_tracing() -> None:
    """Shut this process's tracer down (queued spans are exported first) and
    forget it and the switches: the next turn reads the environment again."""
    global _state
    from agentlab.telemetry.switches import reset_switches

    with _lock:
        state, _state = _state, None
    if state is not None and state[0] == os.getpid():
        state[1].shutdown()
    reset_switches()

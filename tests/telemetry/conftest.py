"""Fixtures of the telemetry tests: a real OTLP/HTTP receiver with tracing
pointed at it, and the process pools of the turn jobs closed after each test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from agentlab.telemetry import reset_tracing
from agentlab.telemetry.switches import reset_switches
from agentlab.testing.otlp_receiver import OTLPReceiver
from tests.turns.conftest import _close_process_pools, stream_settings  # noqa: F401 - fixtures

#: the variables a test sets; restored after it
VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_SERVICE_NAME",
    "AGENTLAB_OTEL_CAPTURE_CONTENT",
    "AGENTLAB_METRICS",
    "OTEL_SDK_DISABLED",
)


@pytest.fixture
def telemetry_env() -> Iterator[dict[str, str]]:
    """Set telemetry variables in ``os.environ`` through the dict it yields
    (applied with ``apply()``); the tracer is shut down and every variable
    restored after the test."""
    saved = {name: os.environ.get(name) for name in VARIABLES}
    try:
        yield os.environ  # type: ignore[misc]
    finally:
        reset_tracing()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        reset_switches()


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    server = OTLPReceiver().start()
    yield server
    server.stop()


@pytest.fixture
def tracing(telemetry_env, receiver) -> OTLPReceiver:
    """Tracing on, exporting to ``receiver`` every 50 ms."""
    telemetry_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    telemetry_env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    telemetry_env["OTEL_SERVICE_NAME"] = "agentlab-test"
    reset_tracing()
    return receiver

"""Which telemetry is on in this process, read from the environment once
(docs/configuration.md#telemetry). No Django here: the agent core and the
drivers ask it on every turn, and settings never import the SDKs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

#: the values a boolean variable is true for (django-environ's, case-insensitive)
TRUE_VALUES = frozenset({"1", "true", "yes", "y", "on", "ok"})


@dataclass(frozen=True)
class Switches:
    """``tracing``: export every turn as an OpenTelemetry trace (an OTLP
    endpoint is set and the SDK is not disabled); ``capture_content``: the
    spans carry the messages, tool arguments and results
    (``AGENTLAB_OTEL_CAPTURE_CONTENT``; they may hold personal data);
    ``metrics``: count the Prometheus metrics (``AGENTLAB_METRICS``, on
    unless set false)."""

    tracing: bool
    capture_content: bool
    metrics: bool


def read_switches(environ: Mapping[str, str]) -> Switches:
    """The switches of ``environ``. Tracing follows the OpenTelemetry
    specification's variables: on when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
    or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, off when ``OTEL_SDK_DISABLED``
    is true or ``OTEL_TRACES_EXPORTER`` is ``none``."""
    endpoint = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or ""
    )
    disabled = _true(environ.get("OTEL_SDK_DISABLED")) or (
        environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none"
    )
    metrics = environ.get("AGENTLAB_METRICS", "").strip()
    return Switches(
        tracing=bool(endpoint.strip()) and not disabled,
        capture_content=_true(environ.get("AGENTLAB_OTEL_CAPTURE_CONTENT")),
        metrics=_true(metrics) if metrics else True,
    )


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in TRUE_VALUES


_switches: Switches | None = None


def switches() -> Switches:
    """This process's switches (``read_switches(os.environ)``, read on the
    first call; ``reset_switches`` reads them again)."""
    global _switches
    if _switches is None:
        _switches = read_switches(os.environ)
    return _switches


def reset_switches() -> None:
    """Forget the switches read so far (tests, the benchmark's on/off rounds)."""
    global _switches
    _switches = None

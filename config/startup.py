"""Work done once when the ASGI server starts serving
(docs/architecture.md#processes-embedded-and-production; docs/architecture.md#the-driver).

Daphne has no ASGI lifespan protocol, and ``AppConfig.ready`` must not touch
the database (it runs for every management command, migrations included). So
``RunAtServerStart`` wraps the ASGI application and, on the first connection
the process receives (or on ``lifespan.startup`` from servers that send it),
hands the server's event loop to the doorbell when the channel layer is the
in-memory one (its queues belong to the loop the consumers run on; see
``turns.doorbell._Doorbell``) and starts ``server_start`` on a thread, so that
the first request is not delayed by it:

- no broker (embedded default): start the inline executor; it sweeps stale turns at once and
  then every ``TURN_STALE_S / 2``;
- with a broker: sweep once (Celery beat does it periodically): stale turns
  are marked interrupted and turns whose hand-over was lost are queued again;
- then, when the embedded model is the provider, load it (a first turn that
  comes before it is loaded shows phase ``load`` meanwhile).

``AGENTLAB_RUN_AT_START = False`` in settings turns this off (tests that do
not want background threads touching the test database). For deployments
that prefer it explicit, ``manage.py sweep_turns && daphne …`` is equivalent.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)


def server_start() -> None:
    """Sweep once (``turns_sweep``), or start the inline executor (which sweeps)."""
    from django.db import connections

    try:
        if settings.CELERY_BROKER_URL:
            from turns.jobs.sweep import turns_sweep

            swept = turns_sweep(stale_s=float(settings.TURN_STALE_S))
            if swept.interrupted:
                logger.warning("server start: marked %s stale turn(s) interrupted", swept.interrupted)
        else:
            from turns.jobs.handover import inline_executor

            inline_executor()
        from agentlab.telemetry import telemetry_start
        from turns.llm import preload_configured_model

        telemetry_start()  # the tracer and metrics, before the first turn needs them
        preload_configured_model()  # the embedded model, when it is the provider
    except Exception:
        logger.exception("server start tasks failed")
    finally:
        connections.close_all()  # this thread's connections would linger otherwise


class RunAtServerStart:
    """ASGI middleware: run ``server_start`` once per process (see the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._started = False
        self._lock = threading.Lock()

    def _start_once(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        if not getattr(settings, "AGENTLAB_RUN_AT_START", True):
            return
        from channels.layers import InMemoryChannelLayer, get_channel_layer

        from turns.doorbell import doorbell

        if isinstance(get_channel_layer(), InMemoryChannelLayer):
            doorbell.set_loop(asyncio.get_running_loop())
        threading.Thread(target=server_start, name="agentlab-server-start", daemon=True).start()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self._start_once()
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await self.app(scope, receive, send)

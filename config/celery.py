"""The Celery app (docs/architecture.md#processes-embedded-and-production): turn jobs, the
stale-turn sweeper and the
scheduled evaluations.

Configuration comes from Django settings under the ``CELERY_`` namespace;
tasks are found in each app's ``tasks.py``. Importing this module connects to
nothing and reads no settings, so it is safe without a broker.

Run (see ``turns.jobs.tasks`` for why a threads pool)::

    celery -A config worker --pool threads --concurrency 16 --loglevel INFO
    celery -A config beat --loglevel INFO \
        --scheduler django_celery_beat.schedulers:DatabaseScheduler

Beat reads its schedule from the database (``CELERY_BEAT_SCHEDULER``): the
sweeper below is written there at beat's start, the evaluation schedules by
the admin (``evaluation.schedules``).

``CELERY_TASK_DEFAULT_QUEUE`` (environment, default ``celery``) names the
queue; deployments (and the end-to-end test) sharing one broker use their own.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from celery import Celery
from celery.signals import worker_process_shutdown, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agentlab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# the turns' tasks live with the other job modules (turns/jobs/tasks.py)
app.autodiscover_tasks(["turns.jobs"])
# evaluation's tasks live beside what they run: the examples' task with the
# run (evaluation/run/worker.py), the schedules' with the schedules
app.autodiscover_tasks(["evaluation.run"], related_name="worker")
app.autodiscover_tasks(["evaluation.schedules"], related_name="firing")
# Belongs with the other CELERY_* settings; read here so that this module
# stays the only place that must know about it.
app.conf.task_default_queue = os.environ.get("CELERY_TASK_DEFAULT_QUEUE") or "celery"


@app.on_after_configure.connect
def _beat_schedule(sender: Celery, **kwargs: Any) -> None:
    """Sweep stale turns every ``TURN_STALE_S / 2`` seconds (at least 5 s).

    Connected to ``on_after_configure`` so that settings are read only when
    Celery itself first reads its configuration, never on import.
    """
    from django.conf import settings

    every = max(5.0, float(settings.TURN_STALE_S) / 2)
    sender.add_periodic_task(every, sender.signature("turns.tasks.turns_sweep"), name="sweep stale turns")


@worker_shutdown.connect
def _close_mcp_sessions(**kwargs: Any) -> None:
    """Stop the MCP servers this worker started (stdio children) and close its
    sessions before it exits; ``atexit`` would too, later and less surely."""
    from agentlab.agent.mcp.hub import mcp_hub_close

    mcp_hub_close()


@worker_process_shutdown.connect
def _metrics_process_gone(pid: int | None = None, **kwargs: Any) -> None:
    """A prefork child exits: its live gauges leave the multiprocess sum
    (``agentlab.telemetry.metrics.process_gone``)."""
    from agentlab.telemetry.metrics import process_gone

    process_gone(pid)


@worker_ready.connect
def _preload_model(**kwargs: Any) -> None:
    """Load the embedded model on a thread when the worker is ready, if it is
    the configured provider, so the first turn does not wait for it."""
    from agentlab.telemetry import telemetry_start
    from turns.llm import preload_configured_model

    telemetry_start()  # the tracer and metrics, before the first turn needs them
    threading.Thread(target=preload_configured_model, name="agentlab-preload", daemon=True).start()

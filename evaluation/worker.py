"""The body of a ``run_eval --workers`` process (see ``evaluation.parallel``).

This module imports nothing from Django at import time: a ``spawn``ed
process unpickles its target before Django is set up.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalJob:
    """What one worker drives: ``(prediction id, turn id, example id, resumed)`` rows."""

    items: tuple[tuple[int, int, int, bool], ...]
    concurrency: int
    model: str | None
    review: bool
    settings: dict[str, Any]
    database_names: dict[str, str]
    #: ``evaluation.extensions.RunExtensions`` (frozen dataclasses pickle as they are)
    extensions: Any = None
    run_id: str | None = None
    dataset: str | None = None
    #: the run's price override (``Price.to_dict()``), ``None``: none
    price: dict[str, float] | None = None


def eval_worker(job: EvalJob, messages: Any, go: Any) -> None:
    """A worker process: set Django up with the parent's settings, build the
    provider, say ``ready``, wait for ``go``, drive, say ``exit``."""
    import asyncio
    import signal

    import django

    # Ctrl-C reaches the whole process group: the parent alone handles it
    # and stops the workers (their turns are resumed with the run).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentlab.settings")
    django.setup()
    from django.conf import settings as worker_settings
    from django.db import connections as worker_connections

    from agentlab.agent.pricing import Price
    from common.db import DatabaseThreads
    from turns.llm import get_provider

    from .models import Example
    from .runner import DatabaseOutage, drive_examples
    from .services.plan import PlannedExample

    try:
        for name, value in job.settings.items():
            setattr(worker_settings, name, value)
        for alias, name in job.database_names.items():
            worker_connections[alias].settings_dict["NAME"] = name
        examples = Example.objects.select_related("dataset").in_bulk(
            [example_id for _, _, example_id, _ in job.items]
        )
        planned = [
            PlannedExample(prediction_id, turn_id, examples[example_id], resumed)
            for prediction_id, turn_id, example_id, resumed in job.items
        ]
        provider = get_provider(model=job.model, price=Price.from_dict(job.price))
        worker_connections.close_all()
    except Exception as exc:
        messages.put(("error", f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from exc
    messages.put(("ready", os.getpid()))
    go.wait()

    async def drive() -> None:
        with DatabaseThreads(max_workers=min(job.concurrency, 8)) as db:
            try:
                await drive_examples(
                    planned,
                    provider=provider,
                    db=db,
                    concurrency=job.concurrency,
                    on_done=lambda item: messages.put(("done", item.prediction_id)),
                    review=job.review,
                    extensions=job.extensions,
                    run_id=job.run_id,
                    dataset=job.dataset,
                )
            finally:
                await provider.aclose()

    try:
        asyncio.run(drive())
    except DatabaseOutage as exc:
        messages.put(("outage", str(exc)))
        raise SystemExit(75) from exc
    except Exception as exc:
        logger.exception("evaluation worker failed")
        messages.put(("error", f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from exc
    finally:
        worker_connections.close_all()
    messages.put(("exit", os.getpid()))

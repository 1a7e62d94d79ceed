"""The worker's side of ``run_eval --celery``: the Celery task that drives a
few examples of a run. Thin by design.

``run_eval --celery`` plans the run as in process (``evaluation.run.plan``)
and sends ``evaluation.tasks.eval_example_run`` with prediction ids only —
``AGENTLAB_EVAL_BATCH`` of them per message — after the commit, to the run's
queue (``evaluation.run.on_workers``). A worker — on any machine, ``celery -A
agentlab worker --pool threads -Q QUEUE`` — drives a message's examples at
once on its process's event loop, with the same code as the in-process run
(``evaluation.run.inprocess.drive_examples``: the shared driver, the evaluation
policy, the prediction completed in the terminal event's transaction).

Delivery is at least once (``acks_late``, like ``turns.jobs.tasks.turn_run``); a
duplicate or late delivery finds the turn claimed or finished, and the
driver's conditional claim makes it write nothing. A worker killed after the
claim leaves the turn ``running`` without heartbeats: the ``run_eval`` that
follows the run interrupts and resumes it (``evaluation.run.on_workers``), and the
driver continues from the event log, so no recorded LLM reply is asked again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from celery import shared_task
from celery.signals import worker_process_shutdown
from django.conf import settings

from agentlab.agent.extensions import RunExtensions
from agentlab.agent.pricing import Price
from agentlab.agent.providers.caching import CachePolicy
from agentlab.agent.types import LLMProvider
from common.loop_thread import LoopThread
from evaluation.models import Prediction
from evaluation.run import api_start  # noqa: F401  (registers api_start.RUN_TASK on the workers)
from evaluation.run.inprocess import DatabaseOutage, drive_examples
from evaluation.run.on_workers import EVAL_TASK
from evaluation.run.plan import PlanAction, PlannedExample
from turns.jobs.tasks import DRIVER_TASK_OPTIONS, shared_db
from turns.llm import get_provider
from turns.llm_cache import cached_provider

logger = logging.getLogger(__name__)


def _planned(prediction_ids: list[int]) -> list[tuple[PlannedExample, Prediction]]:
    """The planned examples of ``prediction_ids`` that exist and have a turn,
    with their predictions (example, dataset and run joined), in one query."""
    # no ORDER BY: the model's ordering would be compiled over every joined column
    joined = Prediction.objects.select_related("example__dataset", "run")
    rows = joined.filter(pk__in=prediction_ids).order_by()
    return [
        (
            PlannedExample(
                prediction_id=p.pk,
                turn_id=p.turn_id,
                example=p.example,
                action=PlanAction.KEEP,
                epoch=p.epoch,
            ),
            p,
        )
        for p in rows
        if p.turn_id is not None
    ]


def run_extensions_of(prediction: Prediction) -> RunExtensions:
    """The extensions a worker drives ``prediction``'s example with: the
    worker's settings (``AGENTLAB_PLUGINS``, ``AGENTLAB_MCP_SERVERS``), the
    dataset's plugins and the run's ``--plugin`` names (its config)."""
    return RunExtensions(
        settings_plugins=tuple(settings.AGENTLAB_PLUGINS),
        dataset_plugins=tuple(prediction.example.dataset.plugins or ()),
        run_plugins=tuple(prediction.run.config.get("run_plugins") or ()),
        mcp_servers=tuple(settings.AGENTLAB_MCP_SERVERS),
    )


#: The worker process's event loop: every example task of the process is
#: driven on it (``common.loop_thread``), with one provider per model and price.
_loop = LoopThread("agentlab-eval-loop")


@worker_process_shutdown.connect
def _close_loop(**_: object) -> None:
    """Close the kept providers' HTTP sessions when the worker process stops."""
    _loop.close()


def _loop_provider(
    model: str | None,
    price: dict[str, float] | None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    cache: dict[str, Any] | None = None,
) -> LLMProvider:
    """The provider for ``model``, ``price`` and the run's endpoint
    ``base_url`` (``None``: this worker's own; its key from this worker's
    environment variable ``api_key_env`` when the run names one, else
    ``AGENTLAB_LLM_API_KEY``) kept on the process's loop: building one (an
    HTTP client and its session) costs ~60 ms of CPU, more than the rest of a
    short example, and its connections are reused. ``cache``: the run's
    LLM-call cache policy (``CachePolicy.to_dict()``; ``None``: no cache) —
    the worker reads and writes the same table as the process that
    started the run."""
    key = json.dumps([model, price, base_url, api_key_env, cache], sort_keys=True)
    api_key = os.environ.get(api_key_env) if api_key_env else None
    policy = CachePolicy.from_dict(cache) if cache is not None else None
    return _loop.keep(
        f"provider:{key}",
        lambda: cached_provider(
            get_provider(model=model, price=Price.from_dict(price), base_url=base_url, api_key=api_key),
            policy,
        ),
    )


async def _drive(prediction_ids: list[int], task_id: str) -> None:
    found = await shared_db().run(_planned, prediction_ids)
    missing = set(prediction_ids) - {item.prediction_id for item, _ in found}
    if missing:
        logger.warning("evaluation task: prediction(s) %s (or their turns) do not exist", sorted(missing))
    by_run: dict[int, list[tuple[PlannedExample, Prediction]]] = {}
    for item, prediction in found:
        by_run.setdefault(prediction.run_id, []).append((item, prediction))
    # one message holds examples of one run (evaluation.run.on_workers); by run all the same
    await asyncio.gather(*(_drive_run(rows, task_id) for rows in by_run.values()))


async def _drive_run(rows: list[tuple[PlannedExample, Prediction]], task_id: str) -> None:
    """Drive ``rows`` — examples of one run — at once, under the run's config."""
    prediction = rows[0][1]
    config = prediction.run.config
    await drive_examples(
        [item for item, _ in rows],
        # the run's endpoint, not the worker's: what run_eval was pointed at
        provider=_loop_provider(
            config.get("model"),
            config.get("price"),
            config.get("base_url"),
            config.get("api_key_env"),
            config.get("cache"),
        ),
        db=shared_db(),
        concurrency=len(rows),
        review=bool(config.get("review", True)),
        extensions=run_extensions_of(prediction),
        run_id=prediction.run.run_id,
        dataset=prediction.example.dataset.name,
        job_id=lambda _: task_id,
        record_unclaimed=False,
    )


@shared_task(name=EVAL_TASK, **DRIVER_TASK_OPTIONS)
def eval_example_run(prediction_ids: int | list[int]) -> None:
    """Drive the turns of predictions ``prediction_ids`` (ids, never model
    instances: one, or a batch of one run's, ``AGENTLAB_EVAL_BATCH``) at
    once and complete the predictions; nothing for a turn that is not queued
    (a duplicate delivery). A database outage under a turn leaves it
    interrupted: the following ``run_eval`` resumes it."""
    ids = [prediction_ids] if isinstance(prediction_ids, int) else list(prediction_ids)
    try:
        # on the process's one loop: this thread waits without the GIL
        _loop.run(_drive(ids, eval_example_run.request.id or ""))
    except DatabaseOutage as exc:
        logger.warning("evaluation task: predictions %s: %s", ids, exc)

"""Celery task: drive one example of a run (``run_eval --celery``). Thin by design.

``run_eval --celery`` plans the run as in process (``evaluation.services.plan``)
and sends ``evaluation.tasks.eval_example_run`` with the prediction's id only,
after the commit, to the run's queue (``evaluation.celery_run``). A worker —
on any machine, ``celery -A agentlab worker --pool threads -Q QUEUE`` — drives
the example's turn with the same code as the in-process run
(``evaluation.runner.drive_examples``: the shared driver, the evaluation
policy, the prediction completed in the terminal event's transaction).

Delivery is at least once (``acks_late``, like ``turns.tasks.turn_run``); a
duplicate or late delivery finds the turn claimed or finished, and the
driver's conditional claim makes it write nothing. A worker killed after the
claim leaves the turn ``running`` without heartbeats: the ``run_eval`` that
follows the run interrupts and resumes it (``evaluation.celery_run``), and the
driver continues from the event log, so no recorded LLM reply is asked again.
"""

from __future__ import annotations

import json
import logging

from celery import shared_task
from celery.signals import worker_process_shutdown
from django.conf import settings
from django.db import InterfaceError, OperationalError

from agentlab.agent.extensions import RunExtensions
from agentlab.agent.pricing import Price
from agentlab.agent.types import LLMProvider
from common.loop_thread import LoopThread
from turns.llm import get_provider
from turns.tasks import shared_db

from .models import Prediction
from .runner import DatabaseOutage, drive_examples
from .services.plan import PlannedExample

logger = logging.getLogger(__name__)

#: The task's registered name (``evaluation.celery_run`` sends it by this name).
EVAL_TASK = "evaluation.tasks.eval_example_run"


def _planned(prediction_id: int) -> tuple[PlannedExample, Prediction] | None:
    try:
        # get(), not filter().first(): no ORDER BY to compile over every selected column
        prediction = Prediction.objects.select_related("example__dataset", "run").get(pk=prediction_id)
    except Prediction.DoesNotExist:
        return None
    if prediction.turn_id is None:
        return None
    item = PlannedExample(prediction.pk, prediction.turn_id, prediction.example, True, prediction.epoch)
    return item, prediction


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


def _loop_provider(model: str | None, price: dict[str, float] | None) -> LLMProvider:
    """The provider for ``model`` and ``price`` kept on the process's loop:
    building one (an HTTP client and its session) costs ~60 ms of CPU, more
    than the rest of a short example, and its connections are reused."""
    key = json.dumps([model, price], sort_keys=True)
    return _loop.keep(f"provider:{key}", lambda: get_provider(model=model, price=Price.from_dict(price)))


async def _drive(prediction_id: int, task_id: str) -> None:
    found = await shared_db().run(_planned, prediction_id)
    if found is None:
        logger.warning("evaluation task: prediction %s (or its turn) does not exist", prediction_id)
        return
    item, prediction = found
    config = prediction.run.config
    await drive_examples(
        [item],
        provider=_loop_provider(config.get("model"), config.get("price")),
        db=shared_db(),
        concurrency=1,
        review=bool(config.get("review", True)),
        extensions=run_extensions_of(prediction),
        run_id=prediction.run.run_id,
        dataset=prediction.example.dataset.name,
        job_id=lambda _: task_id,
        record_unclaimed=False,
    )


@shared_task(
    name=EVAL_TASK,
    acks_late=True,
    ignore_result=True,
    # the database failed before the claim: nothing was written, try the same delivery later
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=1,
    retry_backoff_max=30,
    max_retries=12,
)
def eval_example_run(prediction_id: int) -> None:
    """Drive the turn of prediction ``prediction_id`` (an id, never a model
    instance) and complete the prediction; nothing when the turn is not
    queued (a duplicate delivery). A database outage under the turn leaves it
    interrupted: the following ``run_eval`` resumes it."""
    try:
        # on the process's one loop: this thread waits without the GIL
        _loop.run(_drive(prediction_id, eval_example_run.request.id or ""))
    except DatabaseOutage as exc:
        logger.warning("evaluation task: prediction %s: %s", prediction_id, exc)

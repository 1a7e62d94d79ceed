"""Runs started over the HTTP API (issue 46; docs/chat-and-api.md#starting-a-run):
``POST /api/runs`` checks a run's options here and hands ``run_eval`` off,
so the request returns at once.

The options are ``run_eval``'s, checked by the command's own rules
(``evaluation.run.request.eval_request``) before anything is written; the
dataset must be registered (``NAME`` or ``NAME@VERSION``). The hand-off
mirrors ``turns.jobs.handover.turn_hand_over``: with ``CELERY_BROKER_URL``
set the task :data:`RUN_TASK` carries the options (plain JSON) to a worker,
which drives the run in its own process as ``run_eval`` without ``--celery``
does; with no broker the **inline run executor** — one daemon thread of this
process, runs one after another — drives it. Either way the run's row, its
status and its predictions are what ``run_eval`` writes; ``cancel_run`` (and
``POST /api/runs/{id}/cancel``) cancel it the same way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import logging
import secrets
import shlex
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import connections
from django.utils import timezone

from agentlab.agent.providers.local import LocalModelUnavailable
from common.errors import NotFound, StateConflict
from evaluation.datasets.services import dataset_resolve_ref
from evaluation.datasets.subsets import subset_check
from evaluation.judge.provider import judge_check
from evaluation.models import Dataset, Run
from evaluation.run.request import Endpoint, EvalRequest, eval_request
from turns.llm import get_provider

logger = logging.getLogger(__name__)

#: The registered name of the API's run task (a wire contract, like ``EVAL_TASK``).
RUN_TASK = "evaluation.tasks.api_run_eval"

#: The key sent to a ``base_url`` given over the API: this server's
#: ``AGENTLAB_LLM_API_KEY`` is never sent to an address a caller chose
#: ("EMPTY" is what vLLM and llama.cpp's server accept when they need none).
FOREIGN_ENDPOINT_KEY = "EMPTY"

_executor: concurrent.futures.ThreadPoolExecutor | None = None
#: the inline executor's futures by run id (tests wait on them)
inline_futures: dict[str, concurrent.futures.Future[None]] = {}


def api_request(options: dict[str, Any]) -> EvalRequest:
    """``options`` (the JSON body's fields, ``None`` ones left out) as a checked
    ``EvalRequest``. ``base_url`` is sent :data:`FOREIGN_ENDPOINT_KEY`.
    Raises ``ValueError`` / ``BadInput`` naming the option, as ``run_eval`` does."""
    options = dict(options)
    base_url = options.pop("base_url", None)
    endpoint = Endpoint(base_url=base_url, api_key=FOREIGN_ENDPOINT_KEY) if base_url else None
    return eval_request(**options, endpoint=endpoint)


def models_check(request: EvalRequest) -> None:
    """The run's model, the judge's and the user simulator's name something
    usable before the run is handed off (each provider built, then closed; no
    GGUF file is loaded — one that is there but is no GGUF fails the run,
    which records it). Raises ``ValueError`` naming the option: without it
    a run on a model that is not there answered 202 and was never written."""
    checks = (
        ("model", lambda: asyncio.run(_built(request))),
        ("judge_model", lambda: judge_check(judge_model=request.judge_model, run_model=request.model)),
        (
            "user_model",
            lambda: judge_check(judge_model=request.user_simulator.get("model"), run_model=request.model),
        ),
    )
    for option, check in checks:
        try:
            check()
        except (LocalModelUnavailable, ValueError) as exc:
            raise ValueError(f"{option}: {exc}") from None


async def _built(request: EvalRequest) -> None:
    provider = get_provider(
        model=request.model, price=request.price, base_url=request.base_url, api_key=request.api_key
    )
    await provider.aclose()


def run_start_over_api(options: dict[str, Any]) -> str:
    """Check ``options`` and hand the run off; return its run id (the given
    one, else a new ``NAME-YYYYmmdd-HHMMSS-xxxx``).

    Raises ``ValueError`` / ``BadInput`` for a bad option (a model that is
    not usable included: ``models_check``), ``NotFound`` for a
    dataset that is not registered, ``BadInput`` for a version, split or
    tag it does not have, ``StateConflict`` for a run id taken.
    Nothing is written here: the run's row is written by ``run_eval`` where it
    is driven (so ``GET /api/runs/{id}`` may answer 404 for a moment)."""
    request = api_request(options)
    name = request.dataset.rsplit("@", 1)[0]
    if not Dataset.objects.filter(name=name).exists():
        raise NotFound(
            f"dataset {request.dataset!r}: no registered dataset {name!r} (manage.py list_datasets)"
        )
    ref = dataset_resolve_ref(name_or_path=request.dataset)
    if request.split is not None or request.tags:
        subset_check(ref.dataset, ref.number, split=request.split, tags=request.tags)
    run_id = request.run_id or f"{ref.dataset.name}-{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    if Run.objects.filter(run_id=run_id).exists():
        raise StateConflict(f"run id {shlex.quote(run_id)} is taken: choose another, or none for a new one")
    models_check(request)
    options = {**options, "run_id": run_id}
    if settings.CELERY_BROKER_URL:
        run_eval_over_api.delay(options)
    else:
        inline_futures[run_id] = _inline_executor().submit(_drive_inline, options)
    return run_id


def _inline_executor() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="api-run")
    return _executor


def _drive_inline(options: dict[str, Any]) -> None:
    try:
        drive_api_run(options)
    finally:
        connections.close_all()  # this thread's connections, not the server's


def drive_api_run(options: dict[str, Any]) -> None:
    """Drive a run started over the API to its end (``run_eval``, in this
    process). Errors are logged, never raised: ``run_eval`` has recorded the
    run's end (``error`` or ``cancelled``) on every path that wrote one."""
    from evaluation.run.evaluate import run_eval  # the driver: loaded where runs are driven
    from evaluation.run.progress import progress_for

    run_id = options.get("run_id")
    try:
        result = run_eval(
            request=api_request(options),
            note=lambda line: logger.info("run %s: %s", run_id, line),
            progress=progress_for(io.StringIO(), every_s=3600.0),
        )
        logger.info("run %s finished: %s", run_id, result.run.status)
    except Exception:
        logger.exception("run %s started over the API failed", run_id)


@shared_task(name=RUN_TASK, acks_late=False)
def run_eval_over_api(options: dict[str, Any]) -> None:
    """The Celery side of :func:`run_start_over_api`: drive the run on this worker."""
    drive_api_run(options)

"""A schedule's options as ``run_eval``'s checked request, and the checks
that keep a bad schedule out of the database (``schedule_check``): the admin
form shows them on the field they concern, never as a server error."""

from __future__ import annotations

import re
import secrets

from celery import current_app
from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.utils import timezone
from django.utils.text import slugify

from common.errors import AgentLabError, BadInput
from evaluation.datasets.names import DEMO_DATASET_NAME
from evaluation.datasets.subsets import subset_check
from evaluation.experiments.experiment_file import experiment_spec
from evaluation.judge.provider import judge_check
from evaluation.models import Dataset, EvalSchedule
from evaluation.run.request import EvalRequest, baseline_request, cache_policy, eval_request, run_id_check

#: ``run_eval``'s option (as its error messages name it) → the schedule's field.
OPTION_FIELDS = {
    "--limit": "limit",
    "--concurrency": "concurrency",
    "--max-steps": "max_steps",
    "AGENTLAB_MAX_STEPS": "max_steps",
    "--epochs": "epochs",
    "--celery": "celery",
    "--queue": "queue",
    "--plugin": "plugins",
    "--judge-model": "judge_model",
    "--model": "model",
    "--alpha": "alpha",
    "--split": "split",
    "--tag": "tags",
    "--cache-expiry": "cache_expiry",
    "--cache-sampled": "cache_sampled",
    "--cache": "cache",
}
_OPTION = re.compile(r"--[a-z-]+|AGENTLAB_[A-Z_]+")


def schedule_queue() -> str:
    """The queue beat sends scheduled evaluations to: ``AGENTLAB_SCHEDULE_QUEUE``,
    else Celery's default queue."""
    return str(settings.AGENTLAB_SCHEDULE_QUEUE or current_app.conf.task_default_queue)


def schedule_run_id(schedule: EvalSchedule) -> str:
    """A new run id for one firing of ``schedule``: its slugified name, the
    time and a random part (two firings in one second stay apart)."""
    stem = slugify(schedule.name)[:120] or f"schedule-{schedule.pk}"
    return f"{stem}-{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def field_of(message: str) -> str:
    """The schedule field an ``eval_request`` error message is about (the
    first option it names), else ``NON_FIELD_ERRORS``."""
    for option in _OPTION.findall(message):
        if option in OPTION_FIELDS:
            return OPTION_FIELDS[option]
    return NON_FIELD_ERRORS


def form_wording(message: str) -> str:
    """An ``eval_request`` message as the schedule form says it: each
    ``run_eval`` option it names becomes the field's name (``--max-steps
    must be at least 1`` → ``max steps must be at least 1``)."""

    def word(match: re.Match[str]) -> str:
        option = match.group()
        if option in ("--plugin", "--tag"):
            return option[2:]
        if option.startswith("--") and option in OPTION_FIELDS:
            return OPTION_FIELDS[option].replace("_", " ")
        return option  # a setting (AGENTLAB_MAX_STEPS) keeps its name

    return _OPTION.sub(word, message)


def schedule_request(schedule: EvalSchedule, *, run_id: str | None = None) -> EvalRequest:
    """``schedule``'s options as ``run_eval``'s ``EvalRequest`` (``eval_request``).

    Raises ``ValidationError`` ``{field: [message]}`` on the field that an
    option's error names (``field_of``)."""
    try:
        return eval_request(
            dataset=schedule.dataset.strip(),
            run_id=run_id,
            limit=schedule.limit,
            concurrency=schedule.concurrency,
            max_steps=schedule.max_steps,
            model=schedule.model.strip() or None,
            review=schedule.review,
            celery=schedule.celery,
            queue=schedule.queue.strip() or None,
            plugins=schedule.plugin_names,
            epochs=schedule.epochs,
            judge_model=schedule.judge_model.strip() or None,
            split=schedule.split.strip() or None,
            tags=schedule.tag_names,
            cache=cache_policy(
                cache=schedule.cache,
                expiry=schedule.cache_expiry.strip() or None,
                sampled=schedule.cache_sampled,
            ),
        )
    except (ValueError, AgentLabError) as exc:
        raise ValidationError({field_of(str(exc)): [form_wording(str(exc))]}) from None


def schedule_experiment_check(schedule: EvalSchedule, errors: dict[str, list[str]]) -> None:
    """A schedule that runs an experiment file: the file reads as one
    (``experiment_spec``), its dataset is registered, no dataset is given
    beside it, ``alpha`` is in (0, 1). Raises ``ValidationError`` with
    ``errors`` and these, keyed by field."""
    if schedule.dataset.strip():
        errors["dataset"] = ["give a dataset or an experiment file, not both (the file names its dataset)"]
    for field in ("split", "tags", "cache_expiry"):
        if getattr(schedule, field).strip():
            errors[field] = [
                f"an experiment file names its own {field} (its shared options): leave this blank"
            ]
    for field in ("cache", "cache_sampled"):
        if getattr(schedule, field):
            errors[field] = [f"an experiment file names its own {field} (its shared options): leave this off"]
    try:
        spec = experiment_spec(schedule.experiment_file.strip())
    except AgentLabError as exc:
        errors["experiment_file"] = [str(exc)]
    else:
        name = spec.dataset.partition("@")[0]
        if name != DEMO_DATASET_NAME and not Dataset.objects.filter(name=name).exists():
            errors["experiment_file"] = [f"{spec.path}: dataset: no dataset named {name!r}: import it first"]
    try:
        baseline_request(baseline=None, fail_on_regression=False, alpha=schedule.alpha)
    except ValueError as exc:
        errors["alpha"] = [form_wording(str(exc))]
    if errors:
        raise ValidationError(errors)


def _subset_check(name: str, request: EvalRequest) -> None:
    """The schedule's ``split`` and ``tags`` select examples of dataset
    ``name``'s latest version (``subset_check``); ``ValidationError`` on the
    field the error names otherwise. A dataset that is not registered is
    the ``dataset`` field's error already, except ``demo`` before its first
    run: it has no row, and no subset."""
    if request.split is None and not request.tags:
        return
    dataset = Dataset.objects.filter(name=name).first()
    if dataset is None and name != DEMO_DATASET_NAME:
        return
    try:
        if dataset is None:
            raise BadInput(f"--split: dataset {name!r} is not registered yet, so it has no split or tag")
        subset_check(dataset, dataset.version, split=request.split, tags=request.tags)
    except BadInput as exc:
        raise ValidationError({field_of(str(exc)): [form_wording(str(exc))]}) from None


def schedule_check(schedule: EvalSchedule) -> EvalRequest | None:
    """Check everything a firing of ``schedule`` needs before it is saved and
    return its request: exactly one of crontab and interval, a dataset that
    is registered (or ``demo``), the options (``schedule_request``), its
    ``split`` and ``tags`` on the dataset's latest version, the judge
    model, ``alpha`` in (0, 1), and — with ``celery`` — a turn queue other
    than the one the scheduled task itself runs from (a worker with one slot
    would otherwise wait for itself).

    Raises ``ValidationError`` with the messages keyed by field. A schedule
    with an ``experiment_file`` is checked by ``schedule_experiment_check``
    instead (its request is ``None``)."""
    errors: dict[str, list[str]] = {}
    if (schedule.crontab_id is None) == (schedule.interval_id is None):
        errors[NON_FIELD_ERRORS] = ["choose exactly one schedule: a crontab or an interval"]
    if schedule.experiment_file.strip():
        schedule_experiment_check(schedule, errors)
        return None
    name = schedule.dataset.strip()
    if not name:
        errors["dataset"] = ["a dataset is required (or an experiment file)"]
    elif name != DEMO_DATASET_NAME and not Dataset.objects.filter(name=name).exists():
        errors["dataset"] = [
            f"no dataset named {name!r}: import it first (manage.py import_dataset FILE), "
            f"or use {DEMO_DATASET_NAME!r}"
        ]
    try:
        run_id_check(schedule_run_id(schedule))
    except AgentLabError as exc:
        errors["name"] = [f"its runs are named after it: {exc}"]
    try:
        baseline_request(baseline=None, fail_on_regression=False, alpha=schedule.alpha)
    except ValueError as exc:
        errors["alpha"] = [form_wording(str(exc))]
    # deferred: app loading imports this module (the admin's form), and no provider module
    from agentlab.agent.providers.local import LocalModelUnavailable

    request = None
    try:
        request = schedule_request(schedule)
        judge_check(judge_model=request.judge_model, run_model=request.model)
        _subset_check(name, request)
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            errors.setdefault(field, []).extend(messages)
    except (ValueError, LocalModelUnavailable) as exc:
        errors.setdefault("judge_model", []).append(str(exc))
    if request is not None and request.celery and request.queue == schedule_queue():
        errors.setdefault("queue", []).append(
            f"the scheduled run follows its turns from a worker slot on queue {request.queue!r} "
            "(AGENTLAB_SCHEDULE_QUEUE): send its turns to another queue, or a worker with one slot "
            "would wait for itself"
        )
    if errors:
        raise ValidationError(errors)
    assert request is not None
    return request

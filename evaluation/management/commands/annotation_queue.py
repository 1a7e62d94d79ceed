"""``manage.py annotation_queue create RUN --name Q --filter F [--sample N --seed S] [--overlap K]
[--labels A,B --label-map A=correct,B=incorrect]``,
``manage.py annotation_queue create --from-feedback down [--since DATE] --name Q [--dataset D]``
and ``manage.py annotation_queue import Q FILE.csv`` (issues 30 and 45;
docs/architecture.md#annotation-queues).

``create`` makes a queue from a run's predictions (``--pairwise OTHER_RUN``:
a pairwise queue of the two runs), or with ``--from-feedback RATING`` from
the chat turns end users rated so (``evaluation.annotation.turn_queues``);
``import`` records labels from a CSV file, checked whole first. Exit codes:
0 done, 2 bad input (an unknown run or queue, a run and ``--from-feedback``
both or neither, a bad filter, date, sample, rubric or label map, no rated
turn, a bad CSV row — nothing written).
"""

from __future__ import annotations

from datetime import datetime, time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, exit_codes
from common.errors import AgentLabError
from evaluation.annotation.label_import import import_labels
from evaluation.annotation.labelling import progress
from evaluation.annotation.queues import FILTERS, create_pairwise_queue, create_queue
from evaluation.annotation.turn_queues import RATINGS, create_turn_queue


def _names(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def _label_set(raw: str | None) -> list[str] | None:
    """``--labels``' names (``None``: not given, the default set); ``ValueError``
    when it was given but names no label (``--labels ",,"``)."""
    if raw is None:
        return None
    names = _names(raw)
    if not names:
        raise ValueError(f"--labels {raw!r} names no label: give them comma-separated, e.g. good,bad")
    return names


def _label_map(raw: str | None) -> dict[str, str] | None:
    """``--label-map good=correct,bad=incorrect`` as ``{label: verdict}``
    (``None``: not given); ``ValueError`` for an item without ``=`` or a
    label named twice."""
    if raw is None:
        return None
    mapping: dict[str, str] = {}
    for item in _names(raw):
        label, sep, verdict = (part.strip() for part in item.partition("="))
        if not sep or not label or not verdict:
            raise ValueError(
                f"--label-map {raw!r}: give LABEL=VERDICT pairs separated by commas, got {item!r}"
            )
        if label in mapping:
            raise ValueError(f"--label-map {raw!r}: label {label!r} is mapped twice")
        mapping[label] = verdict
    return mapping


def _since(raw: str | None) -> datetime | None:
    """``--since``: an ISO date (its midnight, in the current time zone) or
    date-time (naive: the current time zone); ``ValueError`` for anything else."""
    if raw is None:
        return None
    try:
        moment = parse_datetime(raw)
        day = None if moment else parse_date(raw)
    except ValueError:
        moment = day = None
    if day is not None:
        moment = datetime.combine(day, time.min)
    if moment is None:
        raise ValueError(f"--since {raw!r} is not a date: give YYYY-MM-DD or an ISO 8601 date-time")
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Make an annotation queue from a run's predictions, or import labels into one from CSV."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="make a queue from a run's predictions")
        create.add_argument("run", nargs="?", default=None, help="run id (not with --from-feedback)")
        create.add_argument(
            "--from-feedback", choices=RATINGS, default=None, help="queue the chat turns rated so, not a run"
        )
        create.add_argument("--since", default=None, help="with --from-feedback: ratings given since DATE")
        create.add_argument("--dataset", default="", help="with --from-feedback: where corrections go")
        create.add_argument("--task-type", default="qa", help="with --from-feedback: the examples' task type")
        create.add_argument("--name", required=True, help="the queue's name (unique)")
        create.add_argument("--filter", dest="filter_name", default="all", choices=FILTERS)
        create.add_argument("--sample", type=int, default=None, help="a random sample of N predictions")
        create.add_argument("--seed", type=int, default=None, help="the sample's seed (reproducible)")
        create.add_argument("--overlap", type=int, default=1, help="reviewers per item (default 1)")
        create.add_argument("--labels", default=None, help="the label set, comma-separated")
        create.add_argument(
            "--label-map",
            default=None,
            help="with --labels: what each label means, e.g. good=correct,bad=incorrect "
            "(correct, partial or incorrect), so judge_report can compare them",
        )
        create.add_argument("--tags", default="", help="the failure-tag taxonomy, comma-separated")
        create.add_argument("--instructions", default="", help="what reviewers are to do")
        create.add_argument("--pairwise", metavar="OTHER_RUN", default=None, help="pair with another run")
        imp = sub.add_parser("import", help="record labels from a CSV file")
        imp.add_argument("queue", help="queue name")
        imp.add_argument("file", help="CSV: question_id, reviewer, label[, tags, note]")

    def handle(self, *args: Any, **opts: Any) -> None:
        with exit_codes(AgentLabError, ValueError), database_errors():
            database_check()
            if opts["action"] == "import":
                count = import_labels(opts["queue"], Path(opts["file"]))
                self.stdout.write(f"{count} label(s) imported into queue {opts['queue']}")
                return
            queue = self._create(opts)
        source = f"run {queue.run.run_id}" if queue.run else f"chat turns (dataset {queue.dataset_name})"
        self.stdout.write(
            f"queue {queue.name} (id {queue.pk}): {progress(queue)['items']} item(s) from {source}, "
            f"filter {queue.filter}, overlap {queue.overlap}"
        )

    def _create(self, opts: dict[str, Any]) -> Any:
        if bool(opts["run"]) == bool(opts["from_feedback"]):
            raise ValueError("give a run id or --from-feedback RATING (one of them)")
        if opts["from_feedback"]:
            return create_turn_queue(
                name=opts["name"], rating=opts["from_feedback"], since=_since(opts["since"]),
                dataset_name=opts["dataset"], task_type=opts["task_type"], sample=opts["sample"],
                seed=opts["seed"], overlap=opts["overlap"], labels=_label_set(opts["labels"]),
                instructions=opts["instructions"], tags=_names(opts["tags"]),
            )  # fmt: skip
        if opts["since"] or opts["dataset"]:
            raise ValueError("--since and --dataset go with --from-feedback, not a run")
        if opts["pairwise"]:
            return create_pairwise_queue(
                opts["run"], opts["pairwise"], name=opts["name"], seed=opts["seed"],
                overlap=opts["overlap"], instructions=opts["instructions"],
            )  # fmt: skip
        return create_queue(
            opts["run"],
            name=opts["name"],
            filter_name=opts["filter_name"],
            sample=opts["sample"],
            seed=opts["seed"],
            overlap=opts["overlap"],
            labels=_label_set(opts["labels"]),
            label_map=_label_map(opts["label_map"]),
            instructions=opts["instructions"],
            tags=_names(opts["tags"]),
        )

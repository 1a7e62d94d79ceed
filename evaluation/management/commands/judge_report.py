"""``manage.py judge_report RUN [--queue NAME] [--json FILE]`` — how a run's automatic
verdicts agree with its human labels (issue 30; docs/architecture.md#annotation-queues).

Prints agreement, Cohen's κ with its 95 % interval, the confusion matrix
(automatic verdict × human label), human-verified accuracy beside the
automatic accuracy on the same items, and the disagreements. ``--json``
writes ``alignment.judge_report`` with ``human`` (``human_accuracy``) and
``corrected`` (the judge-corrected accuracy by prediction-powered inference,
``evaluation.annotation.corrected``; ``--queue NAME`` picks the random queue
it rests on). Exit codes: 0 done, 2 bad input (an unknown run or queue, no
label on the run, a ``--queue`` that is not a uniform random sample, a queue
of the run with its own labels and no ``--label-map``, an unwritable
``--json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.commands import (
    BATCH_COMMAND_CHECKS,
    database_check,
    database_errors,
    exit_codes,
    json_target_check,
)
from common.errors import AgentLabError, BadInput, NotFound
from evaluation.annotation.alignment import human_accuracy, judge_report
from evaluation.annotation.corrected import judge_corrected_accuracy
from evaluation.annotation.report_text import corrected_text, format_judge_report
from evaluation.models import Run


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Compare a run's automatic verdicts (the judge's or any scorer's) with its human labels."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="run id")
        parser.add_argument("--json", dest="json_path", default=None, help="also write the report as JSON")
        parser.add_argument(
            "--queue",
            default=None,
            help="the randomly drawn queue (--filter all) the judge-corrected accuracy rests on "
            "(default: every such queue of the run)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        json_path: str | None = opts["json_path"]
        with exit_codes(AgentLabError, ValueError):
            if json_path:
                json_target_check(json_path)
            with database_errors():
                database_check()
                run = Run.objects.select_related("dataset").filter(run_id=opts["run"]).first()
                if run is None:
                    raise NotFound(f"no run with id {opts['run']!r}")
                report = judge_report(run)
                if not report["items"]:
                    raise BadInput(f"run {run.run_id!r} has no human label: label it in a queue first")
                report["human"] = human_accuracy(run)
                report["corrected"] = judge_corrected_accuracy(run, opts["queue"])
        self.stdout.write(format_judge_report(report, report["human"]) + corrected_text(report["corrected"]))
        if json_path:
            try:
                Path(json_path).write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"could not write --json {json_path}: {exc}", returncode=2) from exc

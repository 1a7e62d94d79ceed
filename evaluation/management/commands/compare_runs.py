"""``manage.py compare_runs BASE CANDIDATE [--json FILE]`` — compare two runs
on one dataset, paired by example (issue 15).

Prints the comparison's tables (``evaluation.compare.comparison_table``) and writes
the ``Comparison`` as JSON with ``--json``. Exit codes: 0 done, 2 bad input
(an unknown run id, runs on different datasets, an unwritable ``--json``, a
database that cannot be read).
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
from common.errors import AgentLabError
from evaluation.compare.comparison_table import format_comparison
from evaluation.compare.services import run_compare_ids


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = (
        "Compare a candidate run with a baseline run on the same dataset: paired accuracy with a 95% "
        "interval and exact McNemar p, overall and per task type; fixed and broken examples; deltas."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("base", help="run id of the baseline")
        parser.add_argument("candidate", help="run id of the candidate")
        parser.add_argument(
            "--json", dest="json_path", default=None, help="also write the comparison as JSON to FILE"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        json_path: str | None = opts["json_path"]
        with exit_codes(AgentLabError, ValueError):
            if json_path:
                json_target_check(json_path)  # before the work: the file is written after it
            with database_errors():
                database_check()
                comparison = run_compare_ids(base_run_id=opts["base"], candidate_run_id=opts["candidate"])
        self.stdout.write(format_comparison(comparison))
        if json_path:
            try:
                Path(json_path).write_text(
                    json.dumps(comparison, indent=2, ensure_ascii=False), encoding="utf-8"
                )
            except OSError as exc:
                raise CommandError(f"could not write --json {json_path}: {exc}", returncode=2) from exc

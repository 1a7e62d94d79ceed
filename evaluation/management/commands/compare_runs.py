"""``manage.py compare_runs BASE CANDIDATE [--slices [--fdr Q]] [--json FILE] [--junit-xml FILE]
[--summary-md FILE]`` — compare two runs on one dataset, paired by example (issue 15).

Prints the comparison's tables (``evaluation.compare.comparison_table``),
writes the ``Comparison`` as JSON with ``--json``, the candidate's
predictions as JUnit XML with ``--junit-xml`` and a Markdown summary with
``--summary-md`` (docs/evaluating.md#ci-reports). ``--slices`` adds the
regression slices (``evaluation.compare.slices``; ``slices`` in the JSON).
Exit codes: 0 done, 2 bad input (an unknown run id, runs on different
datasets, an unwritable output file, a database that cannot be read, an
``--fdr`` outside (0, 1) or without ``--slices``).
"""

from __future__ import annotations

import json
import math
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
from common.errors import AgentLabError, BadInput
from evaluation.ci.outputs import add_report_arguments, report_targets
from evaluation.ci.reports import comparison_reports
from evaluation.compare.comparison_table import format_comparison, format_slices
from evaluation.compare.services import run_compare
from evaluation.compare.slice_data import run_slices
from evaluation.compare.slices import DEFAULT_FDR
from evaluation.selectors import run_get


def _fdr(text: str | None, *, slices: bool) -> float | None:
    """``--fdr`` as a number in (0, 1) when ``--slices`` is given (default
    0.1), ``None`` without ``--slices``; ``BadInput`` otherwise."""
    if text is None:
        return DEFAULT_FDR if slices else None
    if not slices:
        raise BadInput("--fdr applies to --slices: give --slices too")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:  # NaN fails too
        raise BadInput(f"--fdr must be a number in (0, 1), e.g. 0.1; got {text!r}")
    return value


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
        parser.add_argument(
            "--slices",
            action="store_true",
            help="test every slice (task type, metadata, tools, scorer, question length, pairs of them) "
            "and list those where the candidate is worse (Benjamini-Hochberg)",
        )
        parser.add_argument(
            "--fdr", default=None, help="the false discovery rate of --slices, in (0, 1) (default 0.1)"
        )
        parser.add_argument(
            "--alpha",
            type=float,
            default=0.05,
            help="significance level of the summary's regression verdict (0.05)",
        )
        add_report_arguments(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        json_path: str | None = opts["json_path"]
        with exit_codes(AgentLabError, ValueError):
            fdr = _fdr(opts["fdr"], slices=opts["slices"])
            if json_path:
                json_target_check(json_path)  # before the work: the file is written after it
            targets = report_targets(junit_xml=opts["junit_xml"], summary_md=opts["summary_md"])
            if not 0 < opts["alpha"] < 1:
                raise ValueError(f"--alpha must be between 0 and 1 (exclusive), got {opts['alpha']}")
            with database_errors():
                database_check()
                base, candidate = run_get(run_id=opts["base"]), run_get(run_id=opts["candidate"])
                comparison = run_compare(base=base, candidate=candidate)
                if fdr is not None:
                    comparison["slices"] = run_slices(base=base, candidate=candidate, fdr=fdr)
        self.stdout.write(format_comparison(comparison))
        if "slices" in comparison:
            self.stdout.write(format_slices(comparison["slices"]))
        try:
            if json_path:
                try:
                    Path(json_path).write_text(
                        json.dumps(comparison, indent=2, ensure_ascii=False), encoding="utf-8"
                    )
                except OSError as exc:
                    raise ValueError(f"could not write --json {json_path}: {exc}") from exc
            comparison_reports(
                targets, base=base, candidate=candidate, comparison=comparison, alpha=opts["alpha"]
            )
        except ValueError as exc:
            raise CommandError(str(exc), returncode=2) from exc

"""``manage.py run_experiment FILE.toml`` — one dataset, many variants of the
agent, each a run driven at once with ``run_eval``'s services; then the
leaderboard (docs/evaluating.md#experiments).

Exit codes are ``run_eval``'s (docs/exit-codes): 0 done, 1 a gate failed (a
variant below ``fail_under``, or with ``--fail-on-regression`` a significant
regression against the file's ``baseline`` variant), 2 bad input (the file,
a key, the dataset, a changed variant — nothing is written then), 75 the
database or broker failed mid-run, 130 Ctrl-C; the last two print the
command that resumes every unfinished variant.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentlab.agent.providers.local import LocalModelUnavailable
from common.commands import (
    BATCH_COMMAND_CHECKS,
    database_check,
    database_errors,
    exit_codes,
    json_target_check,
)
from common.errors import AgentLabError
from evaluation.ci.outputs import ReportTargets, add_report_arguments, report_targets
from evaluation.ci.reports import experiment_reports
from evaluation.datasets.jsonl import DatasetFormatError
from evaluation.experiments.experiment_file import experiment_spec
from evaluation.experiments.leaderboard_table import leaderboard_text
from evaluation.experiments.ranking import Leaderboard, leaderboard, leaderboard_json
from evaluation.experiments.runner import ExperimentResult, run_experiment
from evaluation.experiments.stopping import stop_rule
from evaluation.run.evaluate import RunInterrupted
from evaluation.run.exits import EXIT_TEMPFAIL, RunOutage
from evaluation.run.progress import progress_for


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Run every variant of an experiment file (TOML) over its dataset, then print the leaderboard."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "file", help="the experiment file (TOML; its keys: docs/evaluating.md#experiments)"
        )
        parser.add_argument(
            "--fail-on-regression",
            action="store_true",
            help="exit 1 when a variant is worse than the file's baseline variant with exact McNemar "
            "p < alpha overall, or a Holm-adjusted p < alpha in a task type",
        )
        parser.add_argument(
            "--retry-errors",
            action="store_true",
            help="run again the examples whose turn ended in an error (a provider outage, say) or was "
            "cancelled, in every variant, as new attempts",
        )
        parser.add_argument(
            "--stop-when-decided",
            action="store_true",
            help="drive the variants in rounds of --batch-size examples and stop once the top group is "
            "decided by a confidence sequence (docs/comparing.md#stopping-early); the examples not "
            "reached are not run (the file's stop_when_decided = true does the same)",
        )
        parser.add_argument(
            "--margin",
            type=float,
            default=None,
            help="with --stop-when-decided: a difference in accuracy in (0, 1) within which two variants "
            "are equivalent (default: the file's margin, else 0.05)",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=None,
            help="with --stop-when-decided: examples per round (default: the file's batch_size, else 20)",
        )
        parser.add_argument(
            "--json",
            dest="json_path",
            default=None,
            help="also write the experiment's leaderboard (as manage.py leaderboard --json) to FILE",
        )
        add_report_arguments(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        path: str = opts["file"]
        json_path: str | None = opts["json_path"]
        try:
            with (
                exit_codes(DatasetFormatError, AgentLabError, ValueError, LocalModelUnavailable),
                database_errors(),
            ):
                spec = experiment_spec(path)
                stop = stop_rule(
                    spec, flag=opts["stop_when_decided"], margin=opts["margin"], batch=opts["batch_size"]
                )
                if json_path:
                    json_target_check(json_path)
                targets = report_targets(junit_xml=opts["junit_xml"], summary_md=opts["summary_md"])
                database_check()
                progress = progress_for(sys.stderr, every_s=float(settings.AGENTLAB_PROGRESS_EVERY_S))
                result = run_experiment(
                    spec,
                    note=_once(self.stderr.write),
                    progress=progress,
                    fail_on_regression=opts["fail_on_regression"],
                    retry_errors=opts["retry_errors"],
                    stop=stop,
                )
        except RunInterrupted as exc:
            self._resume_hint(path, opts, "\n" + _interrupted_words(exc))
            raise SystemExit(130) from None
        except RunOutage as exc:
            self._resume_hint(
                path, opts, f"\n{exc}\nonce the {exc.what} is back, resume the experiment with:"
            )
            raise SystemExit(EXIT_TEMPFAIL) from None
        self._report(result, json_path, targets)

    def _report(self, result: ExperimentResult, json_path: str | None, targets: ReportTargets) -> None:
        """The leaderboard, the JSON file; exit 1 on a failed gate."""
        board = leaderboard(result.experiment)
        self.stdout.write(leaderboard_text(board))
        for outcome in result.variants:
            if outcome.baseline is not None and outcome.baseline.regressions:
                self.stderr.write(
                    f"variant {outcome.variant.name}: regression against the baseline: "
                    + "; ".join(outcome.baseline.regressions)
                )
        self.stdout.write(
            f"experiment {result.experiment.name!r}: manage.py leaderboard "
            f"{shlex.quote(result.experiment.name)} shows it again"
        )
        if json_path:
            document = leaderboard_json(board)
            try:
                Path(json_path).write_text(
                    json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8"
                )
            except OSError as exc:
                raise CommandError(
                    f"could not write --json {json_path}: {exc}; the runs are stored "
                    f"(manage.py leaderboard {shlex.quote(result.experiment.name)} --json FILE writes it)",
                    returncode=2,
                ) from exc
        _ci_reports(result, board, targets)
        if result.failures:
            raise CommandError("; ".join(result.failures), returncode=1)

    def _resume_hint(self, path: str, opts: dict[str, Any], first: str) -> None:
        """Say how to resume: the same command, which resumes every unfinished variant."""
        self.stderr.write(first)
        words = [sys.executable, "manage.py", "run_experiment", path]
        for flag in ("fail_on_regression", "retry_errors", "stop_when_decided"):
            if opts[flag]:
                words.append("--" + flag.replace("_", "-"))
        for option in ("margin", "batch_size"):
            if opts[option] is not None:
                words += ["--" + option.replace("_", "-"), str(opts[option])]
        for key, option in (
            ("json_path", "--json"),
            ("junit_xml", "--junit-xml"),
            ("summary_md", "--summary-md"),
        ):
            if opts[key]:
                words += [option, opts[key]]
        self.stderr.write("  " + " ".join(shlex.quote(word) for word in words))
        return None


def _ci_reports(result: ExperimentResult, board: Leaderboard, targets: ReportTargets) -> None:
    """``--junit-xml`` and ``--summary-md``: every variant's run, each
    compared with the baseline variant (written whatever the gate says)."""
    runs = [outcome.run for outcome in result.variants if outcome.run is not None]
    comparisons = [
        (outcome.variant.name, outcome.baseline.comparison)
        for outcome in result.variants
        if outcome.baseline is not None and outcome.baseline.comparison is not None
    ]
    try:
        experiment_reports(
            targets,
            board=leaderboard_json(board),
            runs=runs,
            comparisons=comparisons,
            failures=result.failures,
        )
    except ValueError as exc:
        raise CommandError(
            f"{exc}; the runs are stored (manage.py leaderboard {shlex.quote(result.experiment.name)})",
            returncode=2,
        ) from exc


def _once(write: Callable[[str], Any]) -> Callable[[str], None]:
    """``write``, skipping a line written before (a dataset's note is said
    once, not once per variant)."""
    seen: set[str] = set()

    def note(line: str) -> None:
        if line not in seen:
            seen.add(line)
            write(line)

    return note


def _interrupted_words(exc: RunInterrupted) -> str:
    """What Ctrl-C left behind, in words."""
    if exc.turns_keep_running:
        return f"stopped following the experiment: {exc.left}. To follow it again:"
    return "interrupted; the same command resumes every unfinished variant:"

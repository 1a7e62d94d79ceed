"""``manage.py leaderboard EXPERIMENT [--json FILE] [--alpha A] [--rank-by answer|trajectory]`` — an
experiment's leaderboard (docs/evaluating.md#leaderboard): its variants best
first, every pair compared (exact McNemar, or the paired bootstrap with
epochs; Holm-adjusted across the pairs), the top group and the
accuracy-vs-cost frontier. ``--rank-by trajectory`` ranks by trajectory pass
instead (``evaluation.experiments.trajectory_ranking``; default: the
experiment file's ``rank_by``, else ``answer``).

Prints the tables (``evaluation.experiments.leaderboard_table``) and writes
the leaderboard as JSON with ``--json``. Exit codes: 0 done, 2 bad input (an
unknown experiment, an ``--alpha`` outside (0, 1), an unknown ``--rank-by``, an unwritable ``--json``,
a database that cannot be read).
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
from common.errors import AgentLabError
from evaluation.experiments.leaderboard_table import leaderboard_text
from evaluation.experiments.ranking import experiment_get, leaderboard, leaderboard_json
from evaluation.experiments.trajectory_ranking import rank_by_check


def alpha_option(text: str | None) -> float | None:
    """``--alpha``'s value as a float in (0, 1), ``None`` when not given.
    Raises ``ValueError`` saying what is wrong otherwise."""
    if text is None:
        return None
    try:
        alpha = float(text)
    except ValueError:
        alpha = math.nan
    if not 0 < alpha < 1:  # NaN fails too
        raise ValueError(f"--alpha must be a number between 0 and 1 (exclusive), e.g. 0.05; got {text!r}")
    return alpha


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = (
        "Print an experiment's leaderboard: its variants best first with accuracy and interval, cost, "
        "latency; every pair compared (exact McNemar, Holm-adjusted); the top group and the frontier."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("experiment", help="the experiment's name (or its slug)")
        parser.add_argument(
            "--json", dest="json_path", default=None, help="also write the leaderboard as JSON to FILE"
        )
        parser.add_argument(
            "--alpha",
            default=None,
            help="the significance level of the top group (default: the experiment's own, 0.05 unless set)",
        )
        parser.add_argument(
            "--rank-by",
            dest="rank_by",
            default=None,
            help="rank by 'answer' (the answer's verdict) or 'trajectory' (the trajectory scorer's pass; "
            "pairs: exact McNemar on trajectory pass); default: the experiment file's rank_by, else answer",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        json_path: str | None = opts["json_path"]
        with exit_codes(AgentLabError, ValueError):
            alpha = alpha_option(opts["alpha"])
            rank_by = None if opts["rank_by"] is None else rank_by_check(opts["rank_by"], where="--rank-by")
            if json_path:
                json_target_check(json_path)  # before the work: the file is written after it
            with database_errors():
                database_check()
                board = leaderboard(experiment_get(opts["experiment"]), alpha=alpha, rank_by=rank_by)
        self.stdout.write(leaderboard_text(board))
        if json_path:
            try:
                Path(json_path).write_text(
                    json.dumps(leaderboard_json(board), indent=2, ensure_ascii=False), encoding="utf-8"
                )
            except OSError as exc:
                raise CommandError(f"could not write --json {json_path}: {exc}", returncode=2) from exc

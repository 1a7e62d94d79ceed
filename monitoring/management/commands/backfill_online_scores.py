"""``manage.py backfill_online_scores EVALUATOR --since WHEN [--until WHEN] [--ignore-sampling]``
— score the chat turns that ended in a past period with an online evaluator
(docs/monitoring.md#backfill).

Prints one line: how many turns were scored, scored before, outside the
sample or filtered. Exit codes: 0 done, 2 bad input (no such evaluator, a
date that cannot be read, ``--since`` not before ``--until``, a database
that cannot be reached), 130 Ctrl-C (running it again goes on: scored turns
are left alone).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, exit_codes
from common.errors import AgentLabError
from common.moments import parse_moment
from monitoring.backfill import backfill, evaluator_named


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Score the chat turns of a past period with an online evaluator."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("evaluator", help="the online evaluator's name (or id)")
        parser.add_argument("--since", required=True, help="from this ISO date or date-time (UTC if naive)")
        parser.add_argument("--until", default=None, help="up to, not including, this one (default: now)")
        parser.add_argument(
            "--ignore-sampling", action="store_true", help="score every matching turn, not only the sample"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        with (
            exit_codes(
                AgentLabError,
                ValueError,
                stderr=self.stderr,
                interrupted="\ninterrupted; run it again to go on (scored turns are left alone)",
            ),
            database_errors(),
        ):
            database_check()
            evaluator = evaluator_named(opts["evaluator"])
            since = parse_moment(opts["since"], option="--since")
            until = parse_moment(opts["until"], option="--until") if opts["until"] else timezone.now()
            counts = backfill(
                evaluator=evaluator, since=since, until=until, ignore_sampling=opts["ignore_sampling"]
            )
        parts = ", ".join(f"{counts[k]} {k}" for k in sorted(counts)) or "no turns in that period"
        self.stdout.write(f"online evaluator {evaluator.name!r}: {parts}")

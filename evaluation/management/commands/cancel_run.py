"""``manage.py cancel_run RUN_ID`` — cancel a run's remaining turns.

For a ``run_eval --celery`` run whose turns run on Celery workers (Ctrl-C of
``run_eval`` stops following, not the turns), and for any run being driven:
queued turns end at once, running ones within ``CANCEL_POLL_S``. Exit codes:
0 done; 2 an unknown run id, a run that has finished with no turn left to
cancel (its status is kept), or a database that cannot be reached.
"""

from __future__ import annotations

import shlex
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, exit_codes
from common.errors import AgentLabError
from evaluation.run.cancel import run_cancel


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Cancel a run's remaining turns (queued ones at once, running ones within seconds)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="the run id")

    def handle(self, *args: Any, **opts: Any) -> None:
        with exit_codes(AgentLabError), database_errors():
            database_check()
            result = run_cancel(run_id=opts["run_id"])
        run_id = shlex.quote(result.run.run_id)
        self.stdout.write(
            f"run {run_id}: {result.cancelled} turn(s) cancelled; "
            + (
                "the run_eval following it finishes it as cancelled"
                if result.followed
                else f"run finished as {result.run.status}"
            )
        )

"""``manage.py export_predictions RUN --out FILE.csv|FILE.jsonl`` — write a
run's predictions, one row each in example then epoch order
(``evaluation.run.prediction_export``): CSV (UTF-8, a header row) or JSON lines, by the
file's suffix.

Prints one line to stderr: ``wrote 40 predictions of run gsm to gsm.csv``.
Exit codes: 0 done, 2 bad input (an unknown run, a suffix other than
``.csv``/``.jsonl``, a folder that does not exist or cannot be written, a
database that cannot be reached or is not migrated); nothing is left at
``FILE`` then.
"""

from __future__ import annotations

import shlex
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, exit_codes
from common.errors import AgentLabError
from evaluation.datasets.export import file_replacing, out_path_check
from evaluation.run.prediction_export import prediction_rows, write_csv, write_jsonl
from evaluation.selectors import run_get


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Write a run's predictions as CSV or JSON lines (by --out's suffix)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="the run id")
        parser.add_argument("--out", required=True, metavar="FILE", help="a .csv or .jsonl file to write")

    def handle(self, *args: Any, run: str, out: str, **opts: Any) -> None:
        try:
            with exit_codes(AgentLabError):
                path = out_path_check(out, suffixes=(".csv", ".jsonl"))
                with database_errors():
                    database_check()
                    found = run_get(run_id=run)
                    with file_replacing(path) as target:
                        rows = prediction_rows([found])
                        count = (
                            write_csv(rows, target)
                            if path.suffix.lower() == ".csv"
                            else write_jsonl(rows, target.write)
                        )
        except OSError as exc:
            raise CommandError(f"cannot write --out {out}: {exc.strerror or exc}", returncode=2) from exc
        self.stderr.write(f"wrote {count} predictions of run {shlex.quote(found.run_id)} to {path}")

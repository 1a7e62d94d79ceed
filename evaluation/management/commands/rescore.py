"""``manage.py rescore RUN --scorer NAME [--judge-model M] [--run-id ID]`` —
score a finished run's stored predictions again, into a new run, without
running the agent.

Prints the new run's metrics table and id. Exit codes: 0 done, 2 bad input
(unknown run or scorer, a run that is not finished, a taken run id, a
database that cannot be reached), 130 Ctrl-C (the same ``--run-id`` again
takes it up).
"""

from __future__ import annotations

import shlex
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentlab.agent.providers.local import LocalModelUnavailable
from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, exit_codes
from common.errors import AgentLabError
from evaluation.metrics.metrics_table import format_table
from evaluation.run.rescoring import rescore
from evaluation.scoring.dispatch import KNOWN_SCORERS


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Score a finished run's predictions again with another scorer, into a new run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="the run id of a finished run")
        parser.add_argument(
            "--scorer",
            required=True,
            help=f"the scorer: {', '.join(sorted(KNOWN_SCORERS))}, "
            "trajectory / trajectory_judge (the agent's paths, from the event log), or a scorer of a plugin "
            "(the agentlab_scorers hook) of AGENTLAB_PLUGINS or the run's dataset",
        )
        parser.add_argument(
            "--judge-model",
            default=None,
            help="the grading model for --scorer judge (default: the run's model); a model name at "
            "the endpoint, or a GGUF path, 'local' or the local model's name for the embedded model",
        )
        parser.add_argument("--run-id", default=None, help="the new run's id (the same id again resumes it)")
        parser.add_argument("--concurrency", type=int, default=4, help="judge calls at once (default 4)")

    def handle(self, *args: Any, **opts: Any) -> None:
        with (
            exit_codes(
                AgentLabError,
                ValueError,
                LocalModelUnavailable,
                stderr=self.stderr,
                interrupted="\ninterrupted; run again with the same --run-id to resume",
            ),
            database_errors(),
        ):
            database_check()
            result = rescore(
                source_run_id=opts["run"],
                scorer=opts["scorer"],
                judge_model=opts["judge_model"],
                run_id=opts["run_id"],
                concurrency=opts["concurrency"],
            )
        run = result.run
        tally = result.judge
        judged = ""
        if tally is not None:
            reason = (
                run.predictions.filter(scorer="judge", score__isnull=True)
                .exclude(score_explanation="")
                .values_list("score_explanation", flat=True)
                .first()
            )
            judged = "; " + tally.describe(first_reason=reason or "")
        source = shlex.quote(opts["run"])
        self.stderr.write(f"re-scored {result.copied} predictions of {source} with {opts['scorer']}{judged}")
        self.stdout.write(format_table(run.metrics))
        self.stdout.write(f"run id: {shlex.quote(run.run_id)}")

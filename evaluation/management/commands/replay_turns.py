"""``manage.py replay_turns (--run RUN | --turns [filters]) (--variant FILE.toml | options)``:
drive recorded turns again under a variant, serving their recorded tool
results while the new agent follows their path, and say where it first left
it (docs/evaluating.md#replaying-recorded-turns).

Exit codes (docs/exit-codes.md): 0 done — also when the selection holds no
turn ("nothing to replay", nothing written); 2 bad input, nothing written (an
unknown run, a variant file that cannot be read or has an unknown key, options
that do not go together, a replay of that ``--name`` started with other
options, the database); 130 Ctrl-C, with the command that resumes the replay.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from agentlab.agent.providers.local import LocalModelUnavailable
from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, exit_codes
from common.errors import AgentLabError
from evaluation.models import ReplayItem, ReplayVerdict
from evaluation.replay.replay_drive import replay_drive, replay_finish
from evaluation.replay.replay_open import ReplayRequest, replay_open
from evaluation.replay.selection import turn_filters
from evaluation.replay.variant import replay_variant
from evaluation.replay.verdicts import summary_lines
from evaluation.run.llm_options import add_agent_options, agent_options
from evaluation.run.request import MAX_CONCURRENCY
from evaluation.scoring.trajectory_spec import ARGS_MODES
from turns.llm import get_provider


def _add_selection_options(parser: CommandParser) -> None:
    parser.add_argument("--run", default=None, metavar="RUN", help="replay this run's predictions' turns")
    parser.add_argument("--turns", action="store_true", help="replay finished chat turns (the filters below)")
    parser.add_argument("--group", default=None, help="--turns: only turns whose owner is in this group")
    parser.add_argument("--since", default=None, help="--turns: created at or after (ISO date or date-time)")
    parser.add_argument("--until", default=None, help="--turns: created before (ISO date or date-time)")
    parser.add_argument(
        "--outcome", default=None, help="--turns: only this outcome (answered, asked, failed…)"
    )
    parser.add_argument("--tool", default=None, help="--turns: only turns that called this tool")
    parser.add_argument("--sample", type=int, default=None, help="a seeded random sample of N of the turns")
    parser.add_argument("--seed", type=int, default=None, help="the sample's seed (with --sample)")


def _add_variant_options(parser: CommandParser) -> None:
    parser.add_argument(
        "--variant", default=None, metavar="FILE", help="a TOML file with one experiment variant's keys"
    )
    parser.add_argument("--model", default=None, help="the model (endpoint model name or GGUF path)")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint")
    parser.add_argument("--plugin", action="append", default=[], dest="plugins", help="a plugin (repeatable)")
    parser.add_argument(
        "--max-steps", type=int, default=None, help="agent steps per turn (default: the original's)"
    )
    add_agent_options(parser)


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = (
        "Drive recorded turns again under a variant, serving their recorded tool results, "
        "and report where each first diverged."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        _add_selection_options(parser)
        _add_variant_options(parser)
        parser.add_argument("--name", default=None, help="the replay's name; the same name again resumes it")
        parser.add_argument(
            "--args-match",
            default="exact",
            choices=ARGS_MODES,
            help="how a new call's arguments must match the recorded call's (the trajectory scorers' rule)",
        )
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--until-divergence",
            dest="live",
            action="store_false",
            help="end each turn at its divergence (the default)",
        )
        mode.add_argument(
            "--live",
            dest="live",
            action="store_true",
            help="after the divergence go on with live tools, read-only ones only "
            "(any other ends the turn replay_unsafe)",
        )
        parser.set_defaults(live=False)
        parser.add_argument("--concurrency", type=int, default=4, help="turns driven at once (default 4)")

    def handle(self, *args: Any, **opts: Any) -> None:
        with exit_codes(AgentLabError, ValueError, LocalModelUnavailable):
            if not 1 <= opts["concurrency"] <= MAX_CONCURRENCY:
                raise ValueError(f"--concurrency must be 1 to {MAX_CONCURRENCY}, got {opts['concurrency']}")
            request = self._request(opts)
            options = request.variant.options
            # built before anything is written: a model that cannot be used is bad input
            provider = get_provider(
                model=options.get("model"), base_url=options.get("base_url"), api_key=request.variant.api_key
            )
        try:
            with database_errors(), exit_codes(AgentLabError, ValueError):
                database_check()
                opened = replay_open(request)
        except BaseException:
            asyncio.run(provider.aclose())
            raise
        if opened is None:
            asyncio.run(provider.aclose())
            self.stdout.write("nothing to replay: the selection holds no finished turn (nothing written)")
            return
        replay = opened.replay
        verb = "resuming" if opened.resumed else "replaying"
        self.stdout.write(f"{verb} {len(opened.planned)} turn(s) as replay {shlex.quote(replay.name)}")
        named = any(word == "--name" or word.startswith("--name=") for word in sys.argv)
        resume = shlex.join(sys.argv if named else [*sys.argv, "--name", replay.name])
        with exit_codes(stderr=self.stderr, interrupted=f"interrupted; resume with: {resume}"):
            asyncio.run(
                replay_drive(
                    replay,
                    opened.planned,
                    provider=provider,
                    extensions=request.variant.extensions(tuple(settings.AGENTLAB_PLUGINS)),
                    concurrency=opts["concurrency"],
                    on_item=lambda item: self.stdout.write(_item_line(item)),
                )
            )
        for line in summary_lines(replay_finish(replay)):
            self.stdout.write(line)

    @staticmethod
    def _request(opts: dict[str, Any]) -> ReplayRequest:
        prompt = agent_options(opts)
        overrides = {
            "model": opts["model"],
            "base_url": opts["base_url"],
            "plugins": opts["plugins"],
            "max_steps": opts["max_steps"],
            **prompt,
        }
        variant = replay_variant(path=opts["variant"], overrides=overrides)
        filters = None
        if opts["turns"]:
            filters = turn_filters(
                group=opts["group"],
                since=opts["since"],
                until=opts["until"],
                outcome=opts["outcome"],
                tool=opts["tool"],
            )
        elif any(opts[key] is not None for key in ("group", "since", "until", "outcome", "tool")):
            raise ValueError("--group, --since, --until, --outcome and --tool filter --turns")
        return ReplayRequest(
            variant=variant,
            name=opts["name"],
            run_id=opts["run"],
            filters=filters,
            sample=opts["sample"],
            seed=opts["seed"],
            args_match=opts["args_match"],
            live=opts["live"],
        )


def _item_line(item: ReplayItem) -> str:
    """One replayed turn: ``#3 turn 12 → 57: diverged at step 2 (…)``."""
    if item.completed_at is None:
        what = f"not finished ({item.turn.status}); the same --name resumes it"
    elif item.verdict == ReplayVerdict.DIVERGED:
        what = f"diverged at step {item.divergence_step}"
    elif item.verdict == ReplayVerdict.NEW_ANSWER:
        what = "new answer"
    else:
        what = "identical"
    score = ""
    if item.original_correct is not None:
        score = f" (correct: {_mark(item.original_correct)} → {_mark(item.correct)})"
    return f"#{item.position} turn {item.original_id} → {item.turn_id}: {what}{score}"


def _mark(value: bool | None) -> str:
    return "unscored" if value is None else ("yes" if value else "no")

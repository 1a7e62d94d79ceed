"""``manage.py run_eval DATASET`` — evaluate the agent over a dataset
(docs/architecture.md#evaluation-semantics).

Parses the options, calls ``evaluation.run.evaluate.run_eval``, prints the metrics table — and, with
``--baseline``, the comparison (``evaluation.compare.gate``) — and maps outcomes to exit codes: 0 done,
1 a failed gate (``--fail-under``, ``--fail-on-check``, ``--fail-on-regression``; docs/exit-codes.md),
2 bad input (options, dataset, model file, baseline, database), 75 the database failed mid-run, 130
Ctrl-C — the last two print the shell-quoted command that resumes the run.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

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
from evaluation.ci.reports import run_reports
from evaluation.compare.comparison_table import format_comparison
from evaluation.compare.gate import BaselineOutcome, baseline_compare, baseline_precheck
from evaluation.datasets.jsonl import DatasetFormatError
from evaluation.metrics.metrics_table import format_table
from evaluation.run.check_gate import add_gate_arguments
from evaluation.run.evaluate import EvalResult, RunInterrupted, run_eval
from evaluation.run.exits import EXIT_TEMPFAIL, RunOutage, resume_command
from evaluation.run.llm_options import add_agent_options, add_cache_options, agent_options, cache_options
from evaluation.run.notes import demo_epilogue
from evaluation.run.progress import progress_for
from evaluation.run.request import (
    MAX_CONCURRENCY,
    BaselineRequest,
    EvalRequest,
    baseline_request,
    eval_request,
)


class _OnceBoolean(argparse.BooleanOptionalAction):
    """``--flag`` / ``--no-flag``, refusing both (argparse lets the last win)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"give {self.option_strings[0]} or {self.option_strings[1]} once")
        super().__call__(parser, namespace, values, option_string)


def _add_run_options(parser: CommandParser) -> None:
    """What to run and how: the dataset, the run id, the examples, the agent, the review."""
    parser.add_argument(
        "dataset",
        help="registered dataset name (its latest version; NAME@2: version 2), 'demo', "
        "or a path to a .jsonl file",
    )
    parser.add_argument("--run-id", default=None, help="run id; the same id again resumes the run")
    parser.add_argument("--limit", type=int, default=None, help="only the first N examples")
    parser.add_argument(
        "--split",
        default=None,
        help='only the examples of this split (an example\'s "split": dev, test...); recorded in the run',
    )
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        dest="tags",
        metavar="TAG",
        help='only the examples carrying this tag (an example\'s "tags"; repeatable: all must match)',
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        metavar="N",
        help="N examples drawn at random (seeded by --seed, default 0), recorded in the run's config "
        "so a resume drives the same ones; not with --limit",
    )
    parser.add_argument("--seed", type=int, default=None, help="the seed of --sample (an integer)")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help=f"examples driven at once, 1 to {MAX_CONCURRENCY} (default 4)",
    )
    parser.add_argument("--max-steps", type=int, default=None, help="agent steps per example")
    parser.add_argument("--model", default=None, help="model name (endpoint) or GGUF path (local model)")
    add_gate_arguments(parser)
    parser.add_argument(
        "--review",
        action=_OnceBoolean,
        default=None,
        help="review each answer with a second LLM call, retrying once on its "
        "instruction (default AGENTLAB_REVIEW, else on for an endpoint model and off for the "
        "embedded one; --no-review halves the LLM calls)",
    )
    parser.add_argument(
        "--retry-errors",
        action="store_true",
        help="when resuming, run again the examples whose turn ended in an error "
        "(a provider outage, say) as a new attempt",
    )


def _add_celery_options(parser: CommandParser) -> None:
    """Running the examples on Celery workers."""
    parser.add_argument(
        "--celery",
        action="store_true",
        help="send the examples' turns to Celery workers (CELERY_BROKER_URL) and follow them; "
        "more cores or machines means more workers",
    )
    parser.add_argument(
        "--queue",
        default=None,
        help="with --celery: the queue the workers read (default AGENTLAB_EVAL_QUEUE, else "
        "Celery's default queue)",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=None,
        help="with --celery: at most N of this run's turns sent and not finished at once "
        "(default: no cap, the workers' concurrency bounds it)",
    )


def _add_model_options(parser: CommandParser) -> None:
    """The model's limits and prices, epochs, the judge, the simulated user."""
    parser.add_argument(
        "--max-output-tokens",
        type=int,
        default=None,
        help="output-token limit of one LLM call (default AGENTLAB_MAX_OUTPUT_TOKENS); a final "
        "answer cut by it fails its example with stop reason 'length'",
    )
    parser.add_argument(
        "--price-in",
        type=float,
        default=None,
        help="US dollars per million input tokens, for a model the price table does not know "
        "(a self-hosted or the local one); needs --price-out",
    )
    parser.add_argument(
        "--price-out",
        type=float,
        default=None,
        help="US dollars per million output tokens; needs --price-in",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="run every example K times, as independent turns (default 1, or the resumed run's); "
        "the metrics add pass@k, majority vote and how often epochs disagree",
    )
    parser.add_argument(
        "--judge-model",
        default=None,
        help="the grading model of examples scored by the LLM judge (default: the run's model); "
        "a model name at the endpoint, or a GGUF path or 'local' for the embedded model",
    )
    parser.add_argument(
        "--user-model",
        default=None,
        help="the model that plays the user of simulated-user examples (default: the run's model), "
        "named as --judge-model is; its usage is recorded under role user_simulator",
    )
    parser.add_argument(
        "--user-temperature",
        type=float,
        default=None,
        help="the simulated user's sampling temperature, fixed for the run (default 0.7)",
    )
    parser.add_argument(
        "--user-seed",
        type=int,
        default=None,
        help="the base of the simulated user's seed per (example, epoch) (default 0): runs with "
        "the same one meet the same simulated user",
    )


def _add_report_options(parser: CommandParser) -> None:
    """What the run writes and gates on: --json, the baseline comparison."""
    parser.add_argument(
        "--json",
        dest="json_path",
        default=None,
        help="also write run and metrics (and the comparison with --baseline) to FILE",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="RUN_ID|previous",
        help="compare the finished run with this run (same dataset), or with the latest finished "
        "run on the dataset with the same config apart from model and code version ('previous')",
    )
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when the run is worse than --baseline with exact McNemar p < --alpha overall, "
        "or with a Holm-adjusted p < --alpha in a task type",
    )
    parser.add_argument(
        "--alpha", type=float, default=0.05, help="significance level of --fail-on-regression (0.05)"
    )
    add_report_arguments(parser)


def _add_extension_options(parser: CommandParser) -> None:
    """Plugins and MCP servers for this run."""
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        dest="plugins",
        metavar="NAME",
        help="an entry-point plugin to switch on for this run (repeatable; after the settings', "
        "the dataset's and the example's, so its system prompt wins)",
    )
    parser.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="an MCP tool server for this run (repeatable): NAME=URL (streamable HTTP), "
        "NAME=COMMAND (stdio) or NAME={JSON} as in AGENTLAB_MCP_SERVERS",
    )


#: The option groups of ``run_eval --help``, in its order.
_OPTION_GROUPS = (
    _add_run_options,
    add_cache_options,
    add_agent_options,
    _add_celery_options,
    _add_model_options,
    _add_report_options,
    _add_extension_options,
)


def _eval_request(opts: dict[str, Any]) -> EvalRequest:
    """The command's options as a checked ``EvalRequest`` (``eval_request``)."""
    return eval_request(
        dataset=opts["dataset"],
        run_id=opts["run_id"],
        limit=opts["limit"],
        concurrency=opts["concurrency"],
        max_steps=opts["max_steps"],
        model=opts["model"],
        fail_under=opts["fail_under"],
        fail_on_check=opts["fail_on_check"],
        review=opts["review"],
        retry_errors=opts["retry_errors"],
        celery=opts["celery"],
        queue=opts["queue"],
        max_in_flight=opts["max_in_flight"],
        plugins=opts["plugins"],
        mcp=opts["mcp"],
        max_output_tokens=opts["max_output_tokens"],
        price_in=opts["price_in"],
        price_out=opts["price_out"],
        epochs=opts["epochs"],
        judge_model=opts["judge_model"],
        split=opts["split"],
        tags=opts["tags"],
        sample=opts.get("sample"),
        seed=opts.get("seed"),
        cache=cache_options(opts),
        user_model=opts.get("user_model"),
        user_temperature=opts.get("user_temperature"),
        user_seed=opts.get("user_seed"),
        **agent_options(opts),
    )


#: The last line of a run on the embedded model: what its figures are worth.
EMBEDDED_MODEL_NOTE = (
    "The embedded model is SmolLM2-135M-Instruct (135M parameters, 4-bit): it proves the pipeline "
    "offline, not what an agent can do. For a real model set AGENTLAB_LLM_BASE_URL, AGENTLAB_LLM_API_KEY "
    "and AGENTLAB_MODEL (docs/configuration.md)."
)


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Run the agent over a dataset (registered name, 'demo', or a .jsonl file) and record predictions."

    def add_arguments(self, parser: CommandParser) -> None:
        for add in _OPTION_GROUPS:
            add(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        json_path: str | None = opts["json_path"]
        try:
            with (
                exit_codes(DatasetFormatError, AgentLabError, ValueError, LocalModelUnavailable),
                database_errors(),
            ):
                request = _eval_request(opts)
                baseline = baseline_request(
                    baseline=opts["baseline"],
                    fail_on_regression=opts["fail_on_regression"],
                    alpha=opts["alpha"],
                )
                if json_path:
                    json_target_check(json_path)  # before the run: the file is written only after it
                targets = report_targets(junit_xml=opts["junit_xml"], summary_md=opts["summary_md"])
                database_check()
                baseline_precheck(baseline, dataset=request.dataset, run_id=request.run_id)
                progress = progress_for(sys.stderr, every_s=float(settings.AGENTLAB_PROGRESS_EVERY_S))
                result = run_eval(request=request, note=self.stderr.write, progress=progress)
                outcome = baseline_compare(run=result.run, request=baseline)
        except RunInterrupted as exc:
            self._interrupted(exc, opts)
        except RunOutage as exc:
            self._outage(exc, opts)
        self._report(result, outcome, json_path)
        self._ci_reports(result, outcome, targets, baseline, gated=request.gated)

    def _interrupted(self, exc: RunInterrupted, opts: dict[str, Any]) -> NoReturn:
        """Ctrl-C: say how to resume (or follow again), exit 130."""
        if exc.turns_keep_running:
            self.stderr.write(
                f"\nstopped following run {shlex.quote(exc.run_id)}: {exc.left} "
                f"(manage.py cancel_run {shlex.quote(exc.run_id)} stops them). To follow it again:"
            )
        else:
            self.stderr.write(f"\ninterrupted; to resume run {shlex.quote(exc.run_id)}:")
        self.stderr.write(f"  {self._resume(exc.run_id, opts)}")
        raise SystemExit(130) from None

    def _outage(self, exc: RunOutage, opts: dict[str, Any]) -> NoReturn:
        """The database or the broker went away: say how to resume, exit 75."""
        self.stderr.write(f"\n{exc}")
        self.stderr.write(
            f"the run is kept; once the {exc.what} is back, resume run {shlex.quote(exc.run_id)}:"
            if exc.written
            else f"once the {exc.what} is back, start run {shlex.quote(exc.run_id)} with:"
        )
        self.stderr.write(f"  {self._resume(exc.run_id, opts)}")
        raise SystemExit(EXIT_TEMPFAIL) from None

    def _report(self, result: EvalResult, outcome: BaselineOutcome, json_path: str | None) -> None:
        """The metrics table, the run id, the comparison, the JSON file."""
        self.stdout.write(format_table(result.run.metrics))
        self.stdout.write(f"run id: {shlex.quote(result.run.run_id)}")
        if outcome.note:
            self.stderr.write(outcome.note)
        if outcome.comparison is not None:
            self.stdout.write(format_comparison(outcome.comparison))
        if json_path:
            _write_json(json_path, result, outcome)
        if result.run.config.get("provider") == "local":
            self.stdout.write(EMBEDDED_MODEL_NOTE)
        if result.dataset.name == "demo":  # make demo: what it got wrong, and what next
            self.stdout.write("\n".join(demo_epilogue(result.run)))

    def _ci_reports(
        self,
        result: EvalResult,
        outcome: BaselineOutcome,
        targets: ReportTargets,
        baseline: BaselineRequest,
        *,
        gated: bool,
    ) -> None:
        """``--junit-xml`` and ``--summary-md`` (written whatever the gate
        says: a failed gate is what a CI report is for); then exit 1 on a
        failed gate (``--fail-under``, ``--fail-on-regression``)."""
        failures = [f for f in (result.gate_failure, outcome.gate_failure) if f]
        try:
            run_reports(
                targets,
                run=result.run,
                failures=failures,
                gated=gated or baseline.fail_on_regression,
                comparison=outcome.comparison,
                alpha=baseline.alpha,
                note=outcome.note or "",
            )
        except ValueError as exc:
            raise CommandError(
                f"{exc}; the run and its metrics are stored (run id {shlex.quote(result.run.run_id)})",
                returncode=2,
            ) from exc
        if failures:
            raise CommandError("; ".join(failures), returncode=1)

    def _resume(self, run_id: str, opts: dict[str, Any]) -> str:
        parser = self.create_parser("manage.py", "run_eval")
        defaults = {action.dest: action.default for action in parser._actions}
        return resume_command(dataset=opts["dataset"], run_id=run_id, options=opts, defaults=defaults)


def _write_json(json_path: str, result: EvalResult, outcome: BaselineOutcome) -> None:
    run = result.run
    document = {
        "run_id": run.run_id,
        "dataset": result.dataset.name,
        "dataset_version": run.dataset_version,
        "status": run.status,
        "config": run.config,
        "metrics": run.metrics,
        # with --baseline: the evaluation.compare.pairing.Comparison (None when skipped)
        "baseline": outcome.baseline_run_id,
        "comparison": outcome.comparison,
        "regressions": outcome.regressions,
    }
    try:
        Path(json_path).write_text(json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8")
    except OSError as exc:
        raise CommandError(
            f"could not write --json {json_path}: {exc}; the run and its metrics are stored "
            f"(run id {shlex.quote(run.run_id)})",
            returncode=2,
        ) from exc

"""``manage.py plan_eval --baseline-accuracy P --detect D [--discordance Q]
[--variants K] [--alpha A] [--power 0.8] [--epochs E] [--run RUN] [--json FILE]``
— how many examples a paired comparison needs (issue 43;
docs/comparing.md#how-many-examples).

The test planned for is the one ``compare_runs`` and the leaderboard apply:
the two-sided exact McNemar test, with Holm's adjustment over the
``K(K−1)/2`` pairs of an experiment of ``K`` variants; its power is computed
exactly (``evaluation.compare.power``). ``--run RUN`` reads ``P`` (and, when
the run has two epochs, the discordance) from a stored run. Exit codes: 0
done, 2 bad input (a ``--detect`` of 0 or ≥ 1, an accuracy outside (0, 1), a
discordance below the difference, an unknown run, an unwritable ``--json``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, json_target_check
from common.errors import AgentLabError, BadInput

METHOD = (
    "exact McNemar test (two-sided, McNemar 1947), power computed exactly over the Binomial(n, q) "
    "number of discordant examples (Fagerland, Lydersen & Laake 2013, BMC Med. Res. Methodol. 13:91); "
    "several variants: Holm (1979) over the K(K-1)/2 pairs, planned at alpha/pairs (Holm's first step); "
    "Connor (1987, Biometrics 43:207) normal approximation beside it"
)


def _unit(name: str, text: str | None, *, closed_high: bool = False) -> float | None:
    """``text`` as a number in (0, 1) (``(0, 1]`` when ``closed_high``), ``None`` when not given."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and (value <= 1 if closed_high else value < 1)):  # NaN fails too
        interval = "(0, 1]" if closed_high else "(0, 1)"
        raise BadInput(f"{name} must be a number in {interval} (a proportion, e.g. 0.05); got {text!r}")
    return value


def _inputs(opts: dict[str, Any]) -> dict[str, Any]:
    """The checked options, with ``P`` and the discordance read from ``--run``."""
    detect = _unit("--detect", opts["detect"])
    accuracy = _unit("--baseline-accuracy", opts["baseline_accuracy"])
    discordance = _unit("--discordance", opts["discordance"], closed_high=True)
    alpha = _unit("--alpha", opts["alpha"])
    power = _unit("--power", opts["power"])
    if detect is None:
        raise BadInput("--detect D is required: the difference in accuracy to detect, e.g. 0.05 for 5 pp")
    if opts["variants"] < 2 or opts["epochs"] < 1:
        raise BadInput(
            f"--variants must be >= 2 and --epochs >= 1, got {opts['variants']} and {opts['epochs']}"
        )
    source = "given"
    if opts["run"]:
        from evaluation.compare.selectors import run_plan_inputs
        from evaluation.selectors import run_get

        run_accuracy, run_discordance, source = run_plan_inputs(run=run_get(run_id=opts["run"]))
        if accuracy is None:
            if run_accuracy is None or not 0 < run_accuracy < 1:
                raise BadInput(f"--run {opts['run']}: its accuracy {run_accuracy} is not in (0, 1)")
            accuracy = run_accuracy
        discordance = discordance if discordance is not None else run_discordance
    if accuracy is None:
        raise BadInput("give --baseline-accuracy P (in (0, 1)) or --run RUN to read it from")
    if accuracy + detect > 1 and accuracy - detect < 0:
        raise BadInput(f"a difference of {detect} does not fit around an accuracy of {accuracy}")
    if discordance is None:
        from evaluation.compare.power import independent_discordance

        discordance = independent_discordance(accuracy, detect)
        source += "; discordance: the runs' errors independent (cautious: real runs agree more)"
    return {"detect": detect, "accuracy": accuracy, "discordance": discordance, "source": source,
            "alpha": alpha or 0.05, "power": power or 0.8}  # fmt: skip


def plan_text(plan: dict[str, Any]) -> str:
    """The plan (``plan_eval --json``'s document) as lines for people."""
    epochs = plan["epochs"]
    lines = [
        f"Plan: detect a difference of {plan['difference'] * 100:.1f} pp in accuracy from "
        f"{plan['baseline_accuracy'] * 100:.1f}% ({plan['source']})",
        f"  discordance {plan['discordance']:.3f}, {plan['variants']} variants = {plan['pairs']} pair(s), "
        f"alpha {plan['alpha']:g} (per pair {plan['alpha_per_pair']:.4g}), power {plan['power']:.0%}",
        f"  examples needed: {plan['examples']:,} paired (exact power {plan['achieved']:.1%})",
        f"  Connor (1987) normal approximation: {plan['connor']:,}",
    ]
    if epochs > 1:
        lines.append(
            f"  with {epochs} epochs: between {plan['examples_with_epochs']:,} examples (an example's epochs "
            f"independent) and {plan['examples']:,} (its epochs always agree)"
        )
    lines.append(f"method: {plan['method']}")
    return "\n".join(lines) + "\n"


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = (
        "How many examples a paired comparison needs to detect a difference in accuracy (exact McNemar "
        "power, Holm over the pairs of an experiment's variants)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--baseline-accuracy", default=None, help="the baseline's accuracy P, in (0, 1)")
        parser.add_argument(
            "--detect", default=None, help="the difference D to detect, in (0, 1): 0.05 = 5 pp"
        )
        parser.add_argument(
            "--discordance",
            default=None,
            help="the share Q of examples the two runs disagree on (default: errors independent)",
        )
        parser.add_argument(
            "--variants", type=int, default=2, help="variants K compared (Holm over the pairs)"
        )
        parser.add_argument("--alpha", default=None, help="significance level (0.05)")
        parser.add_argument("--power", default=None, help="the power wanted (0.8)")
        parser.add_argument("--epochs", type=int, default=1, help="epochs per example (bounds the examples)")
        parser.add_argument(
            "--run", default=None, help="read P (and Q from its epochs 1 and 2) from this run"
        )
        parser.add_argument("--json", dest="json_path", default=None, help="also write the plan as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        json_path: str | None = opts["json_path"]
        try:
            if json_path:
                json_target_check(json_path)
            if opts["run"]:
                with database_errors():
                    database_check()
                    inputs = _inputs(opts)
            else:
                inputs = _inputs(opts)
            from evaluation.compare.power import plan_sample_size

            plan = plan_sample_size(
                difference=inputs["detect"], discordance=inputs["discordance"], alpha=inputs["alpha"],
                power=inputs["power"], variants=opts["variants"],
            )  # fmt: skip
        except (AgentLabError, ValueError) as exc:
            raise CommandError(str(exc), returncode=2) from exc
        document = {
            **asdict(plan),
            "baseline_accuracy": inputs["accuracy"],
            "variants": opts["variants"],
            "epochs": opts["epochs"],
            "examples_with_epochs": math.ceil(plan.examples / opts["epochs"]),
            "source": inputs["source"],
            "method": METHOD,
        }
        self.stdout.write(plan_text(document), ending="")
        if json_path:
            try:
                Path(json_path).write_text(json.dumps(document, indent=2), encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"could not write --json {json_path}: {exc}", returncode=2) from exc

"""``run_eval --fail-on-check NAME[:MIN]`` (and ``fail_on_check`` in an
experiment file): a plugin's check made to count, as ``--fail-under`` makes
accuracy count (docs/evaluating.md, docs/exit-codes.md).

A run fails the gate (exit 1) when the check's pass rate over the run
(``metrics["checks"][NAME]``: ``passed / ran``) is below ``MIN`` (default
1.0: every time it ran it passed), or when the check never ran; the message
gives the pass rate with its 95 % Wilson interval
(``evaluation.metrics.intervals.wilson_interval``). A gate is refused before
the run is written (``BadInput``, exit 2) when ``MIN`` is not in [0, 1] or no
plugin of the run implements a check hook — no plugin can provide the check.
Plugins do not declare their check names ahead of a turn, so a check a
check-giving plugin never returns is known only at the end: "never ran".
"""

from __future__ import annotations

from argparse import ArgumentParser
from collections.abc import Mapping, Sequence
from typing import Any

from agentlab.agent.plugins import PluginError, plugin_set
from common.errors import BadInput
from evaluation.metrics.intervals import wilson_interval

#: The hooks whose implementations return checks.
CHECK_HOOKS = ("agentlab_step_checked", "agentlab_turn_finished")


def add_gate_arguments(parser: ArgumentParser) -> None:
    """``run_eval``'s quality gates: ``--fail-under`` (accuracy) and
    ``--fail-on-check`` (a plugin check's pass rate)."""
    parser.add_argument(
        "--fail-under", type=float, default=None, help="exit 1 if accuracy is below this (0..1)"
    )
    parser.add_argument(
        "--fail-on-check",
        action="append",
        default=[],
        metavar="NAME[:MIN]",
        help="exit 1 if the plugin check NAME passed in less than MIN (0..1, default 1) of the times it "
        "ran, or never ran; repeatable",
    )


def parse_fail_on_check(values: Sequence[str]) -> tuple[tuple[str, float], ...]:
    """``NAME[:MIN]`` each as ``(name, minimum)`` (``MIN`` a pass rate in
    [0, 1], default 1.0). Raises ``ValueError`` naming the bad value."""
    gates: list[tuple[str, float]] = []
    for value in values:
        name, sep, raw = str(value).partition(":")
        name = name.strip()
        if not name:
            raise ValueError(f"--fail-on-check {value!r}: give a check name (NAME or NAME:MIN)")
        try:
            minimum = float(raw) if sep else 1.0
        except ValueError:
            raise ValueError(f"--fail-on-check {value!r}: MIN must be a pass rate in [0, 1]") from None
        if not 0 <= minimum <= 1:
            raise ValueError(f"--fail-on-check {value!r}: MIN must be a pass rate in [0, 1], got {minimum:g}")
        gates.append((name, minimum))
    return tuple(gates)


def check_gate_precheck(gates: Sequence[tuple[str, float]], plugins: Sequence[str]) -> None:
    """``BadInput`` when there are ``gates`` and none of the run's
    ``plugins`` (names, as its config records them) implements a check hook."""
    if not gates:
        return
    try:
        found = plugin_set(plugins)
    except PluginError as exc:
        raise BadInput(str(exc)) from None
    if not any(found.implements(hook) for hook in CHECK_HOOKS):
        names = ", ".join(name for name, _ in gates)
        which = f"plugins {', '.join(plugins)}" if plugins else "no plugin"
        raise BadInput(
            f"--fail-on-check {names}: no plugin of this run provides checks (the run has {which}; "
            f"checks come from {' or '.join(CHECK_HOOKS)} — add one with --plugin or AGENTLAB_PLUGINS)"
        )


def check_gate_failure(metrics: Mapping[str, Any], gates: Sequence[tuple[str, float]]) -> str | None:
    """Why the run's ``metrics`` fail the first failing gate, or ``None``."""
    checks = metrics.get("checks") or {}
    for name, minimum in gates:
        block = checks.get(name) or {}
        ran, passed = int(block.get("ran") or 0), int(block.get("passed") or 0)
        if ran == 0:
            return f"check {name!r} never ran: no pass rate to meet --fail-on-check {name}:{minimum:g}"
        rate = passed / ran
        if rate < minimum:
            interval = wilson_interval(passed, ran)
            low, high = interval if interval is not None else (0.0, 1.0)
            return (
                f"check {name!r} passed {passed}/{ran} ({rate:.3f}, 95% Wilson interval "
                f"{low:.3f}–{high:.3f}), below --fail-on-check {name}:{minimum:g}"
            )
    return None

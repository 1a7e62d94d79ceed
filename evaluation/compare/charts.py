"""What the comparison page's charts draw, from a :class:`Comparison`
(pure; the page is ``evaluation.admin.report``, the charts Chart.js)."""

from __future__ import annotations

from typing import Any

from evaluation.compare.shapes import Comparison


def comparison_chart_data(comparison: Comparison) -> dict[str, Any]:
    """What the comparison page's charts draw: ``differences``, overall then
    per task type, each a :class:`Bar` of candidate − base accuracy with its
    Newcombe interval (``n``: examples both runs scored), and
    ``accuracies``: ``{"labels", "base", "candidate"}`` (paired accuracy);
    ``interval``: how the intervals were computed (``"Newcombe"``, or
    ``"bootstrap"`` for runs with epochs)."""
    scopes = [("overall", comparison["overall"]), *comparison["per_task_type"].items()]
    return {
        "interval": "bootstrap" if "method" in comparison else "Newcombe",
        "differences": [
            {
                "label": label,
                "value": s["difference"],
                "low": s["ci_low"],
                "high": s["ci_high"],
                "n": s["examples"],
            }
            for label, s in scopes
        ],
        "accuracies": {
            "labels": [label for label, _ in scopes],
            "base": [s["base_accuracy"] for _, s in scopes],
            "candidate": [s["candidate_accuracy"] for _, s in scopes],
        },
    }

"""How two scorers agree on the same predictions: a run and its re-scoring.

For a run and a run re-scored from it (``manage.py rescore``), prints both
metric tables and, over the predictions both scored (matched by example and
epoch), how often the two scorers agree on right/wrong: a 2×2 table, the
agreement rate and Cohen's kappa (Cohen 1960, "A coefficient of agreement for
nominal scales"), and the examples on which they disagree.

    python bench/scorer_agreement.py RUN_ID RESCORED_RUN_ID [--show N]

Runs with the settings of the environment, like ``manage.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def kappa(table: Counter[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa of a 2×2 agreement table ``{(a, b): count}``; ``None``
    when it is undefined (no rows, or both scorers constant and equal)."""
    n = sum(table.values())
    if not n:
        return None
    observed = (table[(True, True)] + table[(False, False)]) / n
    a_true = (table[(True, True)] + table[(True, False)]) / n
    b_true = (table[(True, True)] + table[(False, True)]) / n
    expected = a_true * b_true + (1 - a_true) * (1 - b_true)
    return None if expected == 1 else (observed - expected) / (1 - expected)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument("--show", type=int, default=10, help="disagreements to list (default 10)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from evaluation.metrics.metrics_table import format_table
    from evaluation.models import Run

    runs = [Run.objects.get(run_id=r) for r in (args.run_a, args.run_b)]
    for run in runs:
        print(f"## {run.run_id} (scorer {run.config.get('scorer')})\n")
        print(format_table(run.metrics))
    rows = [{(p.example_id, p.epoch): p for p in run.predictions.select_related("example")} for run in runs]
    table: Counter[tuple[bool, bool]] = Counter()
    unscored = 0
    disagree = []
    for key, a in rows[0].items():
        b = rows[1].get(key)
        if b is None or a.correct is None or b.correct is None:
            unscored += 1
            continue
        table[(a.correct, b.correct)] += 1
        if a.correct != b.correct:
            disagree.append((a, b))
    n = sum(table.values())
    print(f"## agreement over {n} predictions scored by both ({unscored} unscored by one or both)\n")
    print(f"| {args.run_a} (rows) vs {args.run_b} (columns) | right | wrong |\n|---|---|---|")
    print(f"| right | {table[(True, True)]} | {table[(True, False)]} |")
    print(f"| wrong | {table[(False, True)]} | {table[(False, False)]} |\n")
    agree = table[(True, True)] + table[(False, False)]
    k = kappa(table)
    print(
        f"agreement {agree}/{n}"
        + (f" = {agree / n:.1%}" if n else "")
        + (f"; Cohen's kappa {k:.3f}" if k is not None else "")
    )
    for a, b in disagree[: args.show]:
        print(
            f"- {a.example.external_id}: prediction {a.prediction[:80]!r}, gold {a.gold_answer!r}: "
            f"{a.scorer} {'right' if a.correct else 'wrong'}, {b.scorer} {'right' if b.correct else 'wrong'}"
            + (f" ({b.score_explanation[:100]})" if b.score_explanation else "")
        )


if __name__ == "__main__":
    main()

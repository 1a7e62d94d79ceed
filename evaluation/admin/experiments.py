"""The experiment admin: the list of experiments, and an experiment's page,
which is its leaderboard (docs/evaluating.md#leaderboard).

Read-only: experiments and their runs are written by ``manage.py
run_experiment``. The change page renders
``templates/admin/evaluation/experiment/leaderboard.html``: the variants best
first, each linked to its run's report, the top group and the frontier
marked; the pairwise matrix, each cell linked to the comparison of the two
runs (``evaluation.admin.report``); and an accuracy-vs-cost scatter with the
frontier joined, drawn by ``evaluation/static/evaluation/leaderboard.js`` with
the vendored Chart.js (no CDN). The figures are
``evaluation.experiments.ranking``'s.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from common.admin import DASH, StaffReadOnlyAdmin, fmt_cost, fmt_pct, subquery_count, url_query
from common.errors import AgentLabError
from evaluation.admin.regressions import compare_url
from evaluation.admin.report import CHARTJS_VERSION, report_url
from evaluation.experiments.leaderboard_table import (
    FRONTIER_MARK,
    TOP_MARK,
    legend,
    pp_text,
    stopping_notes,
    trajectory_text,
)
from evaluation.experiments.ranking import (
    Leaderboard,
    PairRow,
    VariantRow,
    best_variant,
    leaderboard,
)
from evaluation.models import Experiment, Run


def p_text(p: float) -> str:
    """A p-value as the printed tables show it: four decimals, or ``1.8e-07`` below 0.0001."""
    return f"{p:.4f}" if p >= 0.0001 else f"{p:.1e}"


def _interval(v: VariantRow) -> str:
    if v.ci_low is None or v.ci_high is None:
        return DASH
    return f"{v.ci_low * 100:.1f}–{v.ci_high * 100:.1f}%"


def variant_rows(board: Leaderboard) -> list[dict[str, Any]]:
    """The leaderboard's table rows: each variant with its figures as text
    and the URL of its run's report."""
    return [
        {
            "v": v,
            "report_url": report_url(v.run_pk),
            "accuracy": fmt_pct(v.accuracy),
            "interval": _interval(v),
            "pass_at_k": fmt_pct((v.pass_at_k or {}).get(str(v.epochs))) if v.pass_at_k else DASH,
            "trajectory": trajectory_text(v),
            "tokens": f"{v.tokens['input']:,} / {v.tokens['output']:,}",
            "cost": fmt_cost(v.cost),
            "cost_per_correct": fmt_cost(v.cost_per_correct),
            "latency": " / ".join(
                DASH if s is None else f"{s:.2f}" for s in (v.latency_p50_s, v.latency_p95_s)
            ),
            "stop_reasons": ", ".join(f"{r} {n}" for r, n in v.stop_reasons.items()) or DASH,
            "task_types": [
                fmt_pct(b["accuracy"]) + f" (n={b['n']})" if b else DASH
                for b in (v.per_task_type.get(t) for t in task_types(board))
            ],
        }
        for v in board.variants
    ]


def task_types(board: Leaderboard) -> list[str]:
    """Every task type of any variant, sorted."""
    return sorted({t for v in board.variants for t in v.per_task_type})


def _cell(pair: PairRow, *, flipped: bool, alpha: float) -> dict[str, Any]:
    """A matrix cell: row − column, linked to the comparison with the column
    as the base (so the comparison's difference is the cell's)."""
    difference = None if pair.difference is None else (-pair.difference if flipped else pair.difference)
    return {
        "difference": pp_text(difference),
        "sign": 0 if not difference else (1 if difference > 0 else -1),
        "p_holm": DASH if pair.p_holm is None else p_text(pair.p_holm),
        "significant": pair.p_holm is not None and pair.p_holm < alpha,
        "n": pair.n,
        "detectable": DASH if pair.detectable is None else f"±{pair.detectable * 100:.1f} pp",
        "url": compare_url(pair.a_pk, pair.b_pk) if flipped else compare_url(pair.b_pk, pair.a_pk),
    }


def pair_matrix(board: Leaderboard) -> list[dict[str, Any]]:
    """The pairwise matrix, rows and columns the ranked variants best first:
    each cell the row's accuracy minus the column's with its Holm-adjusted p
    (``None`` on the diagonal)."""
    ranked = [v.name for v in board.variants if v.rank is not None]
    pairs = {(p.a, p.b): p for p in board.pairs}
    rows = []
    for a in ranked:
        cells: list[dict[str, Any] | None] = []
        for b in ranked:
            if (a, b) in pairs:
                cells.append(_cell(pairs[(a, b)], flipped=False, alpha=board.alpha))
            elif (b, a) in pairs:
                cells.append(_cell(pairs[(b, a)], flipped=True, alpha=board.alpha))
            else:
                cells.append(None)
        rows.append({"name": a, "cells": cells})
    return rows


def _cost_bounds(v: Any) -> dict[str, float | None]:
    if not (v.cost_ci and v.cost_per_example and v.cost is not None):
        return {"x_low": None, "x_high": None}
    examples = v.cost / v.cost_per_example
    return {"x_low": v.cost_ci[0] * examples, "x_high": v.cost_ci[1] * examples}


def chart_data(board: Leaderboard) -> dict[str, Any]:
    """What ``leaderboard.js`` draws: ``points`` (each ranked variant of known
    cost and accuracy: ``name``, ``x`` cost in USD, ``y`` accuracy, its
    interval, ``x_low``/``x_high`` the cost's bootstrap interval, ``top_group``,
    ``pareto``, ``undecided`` (its frontier place), ``url`` of its report), ``frontier``
    (the frontier's points by ascending cost) and ``cost_unknown`` (names)."""
    points = [
        {
            "name": v.name,
            "x": v.cost,
            "y": v.accuracy,
            "ci_low": v.ci_low,
            "ci_high": v.ci_high,
            "top_group": v.top_group,
            "pareto": v.pareto,
            "url": report_url(v.run_pk),
            # the cost's 95 % bootstrap interval on the total-cost axis (per example × examples)
            **_cost_bounds(v),
            "undecided": v.frontier_undecided,
        }
        for v in board.variants
        if v.rank is not None and v.cost is not None and v.accuracy is not None
    ]
    by_name = {p["name"]: p for p in points}
    return {
        "points": points,
        "frontier": [{"name": n, "x": by_name[n]["x"], "y": by_name[n]["y"]} for n in board.frontier],
        "cost_unknown": list(board.cost_unknown),
    }


def shares_one_model(experiment: Experiment) -> bool:
    """Whether two or more of the experiment's variants ran on one in-process
    embedded model — its calls are serialised (``providers.local``), so a
    variant's latency is mostly its examples' wait for the others'."""
    configs = Run.objects.filter(experiment=experiment).values_list("config", flat=True)
    return sum(1 for c in configs if (c or {}).get("provider") == "local") > 1


@admin.register(Experiment)
class ExperimentAdmin(StaffReadOnlyAdmin):
    list_display = ("name", "dataset_at_version", "variant_count", "best", "updated_at")
    search_fields = ("name",)
    list_per_page = 50

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A superuser may delete an experiment (a mistaken or abandoned
        one); its runs are kept, as plain runs of their dataset."""
        return bool(request.user.is_active and request.user.is_superuser)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Experiment]:
        runs = Run.objects.only("pk", "experiment_id", "run_id", "variant", "status", "metrics")
        return (
            super()
            .get_queryset(request)
            .select_related("dataset")
            .annotate(variants=subquery_count(Run, "experiment_id"))
            .prefetch_related(Prefetch("runs", queryset=runs))
        )

    @admin.display(description="dataset", ordering="dataset__name")
    def dataset_at_version(self, experiment: Experiment) -> str:
        return f"{experiment.dataset.name}@{experiment.dataset_version}"

    @admin.display(description="variants", ordering="variants")
    def variant_count(self, experiment: Experiment) -> int:
        return experiment.variants  # type: ignore[attr-defined]

    @admin.display(description="best variant")
    def best(self, experiment: Experiment) -> str:
        return best_variant(experiment.runs.all()) or DASH

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        """The experiment's page is its leaderboard; a leaderboard that cannot
        be computed is a page saying why (HTTP 400)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        experiment = (
            Experiment.objects.select_related("dataset").filter(pk=object_id).first()
            if str(object_id).isdigit()
            else None
        )
        if experiment is None:
            raise Http404(f"no experiment with id {object_id}")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Leaderboard · {experiment.name}",
            "experiment": experiment,
            "chartjs_version": CHARTJS_VERSION,
            "runs_url": reverse("admin:evaluation_run_changelist")
            + "?"
            + url_query(experiment__id__exact=experiment.pk),
        }
        try:
            board = leaderboard(experiment, rank_by=request.GET.get("rank_by") or None)
        except AgentLabError as exc:
            context["error"] = str(exc)
            return TemplateResponse(
                request, "admin/evaluation/experiment/leaderboard.html", context, status=400
            )
        context.update(
            board=board,
            rows=variant_rows(board),
            task_types=task_types(board),
            matrix=pair_matrix(board),
            chart=chart_data(board),
            legend=legend(board),
            stopping=stopping_notes(board),
            top_mark=TOP_MARK,
            frontier_mark=FRONTIER_MARK,
            shared_model=shares_one_model(experiment),
            has_trajectory=any(v.trajectory for v in board.variants),
            rank_by_other="answer" if board.rank_by == "trajectory" else "trajectory",
        )
        return TemplateResponse(request, "admin/evaluation/experiment/leaderboard.html", context)

"""A run's report page (charts) and the comparison page of two runs, inside
the run admin; the "Compare" action on two selected runs.

``RunReportViews`` is mixed into ``RunAdmin``: it adds the URLs
``<pk>/report/`` and ``compare/<base_pk>/<candidate_pk>/``, the "Compare"
list action (the older selected run is the base) and the run page's links
("report with charts", "compare with the previous run on this dataset").
The numbers come from ``evaluation.metrics.report_data`` and
``evaluation.compare.services``; the templates
(``templates/admin/evaluation/run/report.html``, ``compare.html``) draw them
with Chart.js 4.6.1, vendored under ``evaluation/static/evaluation/vendor/``
(no CDN).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin import StaffReadOnlyAdmin
from common.errors import AgentLabError
from evaluation.admin.regressions import compare_url
from evaluation.annotation.alignment import human_accuracy
from evaluation.compare.charts import comparison_chart_data
from evaluation.compare.comparison_table import accuracy_rows, delta_sections, slice_rows
from evaluation.compare.pairing import few_examples_warning, unfinished_warning, versions_note
from evaluation.compare.selectors import run_previous_on_dataset
from evaluation.compare.services import run_compare
from evaluation.compare.shapes import ExamplePair, PairSide
from evaluation.compare.slice_data import run_slices
from evaluation.compare.trajectory_table import trajectory_page
from evaluation.datasets.subsets import subset_words
from evaluation.metrics.report_data import run_report_data
from evaluation.models import Run
from evaluation.selectors import dataset_accuracy_trend, run_latencies, run_stored_metrics

#: The vendored Chart.js (``evaluation/static/evaluation/vendor/chartjs/README.md``).
CHARTJS_VERSION = "4.6.1"


def report_url(run_pk: int) -> str:
    return reverse("admin:evaluation_run_report", args=[run_pk])


def _with_links(side: PairSide | None) -> dict[str, Any] | None:
    if side is None:
        return None
    turn_id = side["turn_id"]
    return {
        **side,
        "prediction_url": reverse("admin:evaluation_prediction_change", args=[side["prediction_id"]]),
        "turn_url": reverse("admin:turns_turn_change", args=[turn_id]) if turn_id else None,
    }


def pair_rows(pairs: list[ExamplePair]) -> list[dict[str, Any]]:
    """The rows of a fixed / broken / errored table: each pair with its two
    sides (base, candidate) linked to their prediction and turn pages."""
    return [{**pair, "sides": [_with_links(pair["base"]), _with_links(pair["candidate"])]} for pair in pairs]


class RunReportViews(StaffReadOnlyAdmin):
    """The report and comparison pages of the run admin (a mixin of ``RunAdmin``)."""

    actions = ("compare_runs",)

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<int:object_id>/report/",
                self.admin_site.admin_view(self.report_view),
                name="evaluation_run_report",
            ),
            path(
                "compare/<int:base_pk>/<int:candidate_pk>/",
                self.admin_site.admin_view(self.compare_view),
                name="evaluation_run_compare",
            ),
            *super().get_urls(),
        ]

    def _run(self, request: HttpRequest, pk: int) -> Run:
        if not self.has_view_permission(request):
            raise PermissionDenied
        run = Run.objects.select_related("dataset", "started_by", "experiment").filter(pk=pk).first()
        if run is None:
            raise Http404(f"no run with id {pk}")
        return run

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "chartjs_version": CHARTJS_VERSION,
            **extra,
        }

    def report_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """The run's report: accuracy per task type with Wilson intervals,
        latency histogram, tokens and cost per model, stop reasons, review
        (first attempt vs final), the dataset's accuracy over time, and
        human-verified accuracy beside the automatic one on the labelled predictions."""
        run = self._run(request, object_id)
        metrics = run_stored_metrics(run=run)
        trend = [
            {**point, "url": report_url(point["pk"]), "current": point["pk"] == run.pk}
            for point in dataset_accuracy_trend(dataset_id=run.dataset_id)
        ]
        data = run_report_data(metrics, latencies_ms=run_latencies(run=run), trend=trend)
        previous = run_previous_on_dataset(run=run)
        context = self._context(
            request,
            f"Run report · {run.run_id}",
            run=run,
            metrics=metrics,
            # one decimal, as run_eval, the comparison and the leaderboard print it
            accuracy_pct=f"{metrics['accuracy'] * 100:.1f}%" if metrics.get("accuracy") is not None else "",
            report=data,
            run_url=reverse("admin:evaluation_run_change", args=[run.pk]),
            previous=previous,
            previous_compare_url=compare_url(previous.pk, run.pk) if previous else None,
            human=human_accuracy(run),
            subset=subset_words(run.config.get("split"), run.config.get("tags") or ()),
        )
        return TemplateResponse(request, "admin/evaluation/run/report.html", context)

    def compare_view(self, request: HttpRequest, base_pk: int, candidate_pk: int) -> HttpResponse:
        """The comparison of ``candidate_pk`` with ``base_pk``; a refused
        comparison (different datasets, one run twice) is a page saying why
        (HTTP 400)."""
        base, candidate = self._run(request, base_pk), self._run(request, candidate_pk)
        title = f"Compare {candidate.run_id} with {base.run_id}"
        try:
            comparison = run_compare(base=base, candidate=candidate)
        except AgentLabError as exc:
            context = self._context(request, title, base=base, candidate=candidate, error=str(exc))
            return TemplateResponse(request, "admin/evaluation/run/compare.html", context, status=400)
        slices = run_slices(base=base, candidate=candidate)
        context = self._context(
            request,
            title,
            base=base,
            candidate=candidate,
            comparison=comparison,
            charts=comparison_chart_data(comparison),
            delta_sections=delta_sections(comparison),
            accuracy_rows=accuracy_rows(comparison),
            slices=slices,
            slice_rows=slice_rows(slices),
            swap_url=compare_url(candidate.pk, base.pk),
            unfinished=unfinished_warning(comparison),
            few_examples=few_examples_warning(comparison),
            versions=versions_note(comparison),
            pair_lists=[
                ("Fixed: wrong → right", pair_rows(comparison["fixed"]), "fixed"),
                ("Broken: right → wrong", pair_rows(comparison["broken"]), "broken"),
                ("Errored in either run", pair_rows(comparison["errored"]), "errored"),
            ],
            base_url=reverse("admin:evaluation_run_change", args=[base.pk]),
            candidate_url=reverse("admin:evaluation_run_change", args=[candidate.pk]),
            trajectory=trajectory_page(comparison.get("trajectory")),
        )
        return TemplateResponse(request, "admin/evaluation/run/compare.html", context)

    @admin.action(description="Compare the two selected runs (the older one is the baseline)")
    def compare_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponse | None:
        runs = list(queryset.order_by("created_at", "pk")[:3])
        if len(runs) != 2:
            self.message_user(
                request, f"Select exactly two runs to compare ({len(queryset)} selected).", messages.WARNING
            )
            return None
        base, candidate = runs
        if base.dataset_id != candidate.dataset_id:
            self.message_user(
                request,
                f"Runs {base.run_id} and {candidate.run_id} are on different datasets "
                f"({base.dataset.name} and {candidate.dataset.name}): a comparison pairs the same examples.",
                messages.ERROR,
            )
            return None
        return HttpResponseRedirect(compare_url(base.pk, candidate.pk))

    @admin.display(description="report and comparison")
    def report_links(self, run: Run) -> SafeString:
        previous = run_previous_on_dataset(run=run)
        compare = (
            format_html(
                '<a href="{}">compare with the previous run on this dataset ({})</a>',
                compare_url(previous.pk, run.pk),
                previous.run_id,
            )
            if previous
            else format_html("{}", "no earlier run on this dataset to compare with")
        )
        return format_html('<a href="{}">report with charts</a> · {}', report_url(run.pk), compare)

"""The regression flag of a run in the run admin (issue 17): the list filter,
the list column and the detail's summary, linked to the baseline run and to
the comparison page (``evaluation.admin.report``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from common.admin import DASH, admin_link, badge
from evaluation.models import Run

#: What ``Run.regression`` says, as the filter's and the column's words.
FLAG_TEXT = {True: "significant regression", False: "no regression", None: "not compared"}


class RegressionFilter(admin.SimpleListFilter):
    """``?regression=yes|no|none``: runs flagged, compared and clean, not compared."""

    title = "regression vs baseline"
    parameter_name = "regression"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", FLAG_TEXT[True]), ("no", FLAG_TEXT[False]), ("none", FLAG_TEXT[None])]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "yes":
            return queryset.filter(regression=True)
        if value == "no":
            return queryset.filter(regression=False)
        if value == "none":
            return queryset.filter(regression__isnull=True)
        return queryset


def regression_badge(run: Run) -> SafeString | str:
    """The list column: a red dot for a regression, green for none, a dash when not compared."""
    if run.regression is None:
        return DASH
    return badge("regression", "#c0392b") if run.regression else badge("ok", "#27ae60")


def regression_summary(run: Run) -> SafeString:
    """The detail: the flag, the baseline (linked), the comparison page and what regressed."""
    if run.regression is None or run.baseline_id is None:
        if run.schedule_id is None:
            # a plain run: no schedule, so nothing about schedule baselines
            return format_html("{}", FLAG_TEXT[None])
        why = "scheduled runs are compared with their schedule's previous successful run"
        return format_html("{} ({})", FLAG_TEXT[None], why)
    baseline = run.baseline
    assert baseline is not None
    head = format_html(
        "{} against {} · {}",
        regression_badge(run),
        admin_link(Run, baseline.pk, baseline.run_id),
        format_html('<a href="{}">compare</a>', compare_url(baseline.pk, run.pk)),
    )
    if not run.regressions:
        return head
    lines = format_html_join("", "<li>{}</li>", ((line,) for line in run.regressions))
    return format_html("{}<ul>{}</ul>", head, lines)


def compare_url(base_pk: int, candidate_pk: int) -> str:
    return reverse("admin:evaluation_run_compare", args=[base_pk, candidate_pk])

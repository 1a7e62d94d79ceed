"""The online evaluators in the admin: add, edit, delete (each save writes
the beat entry that checks the evaluator's windows, ``monitoring.sync``),
clear a flag, and the trend page; and the online scores on the turn page
(docs/monitoring.md)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from common.admin import DASH
from evaluation.admin.report import CHARTJS_VERSION
from evaluation.admin.turns import RunTurnAdmin
from monitoring.models import OnlineEvaluator, OnlineScore
from monitoring.sync import evaluator_delete, evaluator_save
from monitoring.windows import DEFAULT_WINDOWS, trend_data
from turns.models import Turn

#: The most windows a trend page shows (``?windows=``).
MAX_WINDOWS = 366


@admin.action(description="Clear the flag of the selected evaluators")
def clear_flag(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[OnlineEvaluator]
) -> None:
    cleared = queryset.filter(flagged=True).update(flagged=False, flagged_at=None, flag_reason="")
    modeladmin.message_user(request, f"cleared the flag of {cleared} evaluator(s)", messages.SUCCESS)


@admin.register(OnlineEvaluator)
class OnlineEvaluatorAdmin(admin.ModelAdmin):
    list_display = ("name", "enabled", "sampling_rate", "scorers", "window", "scored", "flag", "trend_link")
    list_filter = ("enabled", "flagged", "window")
    search_fields = ("name",)
    actions = (clear_flag,)
    readonly_fields = ("flagged_at", "flag_reason", "last_check", "trend_link", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "enabled", "sampling_rate", "trend_link")}),
        ("Filters (blank: any)", {"fields": ("owner_group", "tool", "outcome")}),
        (
            "Scorers (reference-free; a turn passes when all pass)",
            {
                "fields": (
                    "score_answered",
                    ("max_steps", "max_latency_ms"),
                    "checks_plugin",
                    "judge",
                    "judge_rubric",
                    "judge_model",
                )
            },
        ),
        (
            "Trend and alert",
            {
                "fields": (
                    ("window", "min_count", "alpha"),
                    "flagged",
                    "flagged_at",
                    "flag_reason",
                    "last_check",
                )
            },
        ),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[OnlineEvaluator]:
        return super().get_queryset(request).annotate(score_count=Count("scores"))

    @admin.display(description="scored turns", ordering="score_count")
    def scored(self, evaluator: OnlineEvaluator) -> int:
        return int(getattr(evaluator, "score_count", 0))

    @admin.display(description="scorers")
    def scorers(self, evaluator: OnlineEvaluator) -> str:
        return ", ".join(evaluator.scorer_names()) or DASH

    @admin.display(description="flag", boolean=False)
    def flag(self, evaluator: OnlineEvaluator) -> SafeString | str:
        if not evaluator.flagged:
            return DASH
        return format_html('<strong style="color:#ba2121" title="{}">dropped</strong>', evaluator.flag_reason)

    @admin.display(description="trend")
    def trend_link(self, evaluator: OnlineEvaluator) -> SafeString | str:
        if evaluator.pk is None:
            return DASH
        return format_html(
            '<a href="{}">trend</a>', reverse("admin:monitoring_onlineevaluator_trend", args=[evaluator.pk])
        )

    def save_model(self, request: HttpRequest, obj: OnlineEvaluator, form: Any, change: bool) -> None:
        evaluator_save(evaluator=obj)

    def delete_model(self, request: HttpRequest, obj: OnlineEvaluator) -> None:
        evaluator_delete(evaluator=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[OnlineEvaluator]) -> None:
        for evaluator in queryset:
            evaluator_delete(evaluator=evaluator)

    def get_urls(self) -> list[URLPattern]:
        trend = path(
            "<path:object_id>/trend/",
            self.admin_site.admin_view(self.trend_view),
            name="monitoring_onlineevaluator_trend",
        )
        return [trend, *super().get_urls()]

    def trend_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The evaluator's trend: ``?windows=N`` windows up to now (default
        30 days or 48 hours; 1–366, anything else is a 400 page saying so)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        evaluator = OnlineEvaluator.objects.filter(pk=object_id).first() if str(object_id).isdigit() else None
        if evaluator is None:
            raise Http404(f"no online evaluator with id {object_id}")
        raw = request.GET.get("windows", "")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Trend · {evaluator.name}",
            "evaluator": evaluator,
            "chartjs_version": CHARTJS_VERSION,
        }
        if raw and (not raw.isdigit() or not 1 <= int(raw) <= MAX_WINDOWS):
            context["error"] = f"windows must be a whole number from 1 to {MAX_WINDOWS}, got {raw!r}"
            return TemplateResponse(
                request, "admin/monitoring/onlineevaluator/trend.html", context, status=400
            )
        count = int(raw) if raw else DEFAULT_WINDOWS[evaluator.window]
        data = trend_data(evaluator, now=timezone.now(), count=count)
        context.update(trend=data, rows=list(reversed(data["rows"])))
        return TemplateResponse(request, "admin/monitoring/onlineevaluator/trend.html", context)


class MonitoredTurnAdmin(RunTurnAdmin):
    """``RunTurnAdmin`` with the turn's online scores (one row per evaluator)."""

    readonly_fields = (*RunTurnAdmin.readonly_fields, "online_scores")
    fieldsets = (*RunTurnAdmin.fieldsets, ("Online scores", {"fields": ("online_scores",)}))

    @admin.display(description="online scores")
    def online_scores(self, turn: Turn) -> SafeString | str:
        """Each evaluator's score: value, pass, scorers' explanations, judge usage."""
        scores = list(
            OnlineScore.objects.filter(turn_id=turn.pk)
            .select_related("evaluator")
            .order_by("evaluator__name")
        )
        if not scores:
            return "not scored by any online evaluator"
        return format_html(
            '<table class="al-online-scores"><tr><th>evaluator</th><th>value</th><th>passed</th>'
            "<th>scorers</th><th>judge tokens</th></tr>{}</table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                (
                    (
                        s.evaluator.name,
                        DASH if s.value is None else f"{s.value:.2f}",
                        DASH if s.passed is None else ("yes" if s.passed else "no"),
                        "; ".join(f"{name}: {d.get('explanation', '')}" for name, d in s.details.items()),
                        _judge_tokens(s.usage),
                    )
                    for s in scores
                ),
            ),
        )


def _judge_tokens(usage: dict[str, Any]) -> str:
    if not usage:
        return DASH
    return f"{usage.get('input_tokens', '?')} in / {usage.get('output_tokens', '?')} out"


# ``evaluation.admin`` registered RunTurnAdmin (monitoring sits above evaluation).
admin.site.unregister(Turn)
admin.site.register(Turn, MonitoredTurnAdmin)

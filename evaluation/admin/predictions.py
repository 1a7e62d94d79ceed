"""The prediction list and a prediction's page, linked to its example and turn."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin import DASH, StaffReadOnlyAdmin, admin_link, fmt_cost, fmt_ms
from evaluation.admin.conversation_view import conversation_html
from evaluation.datasets.spec import gold_display
from evaluation.models import Example, HumanLabel, Prediction, Run, RunStatus
from evaluation.selectors import predictions_failing, run_check_names
from turns.admin import status_badge
from turns.admin.display import review_text, stop_reason_text, usage_html
from turns.attempts import last_review
from turns.models import Turn


class ErroredFilter(admin.SimpleListFilter):
    title = "error"
    parameter_name = "errored"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "With an error"), ("no", "Without an error")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Prediction]) -> QuerySet[Prediction]:
        if self.value() == "yes":
            return queryset.filter(error__gt="")
        if self.value() == "no":
            return queryset.filter(error="")
        return queryset


class _DistinctFilter(admin.SimpleListFilter):
    """Distinct values of one prediction column, one query (``task_type``, ``stop_reason``)."""

    field_name = ""

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        values = (
            Prediction.objects.order_by(self.field_name).values_list(self.field_name, flat=True).distinct()
        )
        return [(v, v or "(none)") for v in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Prediction]) -> QuerySet[Prediction]:
        value = self.value()
        return queryset if value is None else queryset.filter(**{self.field_name: value})


class TaskTypeFilter(_DistinctFilter):
    title = "task type"
    parameter_name = "task_type"
    field_name = "task_type"


class StopReasonFilter(_DistinctFilter):
    title = "stop reason"
    parameter_name = "stop_reason"
    field_name = "stop_reason"


class FailedCheckFilter(admin.SimpleListFilter):
    """Predictions whose turn failed a plugin's check: the names of the run
    being browsed (``run__id__exact``), else of the latest runs."""

    title = "failed check"
    parameter_name = "failed_check"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        runs = Run.objects.order_by("-created_at")
        run_pk = request.GET.get("run__id__exact")
        if run_pk and run_pk.isdigit():
            runs = runs.filter(pk=int(run_pk))
        names: set[str] = set()
        for run in runs[:20]:
            names.update(run_check_names(run=run))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Prediction]) -> QuerySet[Prediction]:
        value = self.value()
        return queryset if not value else predictions_failing(queryset, check=value)


class HumanLabelFilter(admin.SimpleListFilter):
    """Predictions with a current human label (annotation queues, issue 30) of the chosen value."""

    title = "human label"
    parameter_name = "human_label"
    field = "label"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        rows = HumanLabel.objects.filter(current=True)
        if self.field == "label":
            values = set(rows.values_list("label", flat=True).distinct())
        else:
            values = {tag for tags in rows.values_list("tags", flat=True) for tag in tags}
        return [(v, v) for v in sorted(values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Prediction]) -> QuerySet[Prediction]:
        value = self.value()
        if not value:
            return queryset
        rows = HumanLabel.objects.filter(current=True)
        if self.field == "label":
            return queryset.filter(pk__in=rows.filter(label=value).values("item__prediction_id"))
        # a JSON list's membership in Python: SQLite has no ``contains`` lookup on a JSONField
        tagged = [pk for pk, tags in rows.values_list("item__prediction_id", "tags") if value in (tags or [])]
        return queryset.filter(pk__in=tagged)


class FailureTagFilter(HumanLabelFilter):
    """Predictions a reviewer gave the chosen failure tag."""

    title = "failure tag"
    parameter_name = "failure_tag"
    field = "tags"


@admin.register(Prediction)
class PredictionAdmin(StaffReadOnlyAdmin):
    list_display = (
        "id",
        "run",
        "example_id_display",
        "question_short",
        "epoch",
        "task_type",
        "prediction_short",
        "gold_short",
        "correct",
        "score",
        "stop_reason_display",
        "turn_link",
        "error_short",
        "steps",
        "tokens",
        "latency",
    )
    list_display_links = ("id", "example_id_display")

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        """The columns; for a list filtered to one run (the run page's link
        is), without the run, which says nothing there, and without the epoch
        when that run has one epoch per example — so the list fits beside its
        filters at 1,400 px."""
        columns = list(super().get_list_display(request))
        run_id = request.GET.get("run__id__exact", "")
        if run_id.isascii() and run_id.isdigit() and len(run_id) < 19:
            columns.remove("run")
            if not Prediction.objects.filter(run_id=int(run_id), epoch__gt=1).exists():
                columns.remove("epoch")
        return columns

    list_select_related = ("run", "example")
    list_filter = (
        "run",
        TaskTypeFilter,
        "correct",
        StopReasonFilter,
        ErroredFilter,
        FailedCheckFilter,
        "review_verdict",
        "turn__status",
        HumanLabelFilter,
        FailureTagFilter,
    )
    search_fields = ("example__external_id", "prediction", "gold_answer")
    search_help_text = "Example id, prediction or gold answer."
    list_per_page = 100
    readonly_fields = (
        "run",
        "example_link",
        "task_type",
        "turn_link",
        "question",
        "conversation_display",
        "prediction",
        "gold_display",
        "answer_mismatch",
        "scorer",
        "score",
        "correct",
        "score_explanation",
        "judgement",
        "epoch",
        "evidence",
        "reasoning",
        "steps",
        "tokens",
        "usage_table",
        "cost_display",
        "stop_reason_display",
        "error",
        "review_display",
        "latency",
        "review_verdict",
        "review_retried",
        "first_correct",
        "created_at",
        "completed_at",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("run", "example_link", "epoch", "task_type"),
                    "turn_link",
                    ("created_at", "completed_at"),
                )
            },
        ),
        (
            "Answer",
            {
                "fields": (
                    "question",
                    "conversation_display",
                    "prediction",
                    "gold_display",
                    "answer_mismatch",
                    ("scorer", "score", "correct"),
                    "score_explanation",
                    "judgement",
                    "evidence",
                    "reasoning",
                )
            },
        ),
        (
            "How it ended",
            {
                "fields": (
                    ("stop_reason_display", "steps", "tokens", "cost_display", "latency"),
                    "error",
                    "usage_table",
                )
            },
        ),
        ("Review", {"fields": ("review_display", ("review_verdict", "review_retried", "first_correct"))}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Prediction]:
        # The turn's status as an annotation: joining the whole turn row would
        # drag its context documents into every list row.
        return (
            super()
            .get_queryset(request)
            .select_related("run", "example")
            .annotate(turn_status=Subquery(Turn.objects.filter(pk=OuterRef("turn_id")).values("status")[:1]))
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The page is titled by the example's id (what people search and
        talk about), with the run beside it."""
        found = (
            Prediction.objects.filter(pk=int(object_id))
            .values_list("example__external_id", "run__run_id")
            .first()
            if object_id.isdigit()
            else None
        )
        if found is not None:
            example_id, run_id = found
            extra_context = {
                **(extra_context or {}),
                "title": f"Example {example_id} · run {run_id}",
                "subtitle": None,
            }
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description="question")
    def question_short(self, prediction: Prediction) -> str:
        """The example's question, cut to 60 characters (the whole on the page)."""
        return Truncator(prediction.example.question).chars(60)

    @admin.display(description="prediction", ordering="prediction")
    def prediction_short(self, prediction: Prediction) -> str:
        if prediction.completed_at is None and prediction.run.status == RunStatus.STARTED:
            return "(pending)"  # not done yet in a run still going
        if prediction.error and not prediction.prediction:
            return "(error)"
        return Truncator(prediction.prediction).chars(50)

    @admin.display(description="gold answer")
    def gold_short(self, prediction: Prediction) -> str:
        return Truncator(gold_display(prediction.gold_answer)).chars(50)

    @admin.display(description="example", ordering="example__external_id")
    def example_id_display(self, prediction: Prediction) -> str:
        return prediction.example.external_id

    @admin.display(description="example")
    def example_link(self, prediction: Prediction) -> SafeString:
        return admin_link(Example, prediction.example_id, prediction.example.external_id)

    @admin.display(description="question")
    def question(self, prediction: Prediction) -> str:
        return prediction.example.question

    @admin.display(description="gold answer")
    def gold_display(self, prediction: Prediction) -> str:
        return gold_display(prediction.gold_answer)

    @admin.display(description="tokens")
    def tokens(self, prediction: Prediction) -> str:
        if prediction.input_tokens is None or prediction.output_tokens is None:
            return "unknown"
        return f"{prediction.input_tokens + prediction.output_tokens:,}"

    @admin.display(description="stop reason", ordering="stop_reason")
    def stop_reason_display(self, prediction: Prediction) -> str:
        return stop_reason_text(prediction.stop_reason)

    @admin.display(description="usage (agent and review calls, all attempts)")
    def usage_table(self, prediction: Prediction) -> SafeString:
        return usage_html(prediction.usage)

    @admin.display(description="review")
    def review_display(self, prediction: Prediction) -> str:
        if prediction.turn_id is None:
            return "not reviewed"
        turn = Turn.objects.only("meta", "attempts").get(pk=prediction.turn_id)
        return review_text(last_review(turn))

    @admin.display(description="conversation")
    def conversation_display(self, prediction: Prediction) -> SafeString | str:
        """A conversation example's turns and verdicts (``—`` for a one-question example)."""
        return conversation_html(prediction)

    @admin.display(description="cost")
    def cost_display(self, prediction: Prediction) -> str:
        return fmt_cost(prediction.cost)

    @admin.display(description="latency", ordering="latency_ms")
    def latency(self, prediction: Prediction) -> str:
        return fmt_ms(prediction.latency_ms)

    @admin.display(description="error")
    def error_short(self, prediction: Prediction) -> str:
        return Truncator(prediction.error).chars(60) if prediction.error else ""

    @admin.display(description="turn")
    def turn_link(self, prediction: Prediction) -> SafeString | str:
        if prediction.turn_id is None:
            return DASH
        return format_html(
            "{} {}",
            admin_link(Turn, prediction.turn_id, f"#{prediction.turn_id}"),
            status_badge(prediction.turn_status),  # type: ignore[attr-defined]  # annotated by get_queryset
        )

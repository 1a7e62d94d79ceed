"""The admin for datasets, examples, runs and predictions (issue 6).

Read-only like the turn admin (``turns.admin.StaffReadOnlyAdmin``): rows are
written by ``evaluation.services`` and ``manage.py run_eval``. The path from a
run to what went wrong is made of links: the run page counts its predictions
by error and stop reason and its turns by status, each count a link to the
pre-filtered list; a prediction links to the turn that produced it, whose page
shows the event log.

Counts on list pages are scalar subqueries (one per column, never a join that
multiplies rows), so a list page costs the same number of queries whatever
its length.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import Count, FloatField, IntegerField, Model, OuterRef, QuerySet, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from turns.admin import (
    DASH,
    StaffReadOnlyAdmin,
    admin_link,
    fmt_cost,
    fmt_ms,
    html_table,
    json_block,
    status_badge,
)
from turns.models import Turn

from .models import Dataset, Example, Prediction, Run


def _count(model: type[Model], fk: str, **filters: Any) -> Coalesce:
    """``COUNT(*)`` of ``model`` rows pointing at the outer row, as a scalar subquery."""
    rows = (
        model._default_manager.filter(**{fk: OuterRef("pk")}, **filters)
        .order_by()
        .values(fk)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), 0)


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:.1f}%"


def _query(**params: Any) -> str:
    return urlencode(params)


# --- datasets and examples ------------------------------------------------------


@admin.register(Dataset)
class DatasetAdmin(StaffReadOnlyAdmin):
    list_display = ("name", "source", "example_count", "task_type_count", "run_count", "created_at")
    search_fields = ("name", "source")
    fields = ("name", "source", "created_at", "example_count", "run_count", "task_types_table", "links")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Dataset]:
        task_types = (
            Example.objects.filter(dataset_id=OuterRef("pk"))
            .order_by()
            .values("dataset_id")
            .annotate(n=Count("task_type", distinct=True))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(
                example_count=_count(Example, "dataset_id"),
                run_count=_count(Run, "dataset_id"),
                task_type_count=Coalesce(Subquery(task_types, output_field=IntegerField()), 0),
            )
        )

    @admin.display(description="examples", ordering="example_count")
    def example_count(self, dataset: Dataset) -> int:
        return dataset.example_count  # type: ignore[attr-defined]

    @admin.display(description="task types", ordering="task_type_count")
    def task_type_count(self, dataset: Dataset) -> int:
        return dataset.task_type_count  # type: ignore[attr-defined]

    @admin.display(description="runs", ordering="run_count")
    def run_count(self, dataset: Dataset) -> int:
        return dataset.run_count  # type: ignore[attr-defined]

    @admin.display(description="examples per task type")
    def task_types_table(self, dataset: Dataset) -> SafeString:
        rows = [
            (
                admin_link(
                    Example,
                    None,
                    row["task_type"],
                    query=_query(dataset__id__exact=dataset.pk, task_type__exact=row["task_type"]),
                ),
                row["n"],
            )
            for row in dataset.examples.order_by("task_type").values("task_type").annotate(n=Count("pk"))
        ]
        return html_table(("task type", "examples"), rows, empty="no examples")

    @admin.display(description="browse")
    def links(self, dataset: Dataset) -> SafeString:
        return format_html(
            "{} · {}",
            admin_link(Example, None, "its examples", query=_query(dataset__id__exact=dataset.pk)),
            admin_link(Run, None, "its runs", query=_query(dataset__id__exact=dataset.pk)),
        )


@admin.register(Example)
class ExampleAdmin(StaffReadOnlyAdmin):
    list_display = ("external_id", "dataset", "task_type", "scorer_display", "question_short", "answer_short")
    list_select_related = ("dataset",)
    list_filter = ("dataset", "task_type", "scorer")
    # Facet counts on the filters are the per-task-type counts of the current selection.
    show_facets = admin.ShowFacets.ALWAYS
    search_fields = ("external_id", "question", "answer")
    search_help_text = "Example id, question or gold answer."
    list_per_page = 100
    fields = (
        "dataset",
        "external_id",
        "position",
        "task_type",
        "scorer_display",
        "question",
        "answer",
        "choices_json",
        "context_json",
        "metadata_json",
        "predictions_link",
    )
    readonly_fields = fields

    @admin.display(description="scorer", ordering="scorer")
    def scorer_display(self, example: Example) -> str:
        return example.scorer or f"(by task type: {example.task_type})"

    @admin.display(description="question")
    def question_short(self, example: Example) -> str:
        return Truncator(example.question).chars(80)

    @admin.display(description="gold answer")
    def answer_short(self, example: Example) -> str:
        return Truncator(example.answer).chars(40)

    @admin.display(description="choices")
    def choices_json(self, example: Example) -> SafeString:
        return json_block(example.choices)

    @admin.display(description="context")
    def context_json(self, example: Example) -> SafeString:
        return json_block(example.context)

    @admin.display(description="metadata")
    def metadata_json(self, example: Example) -> SafeString:
        return json_block(example.metadata)

    @admin.display(description="predictions")
    def predictions_link(self, example: Example) -> SafeString:
        return admin_link(
            Prediction,
            None,
            "predictions of this example in every run",
            query=_query(example__id__exact=example.pk),
        )


# --- runs ----------------------------------------------------------------------


@admin.register(Run)
class RunAdmin(StaffReadOnlyAdmin):
    list_display = (
        "run_id",
        "dataset",
        "status",
        "model_name",
        "accuracy",
        "total",
        "errors",
        "started",
        "duration",
        "started_by",
    )
    list_select_related = ("dataset", "started_by")
    list_filter = ("status", "dataset")
    date_hierarchy = "created_at"
    search_fields = ("run_id", "dataset__name")
    list_per_page = 50
    readonly_fields = (
        "run_id",
        "dataset",
        "status",
        "model_name",
        "started_by",
        "system_user",
        "created_at",
        "finished_at",
        "duration",
        "browse",
        "turns_by_status",
        "config_table",
        "config_json",
        "metrics_summary",
        "per_task_type",
        "stop_reasons",
        "latency",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("run_id", "status"),
                    ("dataset", "model_name"),
                    ("started_by", "system_user"),
                    ("created_at", "finished_at", "duration"),
                    "browse",
                    "turns_by_status",
                )
            },
        ),
        ("Metrics", {"fields": ("metrics_summary", "per_task_type", "stop_reasons", "latency")}),
        ("Config snapshot", {"fields": ("config_table", "config_json")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return (
            super()
            .get_queryset(request)
            .select_related("dataset", "started_by", "system_user")
            .annotate(
                prediction_count=_count(Prediction, "run_id"),
                error_count=_count(Prediction, "run_id", error__gt=""),
                model_name=KT("config__model"),
                accuracy_value=Cast(KT("metrics__accuracy"), FloatField()),
            )
        )

    # -- list columns --

    @admin.display(description="model", ordering="model_name")
    def model_name(self, run: Run) -> str:
        return str((run.config or {}).get("model") or DASH)

    @admin.display(description="accuracy", ordering="accuracy_value")
    def accuracy(self, run: Run) -> str:
        metrics = run.metrics or {}
        if "accuracy" not in metrics:
            return DASH
        return f"{_pct(metrics['accuracy'])} ({metrics.get('correct', 0)}/{metrics.get('scored', 0)})"

    @admin.display(description="total", ordering="prediction_count")
    def total(self, run: Run) -> int:
        return run.prediction_count  # type: ignore[attr-defined]

    @admin.display(description="errors", ordering="error_count")
    def errors(self, run: Run) -> SafeString | int:
        count = run.error_count  # type: ignore[attr-defined]
        if not count:
            return 0
        return admin_link(Prediction, None, count, query=_query(run__id__exact=run.pk, errored="yes"))

    @admin.display(description="started", ordering="created_at")
    def started(self, run: Run) -> Any:
        return run.created_at

    @admin.display(description="duration")
    def duration(self, run: Run) -> str:
        if run.finished_at is None:
            return "running" if run.status == "started" else DASH
        return fmt_ms((run.finished_at - run.created_at).total_seconds() * 1000)

    # -- detail page --

    def _metrics(self, run: Run) -> tuple[dict[str, Any], bool]:
        """The stored metrics, or — for a run that has not finished — computed now."""
        if run.metrics:
            return run.metrics, False
        from .services import run_metrics

        return run_metrics(run=run), True

    @admin.display(description="browse")
    def browse(self, run: Run) -> SafeString:
        total, errors = run.prediction_count, run.error_count  # type: ignore[attr-defined]
        return format_html(
            "{} · {} · {} · {}",
            admin_link(Prediction, None, f"all {total} predictions", query=_query(run__id__exact=run.pk)),
            admin_link(
                Prediction,
                None,
                f"{errors} with an error",
                query=_query(run__id__exact=run.pk, errored="yes"),
            ),
            admin_link(Prediction, None, "wrong ones", query=_query(run__id__exact=run.pk, correct__exact=0)),
            admin_link(Turn, None, "its turns", query=_query(run=run.pk)),
        )

    @admin.display(description="turns by status")
    def turns_by_status(self, run: Run) -> SafeString:
        counts = (
            Turn.objects.filter(pk__in=Prediction.objects.filter(run_id=run.pk).values("turn_id"))
            .order_by("status")
            .values("status")
            .annotate(n=Count("pk"))
        )
        rows = [
            (
                status_badge(row["status"]),
                admin_link(Turn, None, row["n"], query=_query(run=run.pk, status__exact=row["status"])),
            )
            for row in counts
        ]
        return html_table(("status", "turns"), rows, empty="no turns")

    @admin.display(description="summary")
    def metrics_summary(self, run: Run) -> SafeString:
        metrics, live = self._metrics(run)
        tokens = metrics.get("tokens") or {}
        rows = [
            (
                "accuracy",
                f"{_pct(metrics.get('accuracy'))} ({metrics.get('correct', 0)}/"
                f"{metrics.get('scored', 0)} scored)",
            ),
            ("total", metrics.get("total", 0)),
            ("scored", metrics.get("scored", 0)),
            ("unscored", metrics.get("unscored", 0)),
            ("correct", metrics.get("correct", 0)),
            ("errors", metrics.get("errors", 0)),
            ("mean steps", DASH if metrics.get("steps_mean") is None else f"{metrics['steps_mean']:.2f}"),
            ("input tokens", f"{tokens.get('input', 0):,}"),
            ("output tokens", f"{tokens.get('output', 0):,}"),
            ("rows with unknown tokens", tokens.get("unknown_rows", 0)),
            ("cost", fmt_cost(metrics.get("cost"))),
        ]
        table = html_table(("metric", "value"), rows)
        if live:
            return format_html(
                "<p>{}</p>{}", "Computed now from the predictions: the run has not finished.", table
            )
        return table

    @admin.display(description="per task type")
    def per_task_type(self, run: Run) -> SafeString:
        metrics, _ = self._metrics(run)
        rows = [
            (
                admin_link(
                    Prediction, None, task_type, query=_query(run__id__exact=run.pk, task_type=task_type)
                ),
                b.get("total", 0),
                b.get("scored", 0),
                b.get("correct", 0),
                _pct(b.get("accuracy")),
            )
            for task_type, b in (metrics.get("per_task_type") or {}).items()
        ]
        return html_table(("task type", "total", "scored", "correct", "accuracy"), rows)

    @admin.display(description="stop reasons")
    def stop_reasons(self, run: Run) -> SafeString:
        metrics, _ = self._metrics(run)
        rows = [
            (
                reason or "(none)",
                admin_link(Prediction, None, count, query=_query(run__id__exact=run.pk, stop_reason=reason)),
            )
            for reason, count in (metrics.get("stop_reasons") or {}).items()
        ]
        return html_table(("stop reason", "predictions"), rows)

    @admin.display(description="latency")
    def latency(self, run: Run) -> SafeString:
        metrics, _ = self._metrics(run)
        latency = metrics.get("latency_ms") or {}
        return html_table(
            ("p50", "p95", "mean"),
            [(fmt_ms(latency.get("p50")), fmt_ms(latency.get("p95")), fmt_ms(latency.get("mean")))],
        )

    @admin.display(description="config")
    def config_table(self, run: Run) -> SafeString:
        config = {k: v for k, v in (run.config or {}).items() if k != "resumes"}
        rows = [
            (k, v if isinstance(v, str | int | float) else json_block(v)) for k, v in sorted(config.items())
        ]
        resumes = (run.config or {}).get("resumes") or []
        if resumes:
            rows.append(("resumed", format_html_join(", ", "{}", ((r.get("at", "?"),) for r in resumes))))
        return html_table(("setting", "value"), rows)

    @admin.display(description="raw config JSON")
    def config_json(self, run: Run) -> SafeString:
        return json_block(run.config)


# --- predictions ---------------------------------------------------------------


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


@admin.register(Prediction)
class PredictionAdmin(StaffReadOnlyAdmin):
    list_display = (
        "id",
        "run",
        "example_id_display",
        "task_type",
        "correct",
        "score",
        "stop_reason",
        "steps",
        "tokens",
        "latency",
        "error_short",
        "turn_link",
    )
    list_display_links = ("id", "example_id_display")
    list_select_related = ("run", "example")
    list_filter = (
        "run",
        TaskTypeFilter,
        "correct",
        StopReasonFilter,
        ErroredFilter,
        "review_verdict",
        "turn__status",
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
        "prediction",
        "gold_answer",
        "scorer",
        "score",
        "correct",
        "evidence",
        "reasoning",
        "steps",
        "tokens",
        "cost_display",
        "stop_reason",
        "error",
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
            {"fields": (("run", "example_link", "task_type"), "turn_link", ("created_at", "completed_at"))},
        ),
        (
            "Answer",
            {
                "fields": (
                    "question",
                    "prediction",
                    "gold_answer",
                    ("scorer", "score", "correct"),
                    "evidence",
                    "reasoning",
                )
            },
        ),
        (
            "How it ended",
            {"fields": (("stop_reason", "steps", "tokens", "cost_display", "latency"), "error")},
        ),
        ("Review", {"fields": (("review_verdict", "review_retried", "first_correct"),)}),
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

    @admin.display(description="example", ordering="example__external_id")
    def example_id_display(self, prediction: Prediction) -> str:
        return prediction.example.external_id

    @admin.display(description="example")
    def example_link(self, prediction: Prediction) -> SafeString:
        return admin_link(Example, prediction.example_id, prediction.example.external_id)

    @admin.display(description="question")
    def question(self, prediction: Prediction) -> str:
        return prediction.example.question

    @admin.display(description="tokens")
    def tokens(self, prediction: Prediction) -> str:
        if prediction.input_tokens is None or prediction.output_tokens is None:
            return "unknown"
        return f"{prediction.input_tokens + prediction.output_tokens:,}"

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
            status_badge(prediction.turn_status),
        )  # type: ignore[attr-defined]

"""The dataset and example lists and pages."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin import StaffReadOnlyAdmin, admin_link, html_table, json_block, subquery_count, url_query
from evaluation.datasets.spec import gold_display
from evaluation.models import Dataset, Example, Prediction, Run


@admin.register(Dataset)
class DatasetAdmin(StaffReadOnlyAdmin):
    list_display = ("name", "source", "example_count", "task_type_count", "run_count", "created_at")
    search_fields = ("name", "source")
    fields = (
        "name",
        "source",
        "scorer",
        "rubric",
        "created_at",
        "example_count",
        "run_count",
        "task_types_table",
        "links",
    )
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
                example_count=subquery_count(Example, "dataset_id"),
                run_count=subquery_count(Run, "dataset_id"),
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
                    query=url_query(dataset__id__exact=dataset.pk, task_type__exact=row["task_type"]),
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
            admin_link(Example, None, "its examples", query=url_query(dataset__id__exact=dataset.pk)),
            admin_link(Run, None, "its runs", query=url_query(dataset__id__exact=dataset.pk)),
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
        if example.scorer:
            return example.scorer
        if example.dataset.scorer:
            return f"{example.dataset.scorer} (the dataset's)"
        return f"(by task type: {example.task_type})"

    @admin.display(description="question")
    def question_short(self, example: Example) -> str:
        return Truncator(example.question).chars(80)

    @admin.display(description="gold answer")
    def answer_short(self, example: Example) -> str:
        return Truncator(gold_display(example.answer)).chars(40)

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
            query=url_query(example__id__exact=example.pk),
        )

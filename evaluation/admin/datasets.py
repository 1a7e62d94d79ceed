"""The dataset and example lists and pages; curation (edits and removals
that make new versions) is ``evaluation.admin.curation``."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin import (
    DASH,
    StaffReadOnlyAdmin,
    admin_link,
    html_table,
    json_block,
    subquery_count,
    url_query,
)
from evaluation.admin.curation import ExampleCuration, ExampleVersionFilter, versions_table, versions_text
from evaluation.admin.example_filters import ExampleSplitFilter, ExampleTagFilter
from evaluation.datasets.from_turns import source_turn_of
from evaluation.datasets.spec import example_split, example_tags, gold_display
from evaluation.datasets.versions import examples_at
from evaluation.models import Dataset, Example, Prediction, Run
from turns.models import Turn


@admin.register(Dataset)
class DatasetAdmin(StaffReadOnlyAdmin):
    list_display = (
        "name",
        "version",
        "example_count",
        "task_type_count",
        "run_count",
        "source",
        "created_at",
    )
    search_fields = ("name", "source")
    fields = (
        "name",
        "version",
        "source",
        "scorer",
        "rubric",
        "created_at",
        "example_count",
        "run_count",
        "task_types_table",
        "versions_list",
        "links",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Dataset]:
        task_types = (
            Example.objects.filter(dataset_id=OuterRef("pk"), valid_to__isnull=True)
            .order_by()
            .values("dataset_id")
            .annotate(n=Count("task_type", distinct=True))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(
                example_count=subquery_count(Example, "dataset_id", valid_to__isnull=True),
                run_count=subquery_count(Run, "dataset_id"),
                task_type_count=Coalesce(Subquery(task_types, output_field=IntegerField()), 0),
            )
        )

    @admin.display(description="versions")
    def versions_list(self, dataset: Dataset) -> SafeString:
        return versions_table(dataset)

    @admin.display(description="examples (latest version)", ordering="example_count")
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
            for row in examples_at(dataset).order_by("task_type").values("task_type").annotate(n=Count("pk"))
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
class ExampleAdmin(ExampleCuration, StaffReadOnlyAdmin):
    list_display = (
        "external_id",
        "dataset",
        "versions",
        "task_type",
        "subset",
        "scorer_display",
        "question_short",
        "answer_short",
    )
    list_select_related = ("dataset",)
    list_filter = (
        ExampleVersionFilter,
        "dataset",
        "task_type",
        ExampleSplitFilter,
        ExampleTagFilter,
        "scorer",
    )
    actions = ("remove_examples",)
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
        "source_turn_link",
        "predictions_link",
        "history_table",
    )
    readonly_fields = fields

    @admin.display(description="versions", ordering="valid_from")
    def versions(self, example: Example) -> str:
        """The versions this content is in: ``2``, ``2–4`` or ``2–latest``."""
        return versions_text(example)

    @admin.display(description="split · tags")
    def subset(self, example: Example) -> str:
        """The example's split and tags (``run_eval --split``, ``--tag``), a dash when none."""
        split, tags = example_split(example.metadata), sorted(example_tags(example.metadata))
        words = [w for w in (split or "", ", ".join(tags)) if w]
        return " · ".join(words) if words else DASH

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

    @admin.display(description="source turn")
    def source_turn_link(self, example: Example) -> SafeString | str:
        """The chat turn the example was made from (``metadata.source_turn``,
        ``evaluation.datasets.from_turns``), else a dash."""
        source = source_turn_of(example.metadata)
        return DASH if source is None else admin_link(Turn, source, f"turn #{source}")

    @admin.display(description="predictions")
    def predictions_link(self, example: Example) -> SafeString:
        return admin_link(
            Prediction,
            None,
            "predictions of this example in every run",
            query=url_query(example__id__exact=example.pk),
        )

"""The example list's subset filters (docs/evaluating.md#splits-and-tags): by
an example's ``split`` and by one of its ``tags`` (both kept in its metadata)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from evaluation.datasets.spec import example_split, example_tags
from evaluation.models import Example


def _metadata(queryset: QuerySet[Example]) -> list[tuple[int, dict[str, Any]]]:
    return [(pk, m or {}) for pk, m in queryset.values_list("pk", "metadata")]


class ExampleSplitFilter(admin.SimpleListFilter):
    """By split: the splits of the examples listed, and "(none)"."""

    title = "split"
    parameter_name = "split"
    NONE = "-"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        splits = {example_split(m) for _, m in _metadata(model_admin.get_queryset(request))}
        return [(s, s) for s in sorted(s for s in splits if s)] + [(self.NONE, "(none)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Example]) -> QuerySet[Example]:
        value = self.value()
        if value is None:
            return queryset
        # a JSON key read in Python: the same on PostgreSQL and SQLite
        wanted = None if value == self.NONE else value
        return queryset.filter(pk__in=[pk for pk, m in _metadata(queryset) if example_split(m) == wanted])


class ExampleTagFilter(admin.SimpleListFilter):
    """By tag: the examples carrying one tag."""

    title = "tag"
    parameter_name = "tag"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        tags = {t for _, m in _metadata(model_admin.get_queryset(request)) for t in example_tags(m)}
        return [(t, t) for t in sorted(tags)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Example]) -> QuerySet[Example]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(pk__in=[pk for pk, m in _metadata(queryset) if value in example_tags(m)])

"""Curating a dataset in the admin: an edit or a removal makes a new version
(``evaluation.datasets.versions``), never an in-place update.

The example pages stay read-only — a saved admin form would write the row
back over what the runs measured. Instead an example's page links to
"Edit — makes a new version", a form whose submit calls ``dataset_change``
with the edited content, and the example list has an action that removes
the selected examples as one new version per dataset. The list shows the
latest version's examples unless asked for every version's rows or one
version (``?version=N``, which the dataset page's version table links to).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin import admin_link, html_table, url_query
from common.errors import AgentLabError
from evaluation.datasets.spec import ExampleSpec, gold_display
from evaluation.datasets.versions import dataset_change, example_history, in_version, version_diff
from evaluation.models import Dataset, DatasetVersion, Example
from evaluation.scoring.dispatch import SCORERS, scorer_for
from evaluation.scoring.trajectory_spec import TrajectoryFormatError, check_trajectory_fields


class ExampleVersionFilter(admin.SimpleListFilter):
    """The example list's version: the latest (default), every version's
    rows (``all``), or version ``N`` of the dataset the list is filtered to
    (``?dataset__id__exact=…&version=N``; without a dataset, or a version the
    dataset does not have, the list is empty rather than misleading)."""

    title = "dataset version"
    parameter_name = "version"

    def _dataset(self, request: HttpRequest) -> Dataset | None:
        raw = request.GET.get("dataset__id__exact", "")
        return Dataset.objects.filter(pk=int(raw)).first() if raw.isascii() and raw.isdigit() else None

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        dataset = self._dataset(request)
        numbers = range(dataset.version, 0, -1) if dataset is not None else ()
        return [("all", "every version's rows"), *((str(n), f"version {n}") for n in numbers)]

    def choices(self, changelist: Any) -> Any:
        value = self.value()
        yield {
            "selected": value is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "latest version",
        }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": value == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Example]) -> QuerySet[Example]:
        value = self.value()
        if value is None:
            return queryset.filter(in_version(None))
        if value == "all":
            return queryset
        dataset = self._dataset(request)
        if (
            not (value.isascii() and value.isdigit())
            or dataset is None
            or not 1 <= int(value) <= dataset.version
        ):
            return queryset.none()
        return queryset.filter(in_version(int(value)))


class ExampleEditForm(forms.Form):
    """An example's content, as the edit page shows and takes it."""

    question = forms.CharField(widget=forms.Textarea(attrs={"rows": 5, "cols": 90}))
    answer = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 90}),
        help_text="the gold answer; empty leaves the example unscored",
    )
    aliases = forms.BooleanField(
        required=False, help_text="the answer is a list of aliases, one per line, any of which is correct"
    )
    task_type = forms.CharField(max_length=64)
    scorer = forms.ChoiceField(required=False, help_text="blank: the dataset's, else the task type's")
    choices = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 90}),
        help_text="multiple choice: one option per line (blank: none)",
    )
    context = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 90}), help_text="a JSON object"
    )
    metadata = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 90}), help_text="a JSON object"
    )
    note = forms.CharField(required=False, max_length=300, help_text="why: recorded with the new version")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        scorer = self.fields["scorer"]
        assert isinstance(scorer, forms.ChoiceField)
        scorer.choices = [("", "(default)")] + [(name, name) for name in sorted(SCORERS)]

    @classmethod
    def initial_of(cls, example: Example) -> dict[str, Any]:
        answer = example.answer
        return {
            "question": example.question,
            "answer": "\n".join(answer) if isinstance(answer, list) else answer,
            "aliases": isinstance(answer, list),
            "task_type": example.task_type,
            "scorer": example.scorer,
            "choices": "\n".join(example.choices or []),
            "context": json.dumps(example.context or {}, ensure_ascii=False, indent=1),
            "metadata": json.dumps(example.metadata or {}, ensure_ascii=False, indent=1),
        }

    def _json_object(self, name: str) -> dict[str, Any]:
        raw = (self.cleaned_data.get(name) or "").strip() or "{}"
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
            ) from None
        if not isinstance(value, dict):
            raise forms.ValidationError("must be a JSON object ({…})")
        return value

    def clean_context(self) -> dict[str, Any]:
        return self._json_object("context")

    def clean_metadata(self) -> dict[str, Any]:
        """The metadata object; its expected trajectory's fields checked as an import checks them."""
        value = self._json_object("metadata")
        try:
            check_trajectory_fields(value)
        except TrajectoryFormatError as exc:
            raise forms.ValidationError(str(exc)) from None
        return value

    def spec(self, external_id: str, plugins: list[str]) -> ExampleSpec:
        """The edited example; call after ``is_valid()``. ``ValueError``
        names a scorer that does not fit the task type."""
        data = self.cleaned_data
        answer: str | list[str] = data["answer"]
        if data["aliases"]:
            answer = [line.strip() for line in data["answer"].splitlines() if line.strip()]
        choices = [line.strip() for line in data["choices"].splitlines() if line.strip()] or None
        scorer_for(example_scorer=data["scorer"] or None, task_type=data["task_type"])
        return ExampleSpec(
            external_id=external_id,
            question=data["question"],
            answer=answer,
            task_type=data["task_type"].strip(),
            scorer=data["scorer"] or None,
            choices=choices,
            context=data["context"] or None,
            metadata=data["metadata"],
            plugins=tuple(plugins),
        )


class ExampleCuration:
    """The example admin's curation: the edit page, the removal action and
    the history table (mixed into ``ExampleAdmin``)."""

    admin_site: admin.AdminSite
    model: type[Example]

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<int:object_id>/new-version/",
                self.admin_site.admin_view(self.new_version_view),
                name="evaluation_example_new_version",
            )
        ]
        return own + super().get_urls()  # type: ignore[misc]

    def new_version_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """Edit an example's content; saving makes the dataset's next version."""
        if not self.has_operate_permission(request):  # type: ignore[attr-defined]
            return HttpResponse("editing examples needs staff rights", status=403)
        example = get_object_or_404(Example.objects.select_related("dataset"), pk=object_id)
        if example.valid_to is not None:
            current = Example.objects.filter(
                dataset_id=example.dataset_id, external_id=example.external_id, valid_to__isnull=True
            ).first()
            messages.warning(
                request,
                f"this content of example {example.external_id} was replaced or removed in version "
                f"{example.valid_to}; "
                + ("edit its current content instead" if current else "it is no longer in the dataset"),
            )
            return HttpResponseRedirect(_change_url(current or example))
        form = ExampleEditForm(request.POST or None, initial=ExampleEditForm.initial_of(example))
        if request.method == "POST" and form.is_valid():
            try:
                spec = form.spec(example.external_id, list(example.plugins or []))
                note = form.cleaned_data["note"].strip()
                source = f"admin: edit of {example.external_id}" + (f" — {note}" if note else "")
                change = dataset_change(example.dataset, upserts=[spec], source=source, user=_user(request))
            except (AgentLabError, ValueError) as exc:
                form.add_error(None, str(exc))
            else:
                if change.number is None:
                    messages.info(request, f"example {example.external_id}: nothing changed, no new version")
                    return HttpResponseRedirect(_change_url(example))
                messages.success(request, change.summary())
                new = Example.objects.get(
                    dataset_id=example.dataset_id, external_id=example.external_id, valid_to__isnull=True
                )
                return HttpResponseRedirect(_change_url(new))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Edit example {example.external_id} — makes version {example.dataset.version + 1}",
            "example": example,
            "form": form,
        }
        return TemplateResponse(request, "admin/evaluation/example/new_version.html", context)

    @admin.action(description="Remove the selected examples (makes a new version)", permissions=["operate"])
    def remove_examples(self, request: HttpRequest, queryset: QuerySet[Example]) -> None:
        """Remove the selected current examples: one new version per dataset."""
        by_dataset: dict[int, list[str]] = defaultdict(list)
        for dataset_id, external_id in queryset.filter(valid_to__isnull=True).values_list(
            "dataset_id", "external_id"
        ):
            by_dataset[dataset_id].append(external_id)
        if not by_dataset:
            messages.warning(
                request, "none of the selected rows is in its dataset's latest version; nothing removed"
            )
            return
        for dataset in Dataset.objects.filter(pk__in=by_dataset).order_by("name"):
            ids = by_dataset[dataset.pk]
            try:
                change = dataset_change(
                    dataset, remove=ids, source=f"admin: removal of {len(ids)}", user=_user(request)
                )
            except AgentLabError as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, change.summary())

    @admin.display(description="history")
    def history_table(self, example: Example) -> SafeString:
        """Every content this example has had, oldest first, with the versions
        it was valid in, then the edit link (current content only)."""
        rows = [
            (
                admin_link(Example, row.pk, versions_text(row))
                if row.pk != example.pk
                else format_html("<strong>{}</strong>", versions_text(row)),
                Truncator(row.question).chars(80),
                Truncator(gold_display(row.answer)).chars(60),
                row.task_type,
            )
            for row in example_history(example)
        ]
        table = html_table(("versions", "question", "gold answer", "task type"), rows)
        if example.valid_to is not None:
            return table
        edit = reverse("admin:evaluation_example_new_version", args=[example.pk])
        return format_html('{}<p><a href="{}" class="button">Edit — makes a new version</a></p>', table, edit)


def versions_text(example: Example) -> str:
    """The versions a content is in: ``2``, ``2–4`` or ``2–latest``."""
    if example.valid_to is None:
        return f"{example.valid_from}–latest"
    last = example.valid_to - 1
    return str(last) if last == example.valid_from else f"{example.valid_from}–{last}"


def _user(request: HttpRequest) -> User | None:
    return request.user if isinstance(request.user, User) else None


def _change_url(example: Example) -> str:
    return reverse("admin:evaluation_example_change", args=[example.pk])


def versions_table(dataset: Dataset, *, limit: int = 30) -> SafeString:
    """The dataset page's versions, newest first: when, by whom, from what,
    the counts and the first ids added, changed and removed (two queries a
    version)."""
    rows = []
    for version in DatasetVersion.objects.filter(dataset=dataset).select_related("created_by")[:limit]:
        diff = version_diff(dataset, version.number)
        rows.append(
            (
                admin_link(
                    Example,
                    None,
                    f"version {version.number}",
                    query=url_query(dataset__id__exact=dataset.pk, version=version.number),
                ),
                version.created_at.strftime("%Y-%m-%d %H:%M"),
                version.created_by.username if version.created_by else "—",
                Truncator(version.source).chars(60),
                f"{version.added} added, {version.changed} changed, {version.removed} removed; "
                f"{version.total} in all",
                _ids("changed", diff.changed) + _ids("removed", diff.removed) + _ids("added", diff.added),
            )
        )
    return html_table(("version", "made", "by", "from", "change", "examples"), rows, empty="no versions")


def _ids(label: str, ids: list[str], *, shown: int = 6) -> str:
    if not ids:
        return ""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return f"{label}: {', '.join(ids[:shown])}{more}. "

"""The turn admin, plus the run each evaluation turn belongs to.

``turns`` knows nothing of evaluation (it sits below it). This module replaces
the registration of ``turns.admin.TurnAdmin`` with ``RunTurnAdmin``, a
subclass that adds a "run" column and field (a link to the run), a
"prediction" field (a link back to the prediction the turn produced) and a "run"
filter — the links of a run's page to its turns (``?run=<pk>``) use that
filter. The turn's run and prediction come as scalar subqueries on the
prediction's ``turn_id`` index, so the list still costs the same number of
queries whatever its length.

A "replay" field links a replay turn to its original and its replay, and an
original to its replays (``manage.py replay_turns``; an ``EXISTS`` subquery,
and one query on the page of a turn that has replays or is one).

It also adds the "Add to dataset…" action (``evaluation.admin.add_to_dataset``)
and, below the question, the datasets whose current version holds it: links
to those examples, read in one query (``from_turns.turn_examples``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.contrib import admin
from django.db.models import Exists, OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from common.admin import DASH, admin_link
from evaluation.admin.add_to_dataset import add_to_dataset
from evaluation.datasets.from_turns import turn_examples
from evaluation.models import Example, Prediction, Replay, ReplayItem, Run
from turns.admin import StopReasonFilter, TurnAdmin
from turns.models import Turn

#: Runs offered by the turn list's "run" filter (newest first).
RUN_FILTER_LIMIT = 30

_T = TypeVar("_T")


def _after(items: Sequence[_T], anchor: _T, new: _T) -> tuple[_T, ...]:
    """``items`` with ``new`` inserted right after ``anchor`` (which must be there)."""
    at = list(items).index(anchor) + 1
    return (*items[:at], new, *items[at:])


class RunFilter(admin.SimpleListFilter):
    """Evaluation turns of one run (through ``Prediction.turn``)."""

    title = "run"
    parameter_name = "run"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        runs = list(Run.objects.order_by("-created_at").values_list("pk", "run_id")[:RUN_FILTER_LIMIT])
        selected = self.value()
        if selected and selected.isdigit() and all(str(pk) != selected for pk, _ in runs):
            runs += list(Run.objects.filter(pk=int(selected)).values_list("pk", "run_id"))
        return [(str(pk), run_id) for pk, run_id in runs]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Turn]) -> QuerySet[Turn]:
        value = self.value()
        if not value:
            return queryset
        if not value.isdigit():
            return queryset.none()
        # A subquery, not a join: a turn is listed once whatever its predictions.
        return queryset.filter(pk__in=Prediction.objects.filter(run_id=int(value)).values("turn_id"))


def _fieldsets_with_run(fieldsets: Any) -> Any:
    """The turn page's fieldsets with ``run_link`` and ``prediction_link``
    beside the owner, and ``in_datasets`` after the question."""
    (name, options), *rest = fieldsets
    rows = tuple(
        (*row, "run_link", "prediction_link", "replay_links")
        if isinstance(row, tuple) and "owner_name" in row
        else row
        for row in options["fields"]
    )
    rest = [
        (title, {**opts, "fields": (*opts["fields"], "in_datasets")})
        if "question" in opts["fields"]
        else (title, opts)
        for title, opts in rest
    ]
    return ((name, {**options, "fields": rows}), *rest)


class RunTurnAdmin(TurnAdmin):
    """``TurnAdmin`` with the run of an evaluation turn: column, field and filter."""

    list_display = _after(TurnAdmin.list_display, "owner", "run_link")
    list_filter = _after(TurnAdmin.list_filter, StopReasonFilter, RunFilter)
    readonly_fields = _after(
        _after(
            _after(
                _after(TurnAdmin.readonly_fields, "owner_name", "run_link"), "run_link", "prediction_link"
            ),
            "prediction_link",
            "replay_links",
        ),
        "question",
        "in_datasets",
    )
    fieldsets = _fieldsets_with_run(TurnAdmin.fieldsets)
    # TurnAdmin.actions is an unannotated literal, typed as exactly four names
    actions = (*TurnAdmin.actions, add_to_dataset)  # type: ignore[assignment]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Turn]:
        # The run of an evaluation turn, as two scalar subqueries on the
        # prediction's turn_id index instead of one query per row.
        prediction = Prediction.objects.filter(turn_id=OuterRef("pk")).order_by("pk")
        return (
            super()
            .get_queryset(request)
            .annotate(
                run_pk=Subquery(prediction.values("run_id")[:1]),
                run_label=Subquery(prediction.values("run__run_id")[:1]),
                prediction_pk=Subquery(prediction.values("pk")[:1]),
                example_label=Subquery(prediction.values("example__external_id")[:1]),
                replayed=Exists(ReplayItem.objects.filter(original_id=OuterRef("pk"))),
            )
        )

    @admin.display(description="run")
    def run_link(self, turn: Turn) -> SafeString | str:
        run_pk = getattr(turn, "run_pk", None)
        if run_pk is None:
            return DASH
        return admin_link(Run, run_pk, turn.run_label)  # type: ignore[attr-defined]

    @admin.display(description="prediction")
    def prediction_link(self, turn: Turn) -> SafeString | str:
        """The prediction this evaluation turn produced, named by its example."""
        prediction_pk = getattr(turn, "prediction_pk", None)
        if prediction_pk is None:
            return DASH
        return admin_link(Prediction, prediction_pk, f"example {turn.example_label}")  # type: ignore[attr-defined]

    @admin.display(description="replay")
    def replay_links(self, turn: Turn) -> SafeString | str:
        """A replay turn's original and its replay; an original's replays (``manage.py replay_turns``)."""
        if turn.replay_of_id is not None:
            item = ReplayItem.objects.filter(turn=turn).select_related("replay").first()
            where = (
                format_html(" in {}", admin_link(Replay, item.replay_id, item.replay.name)) if item else ""
            )
            return format_html(
                "replays turn {}{}", admin_link(Turn, turn.replay_of_id, f"#{turn.replay_of_id}"), where
            )
        if not getattr(turn, "replayed", False):  # no query for a turn never replayed
            return DASH
        items = ReplayItem.objects.filter(original=turn).select_related("replay").order_by("pk")
        return format_html_join(
            ", ",
            "{} ({})",
            (
                (admin_link(Turn, i.turn_id, f"#{i.turn_id}"), admin_link(Replay, i.replay_id, i.replay.name))
                for i in items
            ),
        )

    @admin.display(description="in datasets")
    def in_datasets(self, turn: Turn) -> SafeString | str:
        """The current examples holding the turn's question, as links ``dataset · question_id``."""
        examples = list(turn_examples(turn=turn))
        if not examples:
            return "in no dataset (add it with the list's “Add to dataset…” action)"
        return format_html_join(
            ", ",
            "{}",
            ((admin_link(Example, e.pk, f"{e.dataset.name} · {e.external_id}"),) for e in examples),
        )


# ``turns.admin`` registered the plain TurnAdmin when it was imported (above).
admin.site.unregister(Turn)
admin.site.register(Turn, RunTurnAdmin)

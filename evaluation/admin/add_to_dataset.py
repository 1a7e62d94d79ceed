"""The turn list's "Add to dataset…" action: chosen turns become examples of
a dataset (``evaluation.datasets.from_turns``).

Like Django's "delete selected", the action first answers with an
intermediate page (``templates/admin/evaluation/add_to_dataset.html``): one
row per turn with its question, read-only, and its gold answer, pre-filled
with the turn's answer for staff to confirm or correct, and its expected
trajectory, pre-filled with the turn's tool calls, to keep, edit or empty; the dataset (an
existing one, or a new name), the task type and the scorer. Submitting it
calls :func:`~evaluation.datasets.from_turns.examples_from_turns` once — one
new version — and reports what was added and which turns were already there.
A refusal (an empty gold answer, a bad name) shows the page again with the
error on its row or at the top; nothing is written then.

``evaluation.admin.turns`` puts the action on the turn admin.
"""

from __future__ import annotations

import json
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import QuerySet
from django.forms import formset_factory
from django.http import HttpRequest
from django.template.response import TemplateResponse

from common.admin import StaffReadOnlyAdmin
from common.errors import AgentLabError
from evaluation.datasets.from_turns import MAX_TURNS, GoldMissing, TurnPick, examples_from_turns
from evaluation.datasets.names import MAX_NAME
from evaluation.models import Dataset, Example
from evaluation.run.agent_path import agent_trajectories
from evaluation.scoring.dispatch import DEFAULT_SCORER_BY_TASK_TYPE, KNOWN_SCORERS
from evaluation.scoring.trajectory_spec import PROTOCOL_TOOLS, TrajectoryFormatError, expected_trajectory
from turns.models import Turn

TEMPLATE = "admin/evaluation/add_to_dataset.html"


class AddToDatasetForm(forms.Form):
    """Where the examples go and how they are scored: an existing ``dataset``
    or a ``new_name`` (exactly one), a task type (a known one or one a
    dataset uses), a scorer (``""``: by task type)."""

    dataset = forms.ChoiceField(required=False, label="Dataset")
    new_name = forms.CharField(
        required=False, max_length=MAX_NAME, label="or a new dataset named", strip=True
    )
    task_type = forms.ChoiceField()
    scorer = forms.ChoiceField(
        required=False,
        choices=[("", "by task type"), *((s, s) for s in sorted(KNOWN_SCORERS))],
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = Dataset.objects.order_by("name").values_list("name", flat=True)
        cast(forms.ChoiceField, self.fields["dataset"]).choices = [
            ("", "(a new dataset)"),
            *((n, n) for n in names),
        ]
        # the known task types and those the datasets already use (e.g. HotpotQA's "qa")
        used = Example.objects.filter(valid_to__isnull=True).order_by().values_list("task_type", flat=True)
        task_types = sorted(set(DEFAULT_SCORER_BY_TASK_TYPE) | set(used.distinct()))
        cast(forms.ChoiceField, self.fields["task_type"]).choices = [
            ("", "---------"),
            *((t, t) for t in task_types),
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        existing, new = data.get("dataset"), data.get("new_name")
        if bool(existing) == bool(new):
            raise forms.ValidationError("Choose an existing dataset or give a new name, not both.")
        if new and Dataset.objects.filter(name=new).exists():
            raise forms.ValidationError(f"A dataset named {new!r} already exists: choose it in the list.")
        return data

    @property
    def dataset_name(self) -> str:
        return str(self.cleaned_data.get("dataset") or self.cleaned_data.get("new_name") or "")


class GoldForm(forms.Form):
    """One turn's row: which turn, its gold answer, and its expected
    trajectory — the turn's own tool calls as a draft (JSON), to keep, edit
    or empty (no expected path)."""

    turn_id = forms.IntegerField(widget=forms.HiddenInput)
    answer = forms.CharField(
        required=False, strip=True, label="gold answer", widget=forms.Textarea(attrs={"rows": 2, "cols": 60})
    )
    trajectory = forms.CharField(
        required=False,
        strip=True,
        label="expected trajectory",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 50}),
    )

    def clean_trajectory(self) -> list[dict[str, Any]] | None:
        """``None`` for an empty box, else the JSON list of calls, checked as an import checks it."""
        text = self.cleaned_data.get("trajectory") or ""
        if not text:
            return None
        try:
            value = json.loads(text)
            expected_trajectory({"trajectory": value})
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
            ) from None
        except TrajectoryFormatError as exc:
            raise forms.ValidationError(str(exc)) from None
        return list(value)


def trajectory_drafts(turns: list[Turn]) -> dict[int, str]:
    """Each turn's tool calls (the protocol's left out) as the JSON draft of
    its expected trajectory; ``""`` for a turn that called no tool."""
    paths = agent_trajectories(t.pk for t in turns)
    drafts = {}
    for turn_id, path in paths.items():
        calls = [{"tool": c.tool, "args": c.args} for c in path if c.tool not in PROTOCOL_TOOLS]
        drafts[turn_id] = json.dumps(calls, ensure_ascii=False) if calls else ""
    return drafts


GoldFormSet = formset_factory(GoldForm, extra=0)


@admin.action(description="Add to dataset…", permissions=["operate"])
def add_to_dataset(modeladmin: StaffReadOnlyAdmin, request: HttpRequest, queryset: QuerySet[Turn]) -> Any:
    """Show the form for the selected turns; on its submission, add them
    (``None``: back to the list, with the outcome as a message)."""
    turns = list(queryset.select_related(None).order_by("pk").only("pk", "question", "answer", "status"))
    if len(turns) > MAX_TURNS:
        modeladmin.message_user(
            request, f"Choose at most {MAX_TURNS} turns at a time, not {len(turns)}.", messages.ERROR
        )
        return None
    if "post" not in request.POST:
        form = AddToDatasetForm()
        drafts = trajectory_drafts(turns)
        rows = GoldFormSet(
            prefix="gold",
            initial=[
                {"turn_id": t.pk, "answer": t.answer, "trajectory": drafts.get(t.pk, "")} for t in turns
            ],
        )
        return _page(modeladmin, request, turns, form, rows)
    form = AddToDatasetForm(request.POST)
    rows = GoldFormSet(request.POST, prefix="gold")
    if form.is_valid() and rows.is_valid() and _rows_match(rows, turns, form):
        try:
            added = examples_from_turns(
                dataset_name=form.dataset_name,
                picks=[
                    TurnPick(
                        turn_id=row["turn_id"],
                        gold=row["answer"],
                        task_type=form.cleaned_data["task_type"],
                        scorer=form.cleaned_data["scorer"],
                        trajectory=row.get("trajectory"),
                    )
                    for row in rows.cleaned_data
                ],
                create=bool(form.cleaned_data.get("new_name")),
                user=modeladmin.acting_user(request),
            )
        except GoldMissing as exc:
            for row in rows:
                why = exc.rows.get(row.cleaned_data["turn_id"])
                if why:
                    row.add_error("answer", why)
        except AgentLabError as exc:
            form.add_error(None, str(exc))
        else:
            level = messages.SUCCESS if added.added else messages.WARNING
            modeladmin.message_user(request, added.summary(), level)
            return None
    return _page(modeladmin, request, turns, form, rows)


def _rows_match(rows: Any, turns: list[Turn], form: AddToDatasetForm) -> bool:
    """Whether the form's rows are the selected turns (a turn deleted since
    the page was shown, or a tampered form, is an error, not a guess)."""
    ids = [row["turn_id"] for row in rows.cleaned_data]
    if sorted(ids) == [turn.pk for turn in turns]:
        return True
    form.add_error(None, "The selected turns changed since this page was shown; choose them again.")
    return False


def _page(
    modeladmin: StaffReadOnlyAdmin, request: HttpRequest, turns: list[Turn], form: AddToDatasetForm, rows: Any
) -> TemplateResponse:
    by_pk = {turn.pk: turn for turn in turns}
    table = []
    for row in rows:
        turn_id = row["turn_id"].value()
        turn = by_pk.get(int(turn_id)) if str(turn_id).isdigit() else None
        table.append({"form": row, "turn": turn})
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Add turns to a dataset",
        "opts": modeladmin.model._meta,
        "turns": turns,
        "form": form,
        "rows": rows,
        "table": table,
        "action_checkbox_name": ACTION_CHECKBOX_NAME,
        "media": modeladmin.media + form.media,
    }
    return TemplateResponse(request, TEMPLATE, context)

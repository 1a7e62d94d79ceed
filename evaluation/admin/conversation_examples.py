"""The conversation list's "Add conversation to dataset…" action: chosen
conversations become conversation examples of a dataset
(``evaluation.datasets.from_conversations``), as the turn list's "Add to
dataset…" makes one-question examples (``evaluation.admin.add_to_dataset``).

The action first answers with an intermediate page
(``templates/admin/evaluation/add_conversation_to_dataset.html``): per
conversation, its finished turns in order — the user's message read-only and
a gold answer pre-filled with the agent's answer, to confirm, correct or
empty (no gold: the turn is not scored) — then the dataset (an existing one
or a new name), the task type and the scorer. Submitting it makes one new
version; a refusal shows the page again with the error, nothing written.

``turns`` knows nothing of evaluation, so this module registers
``ConversationExamplesAdmin``, ``turns.admin.ConversationAdmin`` with the
action, in its place.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from common.admin import StaffReadOnlyAdmin
from common.errors import AgentLabError
from evaluation.admin.add_to_dataset import AddToDatasetForm
from evaluation.datasets.from_conversations import (
    MAX_CONVERSATIONS,
    ConversationPick,
    conversation_turns_kept,
    examples_from_conversations,
)
from evaluation.scoring.scorer_names import PURE_SCORER_NAMES
from turns.admin import ConversationAdmin
from turns.models import Conversation

TEMPLATE = "admin/evaluation/add_conversation_to_dataset.html"


class ConversationDatasetForm(AddToDatasetForm):
    """``AddToDatasetForm`` whose scorer is a pure one (a turn of a conversation
    is scored by a pure scorer; ``""``: by task type)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["scorer"].choices = [("", "by task type"), *((s, s) for s in sorted(PURE_SCORER_NAMES))]  # type: ignore[attr-defined]


def gold_field(turn_id: int) -> str:
    """The name of turn ``turn_id``'s gold-answer box on the page."""
    return f"gold_{turn_id}"


@admin.action(description="Add conversation to dataset…", permissions=["operate"])
def add_conversation_to_dataset(
    modeladmin: StaffReadOnlyAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> Any:
    """Show the page for the selected conversations; on its submission, add
    them (``None``: back to the list, with the outcome as a message)."""
    conversations = list(queryset.order_by("pk"))
    if len(conversations) > MAX_CONVERSATIONS:
        modeladmin.message_user(
            request,
            f"Choose at most {MAX_CONVERSATIONS} conversations at a time, not {len(conversations)}.",
            messages.ERROR,
        )
        return None
    rows = [(c, conversation_turns_kept(c.pk)) for c in conversations]
    if "post" not in request.POST:
        golds = {turn.pk: turn.answer or turn.clarifying_question for _, turns in rows for turn in turns}
        return _page(modeladmin, request, rows, ConversationDatasetForm(), golds)
    form = ConversationDatasetForm(request.POST)
    golds = {turn.pk: request.POST.get(gold_field(turn.pk), "") for _, turns in rows for turn in turns}
    if form.is_valid():
        picks = [
            ConversationPick(conversation_id=c.pk, golds={t.pk: golds[t.pk] for t in turns})
            for c, turns in rows
        ]
        try:
            added = examples_from_conversations(
                dataset_name=form.dataset_name,
                picks=picks,
                task_type=form.cleaned_data["task_type"],
                scorer=form.cleaned_data["scorer"],
                create=bool(form.cleaned_data.get("new_name")),
                user=modeladmin.acting_user(request),
            )
        except AgentLabError as exc:
            form.add_error(None, str(exc))
        else:
            level = messages.SUCCESS if added.added else messages.WARNING
            modeladmin.message_user(request, added.summary(), level)
            return None
    return _page(modeladmin, request, rows, form, golds)


def _page(
    modeladmin: StaffReadOnlyAdmin,
    request: HttpRequest,
    rows: list[tuple[Conversation, list[Any]]],
    form: ConversationDatasetForm,
    golds: dict[int, str],
) -> TemplateResponse:
    table = [
        {
            "conversation": conversation,
            "turns": [{"turn": t, "field": gold_field(t.pk), "gold": golds.get(t.pk, "")} for t in turns],
        }
        for conversation, turns in rows
    ]
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Add conversations to a dataset",
        "opts": modeladmin.model._meta,
        "conversations": [conversation for conversation, _ in rows],
        "table": table,
        "form": form,
        "action_checkbox_name": ACTION_CHECKBOX_NAME,
        "media": modeladmin.media + form.media,
    }
    return TemplateResponse(request, TEMPLATE, context)


class ConversationExamplesAdmin(ConversationAdmin):
    """``ConversationAdmin`` with "Add conversation to dataset…"."""

    actions = (add_conversation_to_dataset,)


# ``turns.admin`` registered the plain ConversationAdmin when it was imported (above).
admin.site.unregister(Conversation)
admin.site.register(Conversation, ConversationExamplesAdmin)

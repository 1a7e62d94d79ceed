"""The turn list: its columns, filters and search, and the actions staff run on
turns (resume, cancel, retry, continue) — each one the service the API calls.

The page of one turn is ``turns.admin.turn_page``; ``TurnAdmin`` extends it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin import DASH, DistinctValuesFilter, admin_link, fmt_cost, fmt_ms, fmt_tokens
from common.errors import StateConflict
from turns.admin.display import status_badge, turn_duration_ms
from turns.admin.feedback import FeedbackFilter, feedback_counts_text, feedback_table, with_feedback_counts
from turns.admin.turn_page import TurnPageAdmin
from turns.attempts import usage_total
from turns.models import Conversation, Turn, TurnStatus
from turns.services import (
    turn_cancel,
    turn_continue_and_enqueue,
    turn_resume_and_enqueue,
    turn_retry_and_enqueue,
)

#: Steps the admin's "continue" action adds to a turn that hit max_steps.
CONTINUE_EXTRA_STEPS = 4


class AttentionFilter(admin.SimpleListFilter):
    """Shortcuts to the turns a person has to look at."""

    title = "needs attention"
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [
            ("interrupted", "Interrupted (resume or retry)"),
            ("waiting", "Waiting for approval"),
            ("stale", "Stale: active, no heartbeat for TURN_STALE_S"),
            ("failed", "Failed"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Turn]) -> QuerySet[Turn]:
        value = self.value()
        if value == "interrupted":
            return queryset.filter(status=TurnStatus.INTERRUPTED)
        if value == "waiting":
            return queryset.filter(status=TurnStatus.WAITING)
        if value == "stale":
            cutoff = timezone.now() - timedelta(seconds=float(settings.TURN_STALE_S))
            return queryset.filter(status__in=[TurnStatus.RUNNING, TurnStatus.WAITING]).filter(
                Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
            )
        if value == "failed":
            return queryset.filter(status=TurnStatus.FAILED)
        return queryset


class StopReasonFilter(DistinctValuesFilter):
    title = "stop reason"
    parameter_name = "stop_reason"
    field_name = "stop_reason"


class ModelFilter(DistinctValuesFilter):
    title = "model"
    parameter_name = "model"
    field_name = "model"


class TurnChangeList(ChangeList):
    """The turn list loads no large columns: context documents, meta and the
    answer texts stay in the database (search still reads them there)."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Turn]:
        return (
            super()
            .get_queryset(request, exclude_parameters)
            .defer("context", "meta", "answer", "evidence", "reasoning", "clarifying_question")
        )


_VerbFn = Callable[[int, Any], Turn]

#: The services behind each action — the same ones the API calls
#: (``turns/api.py``). Resume and retry hand the turn to the job runner
#: (``turns.services.enqueue.turn_enqueue``) after their transaction commits; retry also
#: refuses while another turn of the same conversation is active.
_VERBS: dict[str, tuple[_VerbFn, str]] = {
    "resume": (lambda turn_id, user: turn_resume_and_enqueue(turn_id=turn_id, acting_user=user), "resumed"),
    "cancel": (lambda turn_id, user: turn_cancel(turn_id=turn_id, acting_user=user), "cancelled"),
    "retry": (lambda turn_id, user: turn_retry_and_enqueue(turn_id=turn_id, acting_user=user), "retried"),
    "continue": (
        lambda turn_id, user: turn_continue_and_enqueue(
            turn_id=turn_id, extra_steps=CONTINUE_EXTRA_STEPS, acting_user=user
        ),
        "continued",
    ),
}


@admin.register(Turn)
class TurnAdmin(TurnPageAdmin):
    """Turns of chat and of evaluation; ``evaluation.admin.turns`` registers a
    subclass that adds the run of an evaluation turn."""

    list_display: tuple[str, ...] = (
        "id",
        "question_short",
        "status_display",
        "outcome",
        "phase",
        "stop_reason_display",
        "steps",
        "tokens",
        "cost",
        "duration",
        "conversation_link",
        "owner",
        "feedback_column",
        "created_at",
    )
    list_display_links = ("id", "question_short")
    list_select_related = ("owner", "conversation")
    list_filter: ClassVar[tuple[Any, ...]] = (
        AttentionFilter,
        "status",
        "outcome",
        "phase",
        StopReasonFilter,
        ModelFilter,
        "kind",
        FeedbackFilter,
    )
    date_hierarchy = "created_at"
    search_fields = ("question", "answer")
    search_help_text = "Question or answer text; a number (or #number) also finds the turn with that id."
    list_per_page = 50
    # A filtered page counts its results; counting the whole table as well is
    # one more full scan of the biggest table for a "(N total)" nobody needs.
    show_full_result_count = False
    actions = ("resume_turns", "cancel_turns", "retry_turns", "continue_turns")
    readonly_fields: ClassVar[tuple[str, ...]] = (
        "status_display",
        "phase",
        "outcome",
        "stop_reason_display",
        "kind",
        "model",
        "steps_of_max",
        "attempts",
        "conversation_link",
        "owner_name",
        "created_at",
        "started_at",
        "finished_at",
        "heartbeat_at",
        "job_id",
        "cancel_flag",
        "last_seq",
        "duration",
        "question",
        "answer",
        "evidence",
        "reasoning",
        "clarifying_question",
        "failure",
        "review_display",
        "setup_prompt",
        "setup_tools",
        "history_display",
        "attempts_table",
        "usage_table",
        "timings_table",
        "approvals_table",
        "feedback_display",
        "context_json",
        "meta_json",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("status_display", "phase", "outcome", "stop_reason_display"),
                    ("kind", "model", "steps_of_max", "attempts"),
                    ("conversation_link", "owner_name"),
                    ("created_at", "started_at", "finished_at", "duration"),
                    ("heartbeat_at", "job_id", "cancel_flag", "last_seq"),
                )
            },
        ),
        ("Question", {"fields": ("question",)}),
        ("What the model was given", {"fields": ("setup_prompt", "setup_tools", "history_display")}),
        (
            "Answer",
            {
                "fields": (
                    "answer",
                    "evidence",
                    "reasoning",
                    "clarifying_question",
                    "failure",
                    "review_display",
                )
            },
        ),
        ("Attempts", {"fields": ("attempts_table",)}),
        ("Usage and timings", {"fields": ("usage_table", "timings_table")}),
        ("Approvals", {"fields": ("approvals_table",)}),
        ("Feedback", {"fields": ("feedback_display",)}),
        ("Context and meta", {"classes": ("collapse",), "fields": ("context_json", "meta_json")}),
    )

    # -- queries --

    def get_queryset(self, request: HttpRequest) -> QuerySet[Turn]:
        return with_feedback_counts(super().get_queryset(request).select_related("owner", "conversation"))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return TurnChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Turn], search_term: str
    ) -> tuple[QuerySet[Turn], bool]:
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip().lstrip("#")
        if term.isdigit():
            found = found | queryset.filter(pk=int(term))
        return found, may_have_duplicates

    # -- list columns --

    @admin.display(description="feedback")
    def feedback_column(self, turn: Turn) -> str:
        return feedback_counts_text(turn)

    @admin.display(description="feedback")
    def feedback_display(self, turn: Turn) -> SafeString:
        """Every user's rating of the turn, with its history (turns.admin.feedback)."""
        return feedback_table(turn)

    @admin.display(description="question")
    def question_short(self, turn: Turn) -> str:
        return Truncator(turn.question).chars(70)

    @admin.display(description="status", ordering="status")
    def status_display(self, turn: Turn) -> SafeString:
        return status_badge(turn.status)

    @admin.display(description="tokens")
    def tokens(self, turn: Turn) -> str:
        return fmt_tokens(self._usage(turn))

    @admin.display(description="cost")
    def cost(self, turn: Turn) -> str:
        return fmt_cost(self._usage(turn).get("cost"))

    @staticmethod
    def _usage(turn: Turn) -> dict[str, Any]:
        """All attempts' usage, as the turn's page shows it: only a turn with
        earlier attempts reads their rows (one query each)."""
        return usage_total(turn)

    @admin.display(description="duration")
    def duration(self, turn: Turn) -> str:
        ms = turn_duration_ms(turn)
        if ms is None and turn.started_at and turn.is_active:
            return f"running {fmt_ms((timezone.now() - turn.started_at).total_seconds() * 1000)}"
        return fmt_ms(ms)

    @admin.display(description="conversation", ordering="conversation")
    def conversation_link(self, turn: Turn) -> SafeString | str:
        if turn.conversation_id is None:
            return DASH
        return admin_link(Conversation, turn.conversation_id, Truncator(str(turn.conversation)).chars(40))

    @admin.display(description="owner", ordering="owner__username")
    def owner_name(self, turn: Turn) -> str:
        return turn.owner.get_username()

    # -- actions --

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<int:object_id>/act/<str:verb>/",
                self.admin_site.admin_view(self.act_view),
                name="turns_turn_act",
            ),
            *super().get_urls(),
        ]

    def act_view(self, request: HttpRequest, object_id: int, verb: str) -> HttpResponse:
        """POST from the buttons of a turn's page: the same path as the list actions."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        if verb not in _VERBS:
            raise Http404(f"no action {verb!r}")
        self._apply(request, [object_id], verb)
        return HttpResponseRedirect(reverse("admin:turns_turn_change", args=[object_id]))

    @admin.action(description="Resume selected interrupted or failed turns", permissions=["operate"])
    def resume_turns(self, request: HttpRequest, queryset: QuerySet[Turn]) -> None:
        self._apply(request, queryset.order_by("pk").values_list("pk", flat=True), "resume")

    @admin.action(description="Cancel selected turns", permissions=["operate"])
    def cancel_turns(self, request: HttpRequest, queryset: QuerySet[Turn]) -> None:
        self._apply(request, queryset.order_by("pk").values_list("pk", flat=True), "cancel")

    @admin.action(
        description="Retry selected failed, interrupted or cancelled turns as a new attempt",
        permissions=["operate"],
    )
    def retry_turns(self, request: HttpRequest, queryset: QuerySet[Turn]) -> None:
        self._apply(request, queryset.order_by("pk").values_list("pk", flat=True), "retry")

    @admin.action(
        description=f"Continue selected turns that hit max_steps, with {CONTINUE_EXTRA_STEPS} more steps",
        permissions=["operate"],
    )
    def continue_turns(self, request: HttpRequest, queryset: QuerySet[Turn]) -> None:
        self._apply(request, queryset.order_by("pk").values_list("pk", flat=True), "continue")

    def _apply(self, request: HttpRequest, turn_ids: Iterable[int], verb: str) -> None:
        """Run one service per turn; a conflict on one turn is reported (with
        the service's reason) and the others go on. Each success is written to
        the admin history (who, what, when); resume and retry are handed to the
        job runner by their service once its transaction commits."""
        service, past = _VERBS[verb]
        done: list[str] = []
        pending_cancel: list[str] = []
        for turn_id in list(turn_ids):
            try:
                turn = service(turn_id, self.acting_user(request))
            except StateConflict as exc:
                self.message_user(request, f"Turn #{turn_id} not {past}: {exc}.", messages.WARNING)
                continue
            except Turn.DoesNotExist:
                self.message_user(
                    request, f"Turn #{turn_id} not {past}: it no longer exists.", messages.WARNING
                )
                continue
            if verb == "cancel" and turn.status != TurnStatus.CANCELLED:
                pending_cancel.append(f"#{turn_id}")
                self.log_change(request, turn, "Cancel requested in the admin; its driver will stop it.")
                continue
            self.log_change(request, turn, f"{past.capitalize()} in the admin; now {turn.status}.")
            label = f"#{turn_id}" + (f" (attempt {turn.attempts})" if verb == "retry" else "")
            done.append(label)
        if done:
            self.message_user(
                request, f"{past.capitalize()} {len(done)} turn(s): {', '.join(done)}.", messages.SUCCESS
            )
        if pending_cancel:
            self.message_user(
                request,
                f"Cancel requested for {len(pending_cancel)} running turn(s): "
                f"{', '.join(pending_cancel)}; each stops at its driver's next check.",
                messages.SUCCESS,
            )

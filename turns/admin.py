"""The admin for conversations, turns and approvals (issue 6).

Staff live here: it is the fastest way to find out what an agent did and to
put a stuck turn back on its feet. Every page is read-only — a turn's status is
written by its driver and by services under a row lock, so a form that saved a
whole stale row would undo their work. The only writes are the actions —
resume, cancel and retry on turns, approve and reject on approvals — and each
one calls the same service as the API (``turns.services``), one row at a
time, reporting per row what happened; the admin history (``LogEntry``)
records who did it.

Access: any active staff user sees everything and may run the actions
(DESIGN.md §7, "staff see all"); nobody adds, edits or deletes rows here.

Query budget: list pages run a constant number of queries whatever the number
of rows — related rows come with ``select_related`` and counts, the run of an
evaluation turn and the last activity of a conversation come as annotations.
The turn page reads one page of its event log by seq range
(``turns.events.events_after``), on the (turn, seq) unique index, so a turn
with 5,000 events costs the same as one with 50.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.forms.models import BaseInlineFormSet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.errors import NotFound, StateConflict
from evaluation.models import Prediction, Run

from .events import events_after
from .models import (
    TERMINAL_EVENT_TYPES,
    Approval,
    Conversation,
    Turn,
    TurnStatus,
)
from .services import (
    RETRYABLE_STATUSES,
    approval_decide,
    turn_cancel,
    turn_continue_and_enqueue,
    turn_resume_and_enqueue,
    turn_retry_and_enqueue,
)

#: Steps the admin's "continue" action adds to a turn that hit max_steps.
CONTINUE_EXTRA_STEPS = 4

#: Events shown per page of a turn's event log.
EVENTS_PER_PAGE = 100
#: Turns shown inline on a conversation page (newest first); the rest are one click away.
TURNS_INLINE_LIMIT = 50
#: Runs offered by the turn list's "run" filter (newest first).
RUN_FILTER_LIMIT = 30

DASH = "—"
_PRE_STYLE = "max-height:24em;overflow:auto;white-space:pre-wrap;margin:0;font-size:12px"

_STATUS_COLOURS = {
    TurnStatus.QUEUED: "#6b7280",
    TurnStatus.RUNNING: "#2563eb",
    TurnStatus.WAITING: "#b45309",
    TurnStatus.SUCCEEDED: "#15803d",
    TurnStatus.FAILED: "#b91c1c",
    TurnStatus.CANCELLED: "#6b7280",
    TurnStatus.INTERRUPTED: "#c2410c",
}


# --- formatting helpers (shared with evaluation/admin.py) ---------------------


def fmt_ms(ms: float | None) -> str:
    """A duration in milliseconds for people: ``850 ms``, ``12.3 s``, ``4 min 05 s``, ``1 h 02 min``."""
    if ms is None:
        return DASH
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def fmt_cost(cost: float | None) -> str:
    """US dollars, or a dash when unknown (never ``$0`` for "we do not know")."""
    return DASH if cost is None else f"${cost:,.4f}"


def fmt_tokens(usage: dict[str, Any] | None) -> str:
    """Total tokens of a ``UsageTotals.to_dict()``; calls with unknown usage are
    said so rather than counted as zero."""
    usage = usage or {}
    calls = int(usage.get("calls") or 0)
    unknown = int(usage.get("unknown_calls") or 0)
    if not calls:
        return DASH
    if unknown >= calls:
        return "unknown"
    total = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    return f"{total:,}" + (f" (+{unknown} calls unknown)" if unknown else "")


def json_block(value: Any) -> SafeString:
    """Pretty JSON in a scrollable ``<pre>`` (escaped)."""
    if value in (None, {}, []):
        return format_html("<span>{}</span>", DASH)
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return format_html('<pre style="{}">{}</pre>', _PRE_STYLE, text)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, empty: str = DASH) -> SafeString:
    """A small admin-styled table; cells are escaped unless already safe HTML."""
    rows = list(rows)
    if not rows:
        return format_html("<span>{}</span>", empty)
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        (
            (format_html_join("", "<td>{}</td>", ((DASH if c is None or c == "" else c,) for c in row)),)
            for row in rows
        ),
    )
    return format_html(
        '<table style="margin:0"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body
    )


def admin_link(obj_or_model: Any, pk: Any, text: Any, *, query: str = "") -> SafeString:
    """A link to an object's admin change page (or to a changelist when ``pk`` is None)."""
    opts = obj_or_model._meta
    if pk is None:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    else:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[pk])
    return format_html('<a href="{}{}">{}</a>', url, f"?{query}" if query else "", text)


def status_badge(status: str) -> SafeString:
    colour = _STATUS_COLOURS.get(status, "#374151")  # type: ignore[call-overload]
    return format_html('<span style="color:{};font-weight:600">&#9679; {}</span>', colour, status)


def turn_duration_ms(turn: Turn) -> float | None:
    """Wall time of a turn in ms: the driver's ``total_ms``, else finished − started."""
    total = (turn.timings or {}).get("total_ms")
    if total is not None:
        return float(total)
    if turn.started_at and turn.finished_at:
        return (turn.finished_at - turn.started_at).total_seconds() * 1000
    return None


# --- access --------------------------------------------------------------------


class StaffReadOnlyAdmin(admin.ModelAdmin):
    """Active staff see everything; nobody adds, edits or deletes rows here.

    Rows are written by services (events under a row lock, turns by their
    driver); a saved admin form would write back a whole, possibly stale row.
    Actions that change state declare ``permissions=["operate"]`` and call a
    service.
    """

    @staticmethod
    def is_staff(request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_staff)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.is_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.is_staff(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return self.is_staff(request)


class DistinctValuesFilter(admin.SimpleListFilter):
    """A filter over the distinct non-empty values of one column (one query),
    plus "(none)" for rows where it is still empty."""

    field_name = ""
    NONE = "__none__"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        values = (
            model_admin.model._default_manager.exclude(**{self.field_name: ""})
            .order_by(self.field_name)
            .values_list(self.field_name, flat=True)
            .distinct()
        )
        return [(v, v) for v in values] + [(self.NONE, "(none)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(**{self.field_name: "" if value == self.NONE else value})


# --- conversations -------------------------------------------------------------


class _NewestTurnsFormSet(BaseInlineFormSet):
    """Only the newest ``TURNS_INLINE_LIMIT`` turns: a long conversation's page
    stays small; the full list is a link to the filtered turn list."""

    def get_queryset(self) -> Any:
        if not hasattr(self, "_newest"):
            self._newest = list(super().get_queryset()[:TURNS_INLINE_LIMIT])
        return self._newest


class TurnInline(admin.TabularInline):
    model = Turn
    formset = _NewestTurnsFormSet
    fk_name = "conversation"
    ordering = ("-position", "-pk")
    fields = ("turn_link", "status_display", "outcome", "stop_reason", "steps", "tokens", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False
    verbose_name_plural = f"Turns (newest {TURNS_INLINE_LIMIT})"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Turn]:
        return super().get_queryset(request).defer("context", "meta", "answer", "evidence", "reasoning")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return StaffReadOnlyAdmin.is_staff(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="turn")
    def turn_link(self, turn: Turn) -> SafeString:
        return admin_link(Turn, turn.pk, f"#{turn.pk} · {Truncator(turn.question).chars(80)}")

    @admin.display(description="status")
    def status_display(self, turn: Turn) -> SafeString:
        return status_badge(turn.status)

    @admin.display(description="tokens")
    def tokens(self, turn: Turn) -> str:
        return fmt_tokens(turn.usage)


@admin.register(Conversation)
class ConversationAdmin(StaffReadOnlyAdmin):
    list_display = ("id", "title_display", "owner", "turn_count", "last_activity", "created_at")
    list_display_links = ("id", "title_display")
    list_select_related = ("owner",)
    search_fields = ("title", "owner__username", "owner__email")
    search_help_text = "Title, or the owner's username or email."
    date_hierarchy = "created_at"
    list_per_page = 50
    fields = ("title", "owner", "turn_count", "last_activity", "created_at", "all_turns")
    readonly_fields = fields
    inlines = (TurnInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        return (
            super()
            .get_queryset(request)
            .select_related("owner")
            .annotate(
                turn_count=Count("turns"), last_activity=Coalesce(Max("turns__updated_at"), "updated_at")
            )
        )

    @admin.display(description="title", ordering="title")
    def title_display(self, conversation: Conversation) -> str:
        return str(conversation)

    @admin.display(description="turns", ordering="turn_count")
    def turn_count(self, conversation: Conversation) -> int:
        return conversation.turn_count  # type: ignore[attr-defined]

    @admin.display(description="last activity", ordering="last_activity")
    def last_activity(self, conversation: Conversation) -> Any:
        return conversation.last_activity  # type: ignore[attr-defined]

    @admin.display(description="all turns")
    def all_turns(self, conversation: Conversation) -> SafeString:
        count = conversation.turn_count  # type: ignore[attr-defined]
        return admin_link(
            Turn,
            None,
            f"all {count} turns in the turn list",
            query=f"conversation__id__exact={conversation.pk}",
        )


# --- turns ---------------------------------------------------------------------


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
#: (``turns.jobs.turn_enqueue``) after their transaction commits; retry also
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
class TurnAdmin(StaffReadOnlyAdmin):
    list_display = (
        "id",
        "question_short",
        "status_display",
        "outcome",
        "phase",
        "stop_reason",
        "steps",
        "tokens",
        "cost",
        "duration",
        "conversation_link",
        "owner",
        "run_link",
        "created_at",
    )
    list_display_links = ("id", "question_short")
    list_select_related = ("owner", "conversation")
    list_filter = (
        AttentionFilter,
        "status",
        "outcome",
        "phase",
        StopReasonFilter,
        RunFilter,
        ModelFilter,
        "kind",
    )
    date_hierarchy = "created_at"
    search_fields = ("question", "answer")
    search_help_text = "Question or answer text; a number (or #number) also finds the turn with that id."
    list_per_page = 50
    # A filtered page counts its results; counting the whole table as well is
    # one more full scan of the biggest table for a "(N total)" nobody needs.
    show_full_result_count = False
    actions = ("resume_turns", "cancel_turns", "retry_turns", "continue_turns")
    readonly_fields = (
        "status_display",
        "phase",
        "outcome",
        "stop_reason",
        "kind",
        "model",
        "steps_of_max",
        "attempts",
        "conversation_link",
        "owner_name",
        "run_link",
        "created_at",
        "started_at",
        "finished_at",
        "heartbeat_at",
        "job_id",
        "cancel_requested",
        "last_seq",
        "duration",
        "question",
        "answer",
        "evidence",
        "reasoning",
        "clarifying_question",
        "failure",
        "attempts_table",
        "usage_table",
        "timings_table",
        "approvals_table",
        "context_json",
        "meta_json",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("status_display", "phase", "outcome", "stop_reason"),
                    ("kind", "model", "steps_of_max", "attempts"),
                    ("conversation_link", "owner_name", "run_link"),
                    ("created_at", "started_at", "finished_at", "duration"),
                    ("heartbeat_at", "job_id", "cancel_requested", "last_seq"),
                )
            },
        ),
        ("Question", {"fields": ("question",)}),
        ("Answer", {"fields": ("answer", "evidence", "reasoning", "clarifying_question", "failure")}),
        ("Attempts", {"fields": ("attempts_table",)}),
        ("Usage and timings", {"fields": ("usage_table", "timings_table")}),
        ("Approvals", {"fields": ("approvals_table",)}),
        ("Context and meta", {"classes": ("collapse",), "fields": ("context_json", "meta_json")}),
    )

    # -- queries --

    def get_queryset(self, request: HttpRequest) -> QuerySet[Turn]:
        # The run of an evaluation turn, as two scalar subqueries on the
        # prediction's turn_id index instead of one query per row.
        prediction = Prediction.objects.filter(turn_id=OuterRef("pk")).order_by("pk")
        return (
            super()
            .get_queryset(request)
            .select_related("owner", "conversation")
            .annotate(
                run_pk=Subquery(prediction.values("run_id")[:1]),
                run_label=Subquery(prediction.values("run__run_id")[:1]),
            )
        )

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

    @admin.display(description="question")
    def question_short(self, turn: Turn) -> str:
        return Truncator(turn.question).chars(70)

    @admin.display(description="status", ordering="status")
    def status_display(self, turn: Turn) -> SafeString:
        return status_badge(turn.status)

    @admin.display(description="tokens")
    def tokens(self, turn: Turn) -> str:
        return fmt_tokens(turn.usage)

    @admin.display(description="cost")
    def cost(self, turn: Turn) -> str:
        return fmt_cost((turn.usage or {}).get("cost"))

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

    @admin.display(description="run")
    def run_link(self, turn: Turn) -> SafeString | str:
        run_pk = getattr(turn, "run_pk", None)
        if run_pk is None:
            return DASH
        return admin_link(Run, run_pk, turn.run_label)  # type: ignore[attr-defined]

    # -- detail page --

    @admin.display(description="steps")
    def steps_of_max(self, turn: Turn) -> str:
        return f"{turn.steps} of {turn.max_steps}"

    @admin.display(description="failure")
    def failure(self, turn: Turn) -> str:
        meta = turn.meta or {}
        cause, error = meta.get("failure_cause"), meta.get("failure_error")
        return ": ".join(str(p) for p in (cause, error) if p) or DASH

    @admin.display(description="archived attempts")
    def attempts_table(self, turn: Turn) -> SafeString:
        rows = [
            (
                a.get("attempt"),
                a.get("status"),
                a.get("outcome"),
                a.get("stop_reason"),
                a.get("steps"),
                fmt_tokens(a.get("usage")),
                fmt_cost((a.get("usage") or {}).get("cost")),
                fmt_ms((a.get("timings") or {}).get("total_ms")),
                ": ".join(str(p) for p in (a.get("failure_cause"), a.get("failure_error")) if p),
                Truncator(a.get("answer") or "").chars(200),
            )
            for a in (turn.meta or {}).get("attempts", [])
        ]
        return html_table(
            (
                "attempt",
                "status",
                "outcome",
                "stop reason",
                "steps",
                "tokens",
                "cost",
                "duration",
                "failure",
                "answer",
            ),
            rows,
            empty="none: this is the turn's first attempt",
        )

    @admin.display(description="usage")
    def usage_table(self, turn: Turn) -> SafeString:
        usage = turn.usage or {}
        if not usage:
            return format_html("<span>{}</span>", DASH)

        def row(name: str, u: dict[str, Any]) -> tuple[Any, ...]:
            return (
                name,
                u.get("calls", 0),
                u.get("unknown_calls", 0),
                f"{int(u.get('input_tokens') or 0):,}",
                f"{int(u.get('output_tokens') or 0):,}",
                fmt_cost(u.get("cost")),
            )

        by_model = sorted((usage.get("by_model") or {}).items())
        rows = [row("all models", usage)] + [row(m, u) for m, u in by_model]
        return html_table(
            ("model", "calls", "calls with unknown usage", "input tokens", "output tokens", "cost"), rows
        )

    @admin.display(description="timings")
    def timings_table(self, turn: Turn) -> SafeString:
        timings = sorted((turn.timings or {}).items())
        return html_table(("timing", "value"), [(k, fmt_ms(v)) for k, v in timings])

    @admin.display(description="approvals")
    def approvals_table(self, turn: Turn) -> SafeString:
        rows = [
            (
                admin_link(Approval, a.pk, f"#{a.pk}"),
                (a.tool_call or {}).get("name", ""),
                a.status,
                a.decided_by.get_username() if a.decided_by else "",
                a.decided_at,
                a.deadline,
                a.created_at,
            )
            for a in turn.approvals.select_related("decided_by").order_by("created_at")
        ]
        if not rows:
            return format_html("<span>{}</span>", "none")
        return format_html(
            "{}<p>{}</p>",
            html_table(
                ("approval", "tool", "status", "decided by", "decided at", "deadline", "created"), rows
            ),
            admin_link(
                Approval,
                None,
                "approve or reject them in the approval list",
                query=f"turn__id__exact={turn.pk}",
            ),
        )

    @admin.display(description="context")
    def context_json(self, turn: Turn) -> SafeString:
        return json_block(turn.context)

    @admin.display(description="meta")
    def meta_json(self, turn: Turn) -> SafeString:
        return json_block(turn.meta)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Turn | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context["event_log"] = self._event_log(request, obj)
            context["turn_actions"] = self._available_actions(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _event_log(self, request: HttpRequest, turn: Turn) -> dict[str, Any]:
        """One page of the turn's event log, read by seq range.

        Seqs are 1…``last_seq`` with no gap (``event_append_many``), so page
        ``p`` is ``seq`` in ((p-1)·n, p·n]: no COUNT, no OFFSET — one indexed
        range read whatever the log's length.
        """
        pages = max(1, math.ceil(turn.last_seq / EVENTS_PER_PAGE))
        raw = request.GET.get("events_page", "1")
        page = pages if raw == "last" else (int(raw) if raw.isdigit() else 1)
        page = min(max(page, 1), pages)
        events = events_after(turn_id=turn.pk, after=(page - 1) * EVENTS_PER_PAGE, limit=EVENTS_PER_PAGE)
        rows = []
        for event in events:
            data = event.data if isinstance(event.data, dict) else {"value": event.data}
            text = json.dumps(data, ensure_ascii=False, sort_keys=True, default=str)
            rows.append(
                {
                    "seq": event.seq,
                    "at": event.created_at,
                    "type": event.type,
                    "attempt": data.get("attempt", ""),
                    "step": data.get("step", ""),
                    "summary": Truncator(text).chars(160),
                    "full": json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True, default=str)
                    if len(text) > 160
                    else "",
                    "terminal": event.type in TERMINAL_EVENT_TYPES,
                }
            )

        def url(p: int) -> str:
            query = request.GET.copy()
            query["events_page"] = str(p)
            return f"?{query.urlencode()}#events"

        window = sorted({1, pages, *range(max(1, page - 3), min(pages, page + 3) + 1)})
        links: list[dict[str, Any]] = []
        for i, p in enumerate(window):
            if i and p - window[i - 1] > 1:
                links.append({"gap": True})
            links.append({"page": p, "url": url(p), "current": p == page})
        return {
            "rows": rows,
            "page": page,
            "pages": pages,
            "total": turn.last_seq,
            "per_page": EVENTS_PER_PAGE,
            "first_seq": rows[0]["seq"] if rows else 0,
            "last_seq": rows[-1]["seq"] if rows else 0,
            "links": links if pages > 1 else [],
            "prev_url": url(page - 1) if page > 1 else "",
            "next_url": url(page + 1) if page < pages else "",
        }

    def _available_actions(self, request: HttpRequest, turn: Turn) -> list[dict[str, str]]:
        if not self.has_operate_permission(request):
            return []
        possible = [
            ("resume", "Resume", turn.can_resume()),
            ("cancel", "Cancel", not turn.is_terminal),
            ("retry", "Retry as a new attempt", turn.status in RETRYABLE_STATUSES),
        ]
        return [
            {"verb": verb, "label": label, "url": reverse("admin:turns_turn_act", args=[turn.pk, verb])}
            for verb, label, ok in possible
            if ok
        ]

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
                turn = service(turn_id, request.user)
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


# --- approvals -----------------------------------------------------------------


@admin.register(Approval)
class ApprovalAdmin(StaffReadOnlyAdmin):
    list_display = (
        "id",
        "turn_link",
        "turn_status",
        "tool",
        "status",
        "decided_by",
        "decided_at",
        "deadline",
        "created_at",
    )
    list_select_related = ("decided_by",)
    list_filter = ("status",)
    search_fields = ("tool_call",)
    search_help_text = "Tool call JSON (tool name, arguments); a number finds the approvals of that turn."
    date_hierarchy = "created_at"
    fields = (
        "turn_link",
        "turn_status",
        "tool",
        "status",
        "decided_by",
        "decided_at",
        "deadline",
        "created_at",
        "tool_call_json",
    )
    readonly_fields = fields
    actions = ("approve", "reject")

    @admin.action(description="Approve selected pending approvals", permissions=["operate"])
    def approve(self, request: HttpRequest, queryset: QuerySet[Approval]) -> None:
        self._decide(request, queryset.order_by("pk").values_list("pk", flat=True), approve=True)

    @admin.action(description="Reject selected pending approvals", permissions=["operate"])
    def reject(self, request: HttpRequest, queryset: QuerySet[Approval]) -> None:
        self._decide(request, queryset.order_by("pk").values_list("pk", flat=True), approve=False)

    def _decide(self, request: HttpRequest, approval_ids: Iterable[int], *, approve: bool) -> None:
        """``approval_decide`` per row, as the API does; it records the decider
        in ``approval.resolved``. An approval already decided or expired is
        reported and skipped."""
        verb = "approved" if approve else "rejected"
        done: list[str] = []
        for approval_id in list(approval_ids):
            try:
                approval = approval_decide(approval_id=approval_id, approve=approve, acting_user=request.user)
            except (StateConflict, NotFound) as exc:
                self.message_user(request, f"Approval #{approval_id} not {verb}: {exc}.", messages.WARNING)
                continue
            self.log_change(request, approval, f"{verb.capitalize()} in the admin.")
            done.append(f"#{approval_id} (turn #{approval.turn_id})")
        if done:
            self.message_user(
                request, f"{verb.capitalize()} {len(done)} approval(s): {', '.join(done)}.", messages.SUCCESS
            )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Approval]:
        return (
            super()
            .get_queryset(request)
            .select_related("decided_by")
            .annotate(
                turn_status_value=Subquery(Turn.objects.filter(pk=OuterRef("turn_id")).values("status")[:1])
            )
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Approval], search_term: str
    ) -> tuple[QuerySet[Approval], bool]:
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip().lstrip("#")
        if term.isdigit():
            found = found | queryset.filter(turn_id=int(term))
        return found, may_have_duplicates

    @admin.display(description="turn")
    def turn_link(self, approval: Approval) -> SafeString:
        return admin_link(Turn, approval.turn_id, f"#{approval.turn_id}")

    @admin.display(description="turn status")
    def turn_status(self, approval: Approval) -> SafeString:
        return status_badge(approval.turn_status_value)  # type: ignore[attr-defined]

    @admin.display(description="tool")
    def tool(self, approval: Approval) -> str:
        return str((approval.tool_call or {}).get("name", DASH))

    @admin.display(description="tool call")
    def tool_call_json(self, approval: Approval) -> SafeString:
        return json_block(approval.tool_call)

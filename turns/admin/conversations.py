"""The conversation list and page; a conversation's newest turns inline."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import Count, Max, QuerySet
from django.db.models.functions import Coalesce
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin import StaffReadOnlyAdmin, admin_link, fmt_tokens
from turns.admin.display import status_badge
from turns.models import Conversation, Turn

#: Turns shown inline on a conversation page (newest first); the rest are one click away.
TURNS_INLINE_LIMIT = 50


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
    fields = ("title", "owner", "history_mode", "turn_count", "last_activity", "created_at", "all_turns")
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

    @admin.display(description="history")
    def history_mode(self, conversation: Conversation) -> str:
        """What each turn is given of the turns before it: the
        conversation's own mode, else the setting's."""
        if conversation.history:
            return conversation.history
        return f"{settings.AGENTLAB_CHAT_HISTORY} (the AGENTLAB_CHAT_HISTORY setting)"

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

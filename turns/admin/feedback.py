"""End users' feedback in the turn admin (docs/chat-and-api.md#feedback): the
turn list's rating filter and column, and the turn page's feedback table
(every rating, its history included)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, Exists, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.safestring import SafeString

from common.admin import DASH, html_table
from turns.models import FeedbackRating, Turn, TurnFeedback


def _current(rating: str | None = None) -> QuerySet[TurnFeedback]:
    feedback = TurnFeedback.objects.filter(turn=OuterRef("pk"), current=True)
    return feedback.filter(rating=rating) if rating else feedback


class FeedbackFilter(admin.SimpleListFilter):
    """Turns by their users' current ratings: any thumbs up, any thumbs down,
    any comment, or no feedback."""

    title = "feedback"
    parameter_name = "feedback"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            (FeedbackRating.UP, "thumbs up"),
            (FeedbackRating.DOWN, "thumbs down"),
            ("comment", "with a comment"),
            ("none", "no feedback"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Turn]) -> QuerySet[Turn]:
        value = self.value()
        if value in FeedbackRating.values:
            return queryset.filter(Exists(_current(value)))
        if value == "comment":
            return queryset.filter(Exists(_current().exclude(comment="")))
        if value == "none":
            return queryset.exclude(Exists(_current()))
        return queryset


def _count(rating: str) -> Coalesce:
    counted = _current(rating).order_by().values("turn").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def with_feedback_counts(queryset: QuerySet[Turn]) -> QuerySet[Turn]:
    """``queryset`` with ``feedback_up`` and ``feedback_down``: the current
    ratings of each kind (one subquery each, no N+1)."""
    return queryset.annotate(feedback_up=_count(FeedbackRating.UP), feedback_down=_count(FeedbackRating.DOWN))


def feedback_counts_text(turn: Turn) -> str:
    """``up 2 · down 1`` for the list column, a dash without feedback."""
    up, down = getattr(turn, "feedback_up", 0), getattr(turn, "feedback_down", 0)
    return f"up {up} · down {down}" if up or down else DASH


def feedback_table(turn: Turn) -> SafeString:
    """Every rating of ``turn``, newest first: who, the rating, the comment,
    when, and whether it is that user's current one or an earlier one."""
    rows = [
        (
            f.user.get_username(),
            "thumbs up" if f.rating == FeedbackRating.UP else "thumbs down",
            f.comment or DASH,
            f.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            "current" if f.current else "replaced",
        )
        for f in turn.feedback.select_related("user").order_by("-created_at", "-pk")
    ]
    return html_table(("user", "rating", "comment", "at", ""), rows, empty="none")


__all__ = ["FeedbackFilter", "feedback_counts_text", "feedback_table", "with_feedback_counts"]

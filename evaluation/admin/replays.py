"""The replay admin: the replays ``manage.py replay_turns`` wrote, and on a
replay's page its turns beside their originals — each original and its
replay linked to their turn pages, their answers, the verdict (identical,
diverged at step *k*, new answer) and, for scored originals, correct before →
after (docs/evaluating.md#replaying-recorded-turns). Read-only: replays are
written by the command. The turn page of either turn shows its event log;
a replay turn's ``replay.divergence`` event says where it left the path.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin import DASH, StaffReadOnlyAdmin, admin_link, fmt_pct, html_table, json_block, subquery_count
from evaluation.models import Replay, ReplayItem, ReplayVerdict, Run
from evaluation.replay.verdicts import summary_lines
from turns.models import Turn

#: characters of an answer shown in the turns table
ANSWER_CHARS = 80


def _short(text: str) -> str:
    return text if len(text) <= ANSWER_CHARS else text[: ANSWER_CHARS - 1] + "…"


def _verdict(item: ReplayItem) -> str:
    if item.completed_at is None:
        return "not finished"
    if item.verdict == ReplayVerdict.DIVERGED:
        return f"diverged at step {item.divergence_step}"
    return "new answer" if item.verdict == ReplayVerdict.NEW_ANSWER else "identical"


def _correct(value: bool | None) -> str:
    return DASH if value is None else ("yes" if value else "no")


def _turn_cell(turn: Turn) -> SafeString:
    answer = turn.answer or turn.clarifying_question or turn.stop_reason or turn.status
    return format_html("{} {}", admin_link(Turn, turn.pk, f"#{turn.pk}"), _short(answer))


@admin.register(Replay)
class ReplayAdmin(StaffReadOnlyAdmin):
    """Replays, newest first; a replay's page lists its turns beside their originals."""

    list_display = ("name", "source", "turn_count", "identical", "status", "created_at")
    list_filter = ("status", "live")
    search_fields = ("name",)
    readonly_fields = (
        "name",
        "source",
        "args_match",
        "live",
        "status",
        "created_at",
        "finished_at",
        "variant_block",
        "summary_text",
        "turns_table",
    )
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Replay]:
        return super().get_queryset(request).annotate(n_items=subquery_count(ReplayItem, "replay"))

    @admin.display(description="turns")
    def turn_count(self, replay: Replay) -> int:
        return int(getattr(replay, "n_items", 0))

    @admin.display(description="identical")
    def identical(self, replay: Replay) -> str:
        return fmt_pct((replay.summary or {}).get("identical_share"))

    @admin.display(description="recorded turns")
    def source(self, replay: Replay) -> SafeString | str:
        if replay.source_run_id is not None:
            return format_html(
                "predictions of run {}", admin_link(Run, replay.source_run_id, replay.source_run)
            )
        filters = (replay.selection or {}).get("turns") or {}
        return "chat turns" + (f" ({', '.join(f'{k} {v}' for k, v in filters.items())})" if filters else "")

    @admin.display(description="variant")
    def variant_block(self, replay: Replay) -> SafeString:
        return json_block(replay.variant)

    @admin.display(description="figures")
    def summary_text(self, replay: Replay) -> SafeString | str:
        if not replay.summary:
            return DASH
        return format_html("<pre>{}</pre>", "\n".join(summary_lines(replay.summary)))

    @admin.display(description="turns beside their originals")
    def turns_table(self, replay: Replay) -> SafeString:
        items = replay.items.select_related("original", "turn").order_by("position")
        return html_table(
            ["#", "original", "replay", "verdict", "correct (original → replay)"],
            (
                (
                    item.position,
                    _turn_cell(item.original),
                    _turn_cell(item.turn),
                    _verdict(item),
                    f"{_correct(item.original_correct)} → {_correct(item.correct)}"
                    if item.original_correct is not None
                    else DASH,
                )
                for item in items
            ),
        )

"""The approval list: approve or reject pending tool calls, as the API does."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib import admin, messages
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.utils.safestring import SafeString

from common.admin import DASH, StaffReadOnlyAdmin, admin_link, json_block
from common.errors import NotFound, StateConflict
from turns.admin.display import status_badge
from turns.models import Approval, Turn
from turns.services import approval_decide


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
                approval = approval_decide(
                    approval_id=approval_id, approve=approve, acting_user=self.acting_user(request)
                )
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

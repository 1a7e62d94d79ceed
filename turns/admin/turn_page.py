"""One turn's admin page: its tables (attempts, usage, timings, approvals), its
raw JSON, the action buttons, and one page of its event log.

``TurnPageAdmin`` holds the read-only pieces of the page; ``TurnAdmin``
(``turns.admin.turns``) adds the list, the filters and the actions. The
template is ``templates/admin/turns/turn/change_form.html``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from common.admin import (
    DASH,
    StaffReadOnlyAdmin,
    admin_link,
    fmt_cost,
    fmt_ms,
    fmt_tokens,
    html_table,
    json_block,
)
from turns.admin.display import review_text, stop_reason_text, usage_html
from turns.attempts import last_review, turn_attempts, usage_total
from turns.llm_calls import LLMCall, turn_llm_calls
from turns.meta import meta_failure, meta_setup
from turns.models import TERMINAL_EVENT_TYPES, Approval, Turn, TurnEvent
from turns.selectors import events_after, turn_history_data
from turns.services import RETRYABLE_STATUSES

#: Events shown per page of a turn's event log.
EVENTS_PER_PAGE = 100


class TurnPageAdmin(StaffReadOnlyAdmin):
    """The read-only fields of a turn's page and its event log (not registered:
    ``TurnAdmin`` is)."""

    @admin.display(description="steps")
    def steps_of_max(self, turn: Turn) -> str:
        return f"{turn.steps} of {turn.max_steps}"

    @admin.display(description="cancel requested")
    def cancel_flag(self, turn: Turn) -> str:
        """Whether a cancel was asked for, in words (not the admin's red ✖,
        which reads as an error on every turn)."""
        return "yes" if turn.cancel_requested else "no"

    @admin.display(description="failure")
    def failure(self, turn: Turn) -> str:
        cause, error = meta_failure(turn.meta)
        if cause == "length":
            return f"truncated — {error or 'the final answer was cut off by the output-token limit'}"
        return ": ".join(str(p) for p in (cause, error) if p) or DASH

    @admin.display(description="stop reason", ordering="stop_reason")
    def stop_reason_display(self, turn: Turn) -> str:
        return stop_reason_text(turn.stop_reason)

    @admin.display(description="review")
    def review_display(self, turn: Turn) -> str:
        return review_text(last_review(turn))

    @admin.display(description="system prompt")
    def setup_prompt(self, turn: Turn) -> SafeString | str:
        """The system prompt the current attempt started with, as sent."""
        setup = meta_setup(turn.meta)
        if setup is None:
            return "not recorded (the turn has not started, or started before prompts were recorded)"
        return format_html(
            '<pre class="al-system-prompt" style="{}">{}</pre>',
            "max-height:24em;overflow:auto;white-space:pre-wrap;margin:0;font-size:12px",
            setup["system_prompt"],
        )

    @admin.display(description="tools offered")
    def setup_tools(self, turn: Turn) -> SafeString | str:
        """The tools the current attempt offered the model, in order: those
        its system prompt names (each step's own, under "What the model saw")."""
        setup = meta_setup(turn.meta)
        if setup is None:
            return DASH
        calls = (
            "native tool calls"
            if setup["native_tools"]
            else "tool calls as JSON in the text, the tools the system prompt names; each step may be "
            "held to some of them by its response schema (see What the model saw)"
        )
        table = html_table(
            ("tool", "description"),
            [(t["name"], t["description"]) for t in setup["tools"]],
            empty="no tools",
        )
        return format_html("<p>Attempt {}, {}.</p>{}", setup["attempt"], calls, table)

    @admin.display(description="history")
    def history_display(self, turn: Turn) -> SafeString | str:
        """What the turn was given of its conversation (its ``history``
        event; a replay turn has its original's, with no conversation of its
        own): the earlier turns, their tokens within the budget, the ones
        left out and why; the messages themselves open below."""
        if turn.conversation_id is None and turn.replay_of_id is None:
            return "none: the turn belongs to no conversation"
        data = turn_history_data(turn_id=turn.pk)
        if data is None:
            return "none recorded: the first turn of its conversation, or it has not started"
        given = ", ".join(f"#{t}" for t in data.get("turns") or []) or "none"
        dropped = html_table(
            ("turn", "position", "why left out"),
            [
                (admin_link(Turn, d.get("turn"), f"#{d.get('turn')}"), d.get("position"), _dropped_reason(d))
                for d in data.get("dropped") or []
            ],
            empty="none",
        )
        messages = format_html_join(
            "",
            '<div class="al-history-msg"><b>{}</b><pre style="{}">{}</pre></div>',
            (
                (m.get("role", ""), "white-space:pre-wrap;margin:0 0 .5em", _message_text(m))
                for m in data.get("messages") or []
            ),
        )
        return format_html(
            '<p class="al-history">Mode {}: earlier turns {} — {} tokens ({}) of a budget of {} '
            "(context window {}, reply {}).</p><p>Left out:</p>{}"
            "<details><summary>The {} messages given before the question</summary>{}</details>",
            data.get("mode"),
            given,
            data.get("tokens"),
            data.get("counted"),
            data.get("budget"),
            data.get("window"),
            data.get("reply_tokens"),
            dropped,
            len(data.get("messages") or []),
            messages,
        )

    @admin.display(description="archived attempts")
    def attempts_table(self, turn: Turn) -> SafeString:
        rows = [
            (
                a.number,
                a.status,
                a.outcome,
                a.stop_reason,
                a.steps,
                fmt_tokens(a.usage),
                fmt_cost((a.usage or {}).get("cost")),
                fmt_ms((a.timings or {}).get("total_ms")),
                ": ".join(str(p) for p in (a.failure_cause, a.failure_error) if p),
                Truncator(a.answer or "").chars(200),
                f"{a.reason} / {a.ended_by}",
            )
            for a in turn_attempts(turn)
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
                "started / ended by",
            ),
            rows,
            empty="none: this is the turn's first attempt",
        )

    @admin.display(description="usage (all attempts)")
    def usage_table(self, turn: Turn) -> SafeString:
        return usage_html(usage_total(turn))

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
            context["llm_calls"] = [call_view(call) for call in turn_llm_calls(obj.pk)]
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
        rows = [event_row(event) for event in events]

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
            "groups": step_groups(rows),
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


def _dropped_reason(dropped: dict[str, Any]) -> str:
    reason = str(dropped.get("reason") or "")
    return "over the token budget (the oldest go first)" if reason == "budget" else reason


def _message_text(message: dict[str, Any]) -> str:
    """A history message's text, its tool calls as JSON after it."""
    text = (
        message.get("content")
        if isinstance(message.get("content"), str)
        else pretty_json(message.get("content"))
    )
    if message.get("tool_calls"):
        text = f"{text}\n{pretty_json(message['tool_calls'])}".strip()
    return str(text)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON (what the turn page shows, never a repr)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def event_row(event: TurnEvent) -> dict[str, Any]:
    """One event of the log as the page shows it: a one-line summary and its
    data pretty-printed."""
    data = event.data if isinstance(event.data, dict) else {"value": event.data}
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, default=str)
    return {
        "seq": event.seq,
        "at": event.created_at,
        "type": event.type,
        "attempt": data.get("attempt", ""),
        "step": data.get("step", ""),
        "summary": Truncator(text).chars(160),
        "full": pretty_json(data),
        "terminal": event.type in TERMINAL_EVENT_TYPES,
    }


def step_groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The log read as a tree: consecutive events of one attempt's step under
    that step (its completion, tool calls, results), the others alone, in seq
    order. A step's ``llm.delta`` events are folded into one line."""
    groups: list[dict[str, Any]] = []
    for row in rows:
        key = (row["attempt"], row["step"]) if row["step"] not in ("", None) else None
        if key is not None and groups and groups[-1]["key"] == key:
            group = groups[-1]
        else:
            group = {"key": key, "attempt": row["attempt"], "step": row["step"], "rows": [], "deltas": 0}
            groups.append(group)
        if row["type"] == "llm.delta":
            group["deltas"] += 1
        else:
            group["rows"].append(row)
    return groups


def call_view(call: LLMCall) -> dict[str, Any]:
    """One LLM call as the turn page's "What the model saw" shows it."""
    request = call.request or {}
    options = {key: request.get(key) for key in ("max_tokens", "temperature") if key in request}
    return {
        "call": call,
        "recorded": call.request is not None,
        "messages": [
            {
                "role": str(m.get("role", "")),
                "content": m.get("content")
                if isinstance(m.get("content"), str)
                else pretty_json(m.get("content")),
                "extra": pretty_json({k: v for k, v in m.items() if k not in ("role", "content")})
                if set(m) - {"role", "content"}
                else "",
            }
            for m in request.get("messages") or []
        ],
        "tool_names": call.tool_names,
        "tools_json": pretty_json(request.get("tools")) if request.get("tools") else "",
        "schema_json": pretty_json(request.get("response_schema")) if request.get("response_schema") else "",
        "options": options,
        "reply_calls": [pretty_json(c) for c in call.reply_calls],
    }

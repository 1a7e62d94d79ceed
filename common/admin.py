"""Admin helpers every app's admin shares: formatting, small HTML tables, links,
the read-only staff base class and a distinct-values list filter.

Nothing here knows a model of an app; the turn admin (``turns.admin``) and the
evaluation admin (``evaluation.admin``) build their pages from these pieces.
Every helper escapes what it is given unless it is already safe HTML.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import Count, IntegerField, Model, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

#: What a cell shows for "no value" (never ``0`` or ``$0`` for "we do not know").
DASH = "—"
_PRE_STYLE = "max-height:24em;overflow:auto;white-space:pre-wrap;margin:0;font-size:12px"


# --- formatting ----------------------------------------------------------------


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


def fmt_pct(value: float | None) -> str:
    """A fraction in 0…1 as a percentage with one decimal (``0.5`` → ``50.0%``), or a dash."""
    return DASH if value is None else f"{value * 100:.1f}%"


# --- HTML pieces ---------------------------------------------------------------


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
    """A link to an object's admin change page (or to a changelist when ``pk`` is None).

    ``obj_or_model`` is a model class or instance (only its ``_meta`` is read);
    ``query`` is an already url-encoded query string, without the ``?``.
    """
    opts = obj_or_model._meta
    if pk is None:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    else:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[pk])
    return format_html('<a href="{}{}">{}</a>', url, f"?{query}" if query else "", text)


def url_query(**params: Any) -> str:
    """``admin_link``'s ``query`` from keyword arguments (url-encoded, no ``?``)."""
    return urlencode(params)


def badge(text: str, colour: str) -> SafeString:
    """A coloured dot and ``text`` (a status), in ``colour`` (any CSS colour)."""
    return format_html('<span style="color:{};font-weight:600">&#9679; {}</span>', colour, text)


# --- queries -------------------------------------------------------------------


def subquery_count(model: type[Model], fk: str, **filters: Any) -> Coalesce:
    """``COUNT(*)`` of ``model`` rows whose ``fk`` points at the outer row, as a
    scalar subquery (0 when none): one per column, never a join that multiplies rows."""
    rows = (
        model._default_manager.filter(**{fk: OuterRef("pk")}, **filters)
        .order_by()
        .values(fk)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), 0)


# --- access and filters --------------------------------------------------------


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

    @staticmethod
    def acting_user(request: HttpRequest) -> User:
        """The staff user behind an admin action (the admin site only lets staff in,
        so an anonymous user here is a wiring error, not an input)."""
        user = request.user
        if not isinstance(user, User):
            raise PermissionDenied("admin actions need a logged-in staff user")
        return user

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

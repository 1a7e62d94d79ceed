"""The admin site as a whole: its name, the users list, and what it leaves out.

Found by the admin's autodiscovery (``config`` is an app; it comes last in
``INSTALLED_APPS``, so every other app has registered its models first):

- the site says AgentLab (header, title, index), not "Django administration";
- django-celery-beat's models are left off the index and the app list: their
  rows are written by AgentLab (the sweeper's and each schedule's beat entry,
  docs/comparing.md: "edit the schedule, never its periodic task"); their
  pages stay reachable, so the schedule form's "+" beside a crontab or an
  interval still adds one;
- the users list shows people by default: the per-run system users
  (``evaluation.run.lifecycle``: inactive, no usable password, named
  ``eval-<hex>-<run id>``, one per run) are marked and sit behind the
  "account" filter's other choices.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

admin.site.site_header = "AgentLab administration"
admin.site.site_title = "AgentLab admin"
admin.site.index_title = "AgentLab"

#: The app whose models AgentLab writes and people must not edit.
BEAT_APP = "django_celery_beat"


def _hide_from_index(request: HttpRequest) -> bool:
    return False


for _model, _model_admin in list(admin.site._registry.items()):
    if _model._meta.app_label == BEAT_APP:
        _model_admin.has_module_permission = _hide_from_index  # type: ignore[method-assign]

#: A run's system user (``evaluation.run.lifecycle._system_user``).
SYSTEM_USERS = Q(username__startswith="eval-", is_active=False)


class AccountFilter(admin.SimpleListFilter):
    """People (the default), run system users, or every account."""

    title = "account"
    parameter_name = "account"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("people", "people"), ("system", "run system users"), ("all", "all")]

    def choices(self, changelist: Any) -> Any:
        # "people" is chosen when the parameter is absent: no "All" entry of its own
        for value, label in self.lookup_choices:
            yield {
                "selected": (self.value() or "people") == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value() or "people"
        if value == "people":
            return queryset.exclude(SYSTEM_USERS)
        if value == "system":
            return queryset.filter(SYSTEM_USERS)
        return queryset


class AgentLabUserAdmin(UserAdmin):
    """Django's user admin, with the run system users kept apart (module docstring)."""

    list_display = ("username", "account", "email", "is_staff", "is_active", "last_login")
    list_filter = (AccountFilter, "is_staff", "is_superuser", "is_active", "groups")

    @admin.display(description="kind")
    def account(self, user: Any) -> str:
        is_system = user.username.startswith("eval-") and not user.is_active
        return "run system user" if is_system else "person"


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, AgentLabUserAdmin)

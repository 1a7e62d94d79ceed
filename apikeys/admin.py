"""API keys in the admin: created here, shown once, revocable."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from .models import ApiKey
from .services import apikey_create


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Adding a key shows the raw key once in a message; afterwards only its
    prefix is visible. A key's name and secret are not edited; its scope (read, or
    run) may be changed and the key revoked."""

    list_display = ("name", "key_prefix", "scope", "created_by", "created_at", "last_used_at", "revoked")
    list_filter = ("revoked", "scope")
    search_fields = ("name", "prefix")
    fields = ("name", "scope", "revoked")
    readonly_fields = ("key_prefix", "created_by", "created_at", "last_used_at")

    @admin.display(description="key")
    def key_prefix(self, key: ApiKey) -> str:
        return f"al_{key.prefix}_…"

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        return (
            ("name", "scope")
            if obj is None
            else ("name", "key_prefix", "scope", "created_by", "created_at", "last_used_at", "revoked")
        )

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        return () if obj is None else ("name", *self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        key, raw = apikey_create(name=obj.name, created_by=request.user, scope=obj.scope)  # type: ignore[arg-type]
        obj.pk, obj.prefix, obj.digest = key.pk, key.prefix, key.digest
        obj.created_at, obj.created_by = key.created_at, key.created_by
        messages.warning(
            request, f"New API key “{key.name}”: {raw} — copy it now; it will not be shown again."
        )

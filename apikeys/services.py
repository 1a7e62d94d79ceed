"""Creating and checking program API keys."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from .models import ApiKey

#: ``last_used_at`` is written at most this often per key, so reads do not turn into writes.
LAST_USED_EVERY = timedelta(minutes=1)


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def apikey_create(*, name: str, created_by: User | None = None, scope: str = "read") -> tuple[ApiKey, str]:
    """Create a key with ``scope`` (``apikeys.models.ApiKeyScope``: ``read`` or
    ``run``); return ``(row, raw key)``. The raw key (``al_<12 hex>_<43 chars>``)
    exists only in the return value: show it once, it cannot be recovered."""
    prefix = secrets.token_hex(6)
    raw = f"al_{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        name=name, prefix=prefix, digest=_digest(raw), created_by=created_by, scope=scope
    )
    return key, raw


def apikey_authenticate(*, raw: str | None) -> ApiKey | None:
    """The live key matching ``raw``, or ``None`` (malformed, unknown, revoked)."""
    if not raw or not raw.startswith("al_") or raw.count("_") < 2:
        return None
    prefix = raw[3:].split("_", 1)[0]
    key = ApiKey.objects.filter(prefix=prefix, revoked=False).first()
    if key is None or not hmac.compare_digest(key.digest, _digest(raw)):
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_EVERY:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key

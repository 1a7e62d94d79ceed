"""The project's store of cached LLM completions (``LLMCacheEntry``), injected
into ``agentlab.agent.providers.caching.CachingProvider``
(docs/evaluating.md#caching-llm-calls), and ``cache_clear``'s deletion."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from agentlab.agent.providers.caching import CachePolicy, CachingProvider, parse_expiry
from agentlab.agent.types import LLMProvider
from common.db import DatabaseThreads
from turns.models import LLMCacheEntry


def cache_lookup(key: str) -> dict[str, Any] | None:
    """The stored completion of ``key`` when there and not expired."""
    now = timezone.now()
    row = (
        LLMCacheEntry.objects.filter(key=key)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .values_list("completion", flat=True)
        .first()
    )
    return dict(row) if row is not None else None


def cache_store(
    key: str, *, request: dict[str, Any], completion: dict[str, Any], model: str, expiry: timedelta | None
) -> None:
    """Store one entry; an entry already there for ``key`` is kept (an
    ``INSERT ... ON CONFLICT DO NOTHING`` through ``bulk_create``) unless it
    has expired, when it is replaced."""
    now = timezone.now()
    LLMCacheEntry.objects.filter(key=key, expires_at__lte=now).delete()
    entry = LLMCacheEntry(
        key=key,
        model=model[:200],
        request=request,
        completion=completion,
        expires_at=now + expiry if expiry is not None else None,
    )
    LLMCacheEntry.objects.bulk_create([entry], ignore_conflicts=True)


class DatabaseCallCache:
    """``CallCacheStore`` on ``LLMCacheEntry``: each call runs on a small
    pool of database threads of its own (``common.db.DatabaseThreads``),
    closed by ``close()``."""

    def __init__(self, max_workers: int = 2) -> None:
        self._db = DatabaseThreads(max_workers=max_workers)

    async def get(self, key: str) -> dict[str, Any] | None:
        return await self._db.run(cache_lookup, key)

    async def put(
        self,
        key: str,
        *,
        request: dict[str, Any],
        completion: dict[str, Any],
        model: str,
        expiry: timedelta | None,
    ) -> None:
        await self._db.run(
            cache_store, key, request=request, completion=completion, model=model, expiry=expiry
        )

    def close(self) -> None:
        self._db.close()


class _ClosingCachingProvider(CachingProvider):
    """A ``CachingProvider`` on a ``DatabaseCallCache`` that it closes too."""

    async def aclose(self) -> None:
        await super().aclose()
        store = self.store
        if isinstance(store, DatabaseCallCache):
            store.close()


def cached_provider(provider: LLMProvider, policy: CachePolicy | None) -> LLMProvider:
    """``provider`` wrapped in a ``CachingProvider`` on the database when
    ``policy`` is given, else ``provider`` itself."""
    if policy is None:
        return provider
    return _ClosingCachingProvider(provider, DatabaseCallCache(), policy)


def chat_cache_policy() -> CachePolicy | None:
    """The chat turns' cache policy (``AGENTLAB_CHAT_LLM_CACHE``): ``None``
    (no cache) unless the setting is ``on`` (never expires) or an age such as
    ``7d`` (checked when the settings load)."""
    value = str(getattr(settings, "AGENTLAB_CHAT_LLM_CACHE", "") or "")
    if value in ("", "off"):
        return None
    if value == "on":
        return CachePolicy()
    return CachePolicy(expiry=parse_expiry(value, option="AGENTLAB_CHAT_LLM_CACHE"))


def cache_clear(*, older_than: timedelta | None = None, model: str | None = None) -> int:
    """Delete cached completions: all, or those created more than
    ``older_than`` ago, and/or of ``model``. Returns how many were deleted."""
    rows = LLMCacheEntry.objects.all()
    if older_than is not None:
        rows = rows.filter(created_at__lt=timezone.now() - older_than)
    if model:
        rows = rows.filter(model=model)
    deleted, _ = rows.delete()
    return int(deleted)

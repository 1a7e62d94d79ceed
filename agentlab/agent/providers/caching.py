"""A cache of LLM calls: ``CachingProvider`` wraps any ``LLMProvider`` and
serves a completion stored earlier for the same request instead of asking
again (docs/evaluating.md#caching-llm-calls). Idea from Inspect AI's
``CachePolicy(expiry)`` and promptfoo's / DeepEval's call caches.

The key (``request_key``) is the SHA-256 hex of the canonical JSON
(``canonical_json``: keys sorted, no spaces, UTF-8) of everything that
decides a completion: the provider's name and base URL, the model, the full
message list, the tools and their schemas, the response schema and the form
it is sent in (``structured_output``; the grammar of a local model is made
from the schema), max tokens, temperature, the provider's ``seed`` and its
other sampling options (``sampling_options``, a dict) when it has them.

A request with temperature > 0 and no seed is a sample: it is never served
from the cache (nor stored) unless the policy says ``sampled``. A hit returns
the stored completion — text, tool calls, finish reason, usage as reported
then — marked ``cached=True`` (its event says ``cached: true``;
``agentlab.agent.usage`` counts it apart and charges it nothing). A miss
calls the wrapped provider and hands the completion to the store on a
background task: a write never delays the turn, and one that fails is
logged and dropped. Two concurrent misses on one key both call; the store
keeps one entry (the first written).

The store is injected (``CallCacheStore``): this module knows no database;
``turns.llm_cache.DatabaseCallCache`` is the project's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from agentlab.agent.seeding import sampling_seed
from agentlab.agent.types import Completion, LLMProvider

if TYPE_CHECKING:
    from agentlab.agent.streaming import OnDelta

logger = logging.getLogger(__name__)

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_expiry(text: str, *, option: str = "--cache-expiry") -> timedelta:
    """``"30s"``, ``"15m"``, ``"12h"``, ``"7d"``, ``"2w"`` as a ``timedelta``
    (a positive whole number and one unit). ``ValueError`` naming ``option``
    for anything else (``"7"``, ``"0d"``, ``"1.5d"``, ``"7 days"``)."""
    match = _DURATION.match(text or "")
    if not match or int(match.group(1)) < 1:
        raise ValueError(
            f"{option} must be a positive whole number and a unit s, m, h, d or w (e.g. 7d), got {text!r}"
        )
    return timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


@dataclass(frozen=True)
class CachePolicy:
    """How a run uses the cache: ``expiry`` — how long a stored completion is
    served (``None``: until cleared); ``sampled`` — serve and store requests
    with temperature > 0 and no seed too (``--cache-sampled``)."""

    expiry: timedelta | None = None
    sampled: bool = False

    def to_dict(self) -> dict[str, Any]:
        """``{"expiry_s": int | None, "sampled": bool}`` (a run's config)."""
        return {
            "expiry_s": int(self.expiry.total_seconds()) if self.expiry else None,
            "sampled": self.sampled,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CachePolicy:
        expiry_s = data.get("expiry_s")
        return cls(
            expiry=timedelta(seconds=int(expiry_s)) if expiry_s else None, sampled=bool(data.get("sampled"))
        )


class CallCacheStore(Protocol):
    """Where cached completions live (injected into ``CachingProvider``).

    ``get`` returns the stored ``Completion.to_dict()`` of ``key`` when one
    is there and not expired, else ``None``. ``put`` stores one entry and
    keeps an existing one for the same key; ``expiry`` ``None`` never
    expires. Either may raise: the provider then treats it as a miss / a
    dropped write."""

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def put(
        self,
        key: str,
        *,
        request: dict[str, Any],
        completion: dict[str, Any],
        model: str,
        expiry: timedelta | None,
    ) -> None: ...


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: keys sorted, no insignificant spaces,
    non-ASCII kept (the same value always gives the same text)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def request_key(request: dict[str, Any]) -> str:
    """SHA-256 hex (64 characters) of ``canonical_json(request)``."""
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


def is_sampled(request: dict[str, Any]) -> bool:
    """Whether ``request`` samples: temperature > 0 and no seed. An unset
    temperature is the endpoint's default and is not counted as sampling."""
    temperature = request.get("temperature")
    return temperature is not None and float(temperature) > 0 and request.get("seed") is None


class CachingProvider:
    """An ``LLMProvider`` that serves ``inner``'s completions from ``store``
    under ``policy`` (module doc). It has ``inner``'s ``name``, ``model``,
    ``native_tools``, ``constrained_decoding``, ``streaming`` and any other
    attribute (read through). ``hits`` / ``misses`` / ``write_failures``
    count this provider's calls. ``aclose()`` waits for pending writes, then
    closes ``inner``."""

    def __init__(self, inner: LLMProvider, store: CallCacheStore, policy: CachePolicy | None = None) -> None:
        self.inner = inner
        self.store = store
        self.policy = policy or CachePolicy()
        self.hits = 0
        self.misses = 0
        self.write_failures = 0
        self._writes: set[asyncio.Task[None]] = set()

    def __getattr__(self, name: str) -> Any:
        # only called for attributes this class does not have: the inner provider's
        return getattr(self.__dict__["inner"], name)

    # read and written through: the inner provider may change them (the
    # OpenAI provider switches constrained decoding off when refused)
    @property
    def name(self) -> str:
        return self.inner.name

    @name.setter
    def name(self, value: str) -> None:
        self.inner.name = value

    @property
    def model(self) -> str:
        return self.inner.model

    @model.setter
    def model(self, value: str) -> None:
        self.inner.model = value

    @property
    def native_tools(self) -> bool:
        return self.inner.native_tools

    @native_tools.setter
    def native_tools(self, value: bool) -> None:
        self.inner.native_tools = value

    @property
    def constrained_decoding(self) -> bool:
        return self.inner.constrained_decoding

    @constrained_decoding.setter
    def constrained_decoding(self, value: bool) -> None:
        self.inner.constrained_decoding = value

    def cache_request(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        max_tokens: int | None,
        temperature: float | None,
        response_schema: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The request as it is keyed and stored (module doc for the parts)."""
        inner = self.inner
        return {
            "provider": inner.name,
            "base_url": getattr(inner, "base_url", None),
            "model": inner.model,
            "messages": messages,
            "tools": tools or None,
            "response_schema": response_schema,
            "structured_output": getattr(inner, "structured_output", None) if response_schema else None,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": sampling_seed() if sampling_seed() is not None else getattr(inner, "seed", None),
            "sampling": dict(getattr(inner, "sampling_options", None) or {}),
        }

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        response_schema: dict[str, Any] | None = None,
        on_delta: OnDelta | None = None,
    ) -> Completion:
        """The stored completion for this request (``cached=True``, no
        request made), else ``inner``'s, stored in the background."""
        request = self.cache_request(
            messages, tools, max_tokens=max_tokens, temperature=temperature, response_schema=response_schema
        )
        usable = self.policy.sampled or not is_sampled(request)
        key = request_key(request) if usable else ""
        if usable:
            stored = await self._lookup(key)
            if stored is not None:
                self.hits += 1
                return replace(Completion.from_dict(stored), cached=True)
        self.misses += 1
        kwargs: dict[str, Any] = {"on_delta": on_delta} if on_delta is not None else {}
        completion = await self.inner.complete(
            messages,
            tools,
            max_tokens=max_tokens,
            temperature=temperature,
            response_schema=response_schema,
            **kwargs,
        )
        if usable:
            task = asyncio.create_task(self._write(key, request, completion))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)
        return completion

    async def _lookup(self, key: str) -> dict[str, Any] | None:
        try:
            return await self.store.get(key)
        except Exception:  # a store that fails is a miss, never a failed turn
            logger.warning("LLM cache lookup failed; calling the model", exc_info=True)
            return None

    async def _write(self, key: str, request: dict[str, Any], completion: Completion) -> None:
        try:
            await self.store.put(
                key,
                request=request,
                completion=completion.to_dict(),
                model=completion.model or self.inner.model,
                expiry=self.policy.expiry,
            )
        except Exception:  # a write never fails the turn
            self.write_failures += 1
            logger.warning("LLM cache write failed; the completion is not cached", exc_info=True)

    async def flush(self) -> None:
        """Wait for the writes handed to the store so far."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def aclose(self) -> None:
        await self.flush()
        await self.inner.aclose()

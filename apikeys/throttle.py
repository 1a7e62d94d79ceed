"""The API keys' rate limit: django-ninja's throttling, counted per key.

``ApiKeyRateThrottle`` limits each ``X-API-Key`` to ``AGENTLAB_API_KEY_RATE``
requests (``"120/min"``: django-ninja's rate format, ``N/period`` with
``s``, ``m``, ``h`` or ``d``); a request over it gets 429 with
``Retry-After``. Browser sessions are not counted. The counts live in
Django's cache: per process with the default local-memory cache, shared by
every daphne when ``REDIS_URL`` is set (``config.settings`` then puts the
cache in Redis). (django-ninja "Throttling", after DRF's.)
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja.throttling import SimpleRateThrottle

from .models import ApiKey


class ApiKeyRateThrottle(SimpleRateThrottle):
    """At most ``AGENTLAB_API_KEY_RATE`` requests per API key (read on each
    request, so a changed setting applies at once; empty: no limit)."""

    scope = "apikey"

    def __init__(self) -> None:
        super().__init__(rate=self._setting() or "1/s")

    @staticmethod
    def _setting() -> str | None:
        return str(settings.AGENTLAB_API_KEY_RATE or "").strip() or None

    def allow_request(self, request: HttpRequest) -> bool:
        """``True`` for a session request or one under the key's rate."""
        rate = self._setting()
        if rate is None:
            return True
        if rate != self.rate:
            self.rate = rate
            self.num_requests, self.duration = self.parse_rate(rate)
        return super().allow_request(request)

    def get_cache_key(self, request: HttpRequest) -> str | None:
        """``throttle_apikey_<key id>`` for a request authenticated by an API
        key, ``None`` (not throttled) otherwise."""
        key = getattr(request, "auth", None)
        if not isinstance(key, ApiKey):
            return None
        return self.cache_format % {"scope": self.scope, "ident": key.pk}


api_key_throttle = ApiKeyRateThrottle()

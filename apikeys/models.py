"""Program API keys (issue 5): read runs and predictions; a key with the ``run``
scope (issue 46) may also start and cancel runs.

A key is shown once, when it is created; only its SHA-256 digest is stored.
The key carries its own lookup prefix (``al_<prefix>_<secret>``), so checking
one is a single indexed query plus a constant-time compare (healthchecks
``Project.api_key`` stores keys the same way: high-entropy random secrets need
no slow password hash).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiKeyScope(models.TextChoices):
    """What a key may do (issue 46): ``read`` runs and predictions (every key
    made before scopes existed is ``read``), or also ``run`` — start and
    cancel runs (``POST /api/runs``, ``POST /api/runs/{id}/cancel``)."""

    READ = "read", "read: runs and predictions"
    RUN = "run", "run: read, and start and cancel runs"


class ApiKey(models.Model):
    """A named key for programs. ``prefix`` is public (shown in the admin);
    ``digest`` is ``sha256(full key)`` in hex. A revoked key authenticates nothing."""

    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    digest = models.CharField(max_length=64, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked = models.BooleanField(default=False)
    scope = models.CharField(max_length=8, choices=ApiKeyScope.choices, default=ApiKeyScope.READ)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} (al_{self.prefix}_…)"

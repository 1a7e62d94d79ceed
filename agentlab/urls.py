"""URL routes: the admin, the HTTP API, log in/out, the health check and the chat pages."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from agentlab.api import api
from agentlab.health import healthz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("healthz", healthz, name="healthz"),
    path("", include("turns.urls")),
]

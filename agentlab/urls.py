"""URL routes: the admin, the HTTP API, log in/out, the health check and the chat pages."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from agentlab.api import api
from agentlab.health import healthz
from turns.sse import turn_stream

urlpatterns = [
    path("admin/", admin.site.urls),
    # server-sent events: an async view, not a ninja operation (ninja's auth is sync)
    path("api/turns/<int:turn_id>/stream", turn_stream, name="turn_stream"),
    path("api/", api.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("healthz", healthz, name="healthz"),
    path("", include("turns.urls")),
]

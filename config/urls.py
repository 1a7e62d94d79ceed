"""URL routes: the admin, the HTTP API, log in/out, the health check, the
Prometheus metrics, the site icon, the chat pages and the side-by-side page."""

from __future__ import annotations

from pathlib import Path

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.decorators.http import require_GET

from config.api import api
from config.health import healthz, readyz
from config.metrics_endpoint import metrics_endpoint
from turns.sse import turn_stream

_FAVICON = Path(__file__).resolve().parent / "static" / "agentlab" / "favicon.ico"


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, which browsers ask for on every page (it was a 404):
    the project's 16×16 icon, cached for a day."""
    response = HttpResponse(_FAVICON.read_bytes(), content_type="image/x-icon")
    response["Cache-Control"] = "public, max-age=86400"
    return response


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    # server-sent events: an async view, not a ninja operation (ninja's auth is sync)
    path("api/turns/<int:turn_id>/stream", turn_stream, name="turn_stream"),
    path("api/", api.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_endpoint, name="metrics"),
    path("", include("evaluation.urls")),
    path("", include("turns.urls")),
]

"""URL routes: the admin, the HTTP API, log in/out and the chat pages."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from agentlab.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("turns.urls")),
]

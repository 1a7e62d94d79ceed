"""The evaluation app's page outside the admin: side by side (``evaluation.views``)."""

from __future__ import annotations

from django.urls import path

from evaluation import views

urlpatterns = [
    path("side-by-side/", views.side_by_side, name="side_by_side"),
]

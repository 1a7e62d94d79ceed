"""The chat pages."""

from __future__ import annotations

from django.urls import path

from turns import views

app_name = "chat"

urlpatterns = [
    path("", views.conversation_list, name="conversation_list"),
    path("c/<int:conversation_id>/", views.conversation_detail, name="conversation_detail"),
    path("c/<int:conversation_id>/delete/", views.conversation_delete, name="conversation_delete"),
]

from __future__ import annotations

from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "turns"
    default_auto_field = "django.db.models.BigAutoField"

from __future__ import annotations

from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "monitoring"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Connect online scoring to ``turns.signals.chat_turn_finished``
        (``turns`` sits below and does not know this app)."""
        from monitoring.dispatch import on_chat_turn_finished
        from turns.signals import chat_turn_finished

        chat_turn_finished.connect(on_chat_turn_finished, dispatch_uid="monitoring.online_scoring")

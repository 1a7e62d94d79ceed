from __future__ import annotations

from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "turns"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Plug the jobs into ``turns.services.enqueue``: services enqueue turns
        without importing what runs them (see ``turns.services.enqueue``); check the
        plugins of ``AGENTLAB_PLUGINS`` (``turns.extension_settings``)."""
        from django.core import checks

        from turns.extension_settings import extensions_check
        from turns.jobs import handover
        from turns.services import enqueue

        enqueue.hand_over_set(handover.turn_hand_over)
        checks.register(extensions_check)

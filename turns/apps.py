from __future__ import annotations

from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "turns"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Plug the jobs into ``turns.dispatch``: services enqueue turns
        without importing what runs them (see ``turns.dispatch``); check the
        plugins of ``AGENTLAB_PLUGINS`` (``turns.extensions``)."""
        from django.core import checks

        from . import dispatch, jobs
        from .extensions import extensions_check

        dispatch.hand_over_set(jobs.turn_hand_over)
        checks.register(extensions_check)

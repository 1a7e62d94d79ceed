from __future__ import annotations

from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "turns"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Plug the jobs into ``turns.dispatch``: services enqueue turns
        without importing what runs them (see ``turns.dispatch``)."""
        from . import dispatch, jobs

        dispatch.hand_over_set(jobs.turn_hand_over)

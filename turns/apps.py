from __future__ import annotations

from django.apps import AppConfig


def turn_hand_over(turn_id: int) -> None:
    """``turns.jobs.handover.turn_hand_over``, imported at the first hand-over:
    the jobs import the driver, the agent loop and its tools, which app
    loading — every ``manage.py`` command — must not pay for (issue 32)."""
    from turns.jobs.handover import turn_hand_over as hand_over  # deferred: see the docstring

    hand_over(turn_id)


class TurnsConfig(AppConfig):
    name = "turns"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Plug the jobs into ``turns.services.enqueue``: services enqueue turns
        without importing what runs them (see ``turns.services.enqueue``); check the
        plugins of ``AGENTLAB_PLUGINS`` (``turns.extension_settings``)."""
        from django.core import checks

        from common.commands import AGENTLAB_CHECKS
        from turns.extension_settings import extensions_check
        from turns.services import enqueue

        enqueue.hand_over_set(turn_hand_over)
        checks.register(extensions_check, AGENTLAB_CHECKS)

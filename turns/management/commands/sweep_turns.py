"""``manage.py sweep_turns [--stale-s S]``: mark stale turns as interrupted
and queue lost ones again (``turns.services.turns_sweep``; for cron).

Exit 2 when the database cannot be reached or is not migrated."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors
from turns.jobs.sweep import turns_sweep


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = (
        "Mark running or waiting turns whose heartbeat is older than TURN_STALE_S as interrupted, and hand "
        "chat turns queued for longer than that to a job again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--stale-s",
            type=float,
            default=None,
            help="heartbeat age in seconds (default: the TURN_STALE_S setting)",
        )

    def handle(self, *args: Any, stale_s: float | None = None, **options: Any) -> None:
        stale = float(settings.TURN_STALE_S if stale_s is None else stale_s)
        with database_errors():
            database_check()
            swept = turns_sweep(stale_s=stale)
        self.stdout.write(
            f"marked {swept.interrupted} stale turn(s) interrupted (heartbeat older than {stale:g} s); "
            f"queued {swept.requeued} lost turn(s) again (queued for more than {stale:g} s)"
        )

"""``manage.py sweep_turns [--stale-s S]``: mark stale turns as interrupted (for cron)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from turns.services import turns_sweep_stale


class Command(BaseCommand):
    help = "Mark running or waiting turns whose heartbeat is older than TURN_STALE_S as interrupted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--stale-s", type=float, default=None,
                            help="heartbeat age in seconds (default: the TURN_STALE_S setting)")

    def handle(self, *args: Any, stale_s: float | None = None, **options: Any) -> None:
        stale = float(settings.TURN_STALE_S if stale_s is None else stale_s)
        count = turns_sweep_stale(stale_s=stale)
        self.stdout.write(f"marked {count} stale turn(s) interrupted (heartbeat older than {stale:g} s)")

"""``manage.py cache_clear [--older-than 7d] [--model M]``: delete cached LLM
completions (``turns.llm_cache.cache_clear``; docs/evaluating.md#caching-llm-calls).

Exit 2 for an ``--older-than`` that does not parse (nothing deleted), or when
the database cannot be reached or is not migrated."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentlab.agent.providers.caching import parse_expiry
from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, exit_codes
from turns.llm_cache import cache_clear


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Delete cached LLM completions: all, those older than --older-than, and/or those of --model."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than", default=None, help="only entries created longer ago, e.g. 12h, 7d, 2w"
        )
        parser.add_argument("--model", default=None, help="only entries of this model")

    def handle(
        self, *args: Any, older_than: str | None = None, model: str | None = None, **options: Any
    ) -> None:
        with exit_codes(ValueError):
            age = parse_expiry(older_than, option="--older-than") if older_than is not None else None
        with database_errors():
            database_check()
            deleted = cache_clear(older_than=age, model=(model or "").strip() or None)
        self.stdout.write(f"deleted {deleted} cached LLM completion(s)")

"""What AgentLab's management commands share: a database that cannot be
reached or is not migrated becomes a one-line message and exit status 2 (bad
input, as ``run_eval`` documents it) instead of a traceback.

``database_check()`` runs before a command writes anything; ``database_errors()``
wraps the command's work and catches what the check cannot see in advance (a
table dropped in between, say). ``exit_codes()`` is the rest of the exit-code
ladder every command shares (docs/exit-codes.md): bad input exits 2 with its
message, Ctrl-C 130.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.core.checks import Tags
from django.core.management.base import CommandError, OutputWrapper
from django.db import DEFAULT_DB_ALIAS, DatabaseError, OperationalError, connections

MIGRATE_HINT = "run `manage.py migrate` first"

#: The tag of AgentLab's own system checks (``turns.extension_settings``).
AGENTLAB_CHECKS = "agentlab"

#: The system checks a command that serves no page runs before it starts
#: (``BaseCommand.requires_system_checks``): the models', the settings' and
#: AgentLab's own. Not the URL, admin, template, static-file or security
#: checks: the URL check alone imports every API router, view and admin page
#: (about 0.3 s of CPU) for a command that serves none; ``manage.py check``
#: and every server's start run them all.
BATCH_COMMAND_CHECKS: list[str] = [
    Tags.models,
    Tags.compatibility,
    Tags.caches,
    Tags.signals,
    Tags.async_support,
    AGENTLAB_CHECKS,
]


def pending_migrations(*, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """``app.migration`` names not applied to the database yet, in the order
    ``migrate`` would apply them (an older database after an upgrade would
    fail part-way on a missing column; a new one has them all pending)."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[using])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _backwards in plan]


def database_label(*, using: str = DEFAULT_DB_ALIAS) -> str:
    """``vendor/name`` of a configured database, e.g. ``postgresql/agentlab``
    (a SQLite name is the file's path)."""
    connection = connections[using]
    return f"{connection.vendor}/{connection.settings_dict.get('NAME')}"


def database_check(*, using: str = DEFAULT_DB_ALIAS) -> None:
    """Check that the database can be reached and has every migration applied.

    Raises ``CommandError(returncode=2)``: ``cannot connect to the database
    <vendor/name>: <reason>`` (the driver's reason on one line), ``cannot
    read the database <vendor/name>: <reason>`` (e.g. a file that is not a
    SQLite database), or ``the
    database is not migrated (N migration(s) not applied: …); run `manage.py
    migrate` first`` naming up to five of them.
    """

    def refused(what: str, exc: DatabaseError) -> CommandError:
        reason = " ".join(str(exc).split())  # the driver's reason, on one line
        return CommandError(
            f"cannot {what} the database {database_label(using=using)}: {reason}", returncode=2
        )

    try:
        try:
            connections[using].ensure_connection()
        except OperationalError as exc:
            raise refused("connect to", exc) from exc
        pending = pending_migrations(using=using)
    except DatabaseError as exc:  # opened, but unreadable: a file that is not a SQLite database, say
        raise refused("read", exc) from exc
    if pending:
        shown = ", ".join(pending[:5]) + (" …" if len(pending) > 5 else "")
        raise CommandError(
            f"the database is not migrated ({len(pending)} migration(s) not applied: {shown}); "
            f"{MIGRATE_HINT}",
            returncode=2,
        )


def missing_tables(exc: DatabaseError) -> bool:
    """Whether a database error says a table is missing (an unmigrated
    database): PostgreSQL's ``relation … does not exist``, SQLite's ``no such table``."""
    text = str(exc)
    return "no such table" in text or ("relation" in text and "does not exist" in text)


@contextmanager
def database_errors() -> Iterator[None]:
    """Turn a ``DatabaseError`` that says a table is missing, raised inside the
    block, into ``CommandError(returncode=2)`` with the migrate hint; any
    other database error propagates unchanged."""
    try:
        yield
    except DatabaseError as exc:
        if not missing_tables(exc):
            raise
        raise CommandError(
            f"the database has no AgentLab tables yet ({exc}); {MIGRATE_HINT}", returncode=2
        ) from exc


@contextmanager
def exit_codes(
    *bad_input: type[Exception], stderr: OutputWrapper | None = None, interrupted: str = ""
) -> Iterator[None]:
    """The exit-code ladder of a command's work (docs/exit-codes.md), in one
    place: an exception of a ``bad_input`` type raised inside the block
    (``AgentLabError``, ``ValueError``, a format error …) becomes
    ``CommandError(returncode=2)`` with its message; with ``interrupted``,
    Ctrl-C writes it to ``stderr`` (say how to resume) and exits 130; any
    other exception propagates unchanged."""
    try:
        yield
    except KeyboardInterrupt:
        if not interrupted or stderr is None:
            raise
        stderr.write(interrupted)
        raise SystemExit(130) from None
    except bad_input as exc:
        raise CommandError(str(exc), returncode=2) from exc


def json_target_check(json_path: str, *, option: str = "--json") -> None:
    """Raises ``ValueError`` when a ``--json FILE`` option (or another output
    ``option`` given as a file: ``--junit-xml``, ``--summary-md``) cannot be
    written: a folder, a missing folder, or no write permission. Commands call
    it before their work, so a typo costs nothing (the file is written after)."""
    if Path(json_path).is_dir():
        raise ValueError(f"{option} {json_path} is a folder; give the path of a file to write")
    parent = Path(json_path).resolve().parent
    if not parent.is_dir():
        raise ValueError(f"{option} {json_path}: folder {parent} does not exist")
    target = Path(json_path)
    if not os.access(target if target.exists() else parent, os.W_OK):
        raise ValueError(f"{option} {json_path}: not writable")

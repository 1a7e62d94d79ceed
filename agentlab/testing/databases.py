"""Databases for the benchmarks: a PostgreSQL database made when missing."""

from __future__ import annotations


def ensure_pg_database(url: str) -> None:
    """Create the database a ``postgres://…/NAME`` URL names, unless it
    exists (connecting to the server's ``postgres`` database to do so).
    Raises psycopg's ``OperationalError`` when the server cannot be reached."""
    import psycopg
    from psycopg import sql

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            # the name an Identifier (quoted by psycopg), not pasted into the text
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

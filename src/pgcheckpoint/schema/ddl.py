"""What every migration revision imports: quoting, indexes built without blocking, the lock.

Revisions under `migrations/versions/` and `migrations/env.py` import this
module and nothing else of pgcheckpoint, so moving code around the package
never breaks an old revision. Keep it small and its names stable.

Example:
    >>> from pgcheckpoint.schema.ddl import ident
    >>> ident("tenant_a")
    '"tenant_a"'
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from ..core.locks import LOCK_CLASS_MIGRATE, migration_lock_key
from ..errors import DowngradeRefusedError, PgCheckpointError
from ..validate import check_schema, libpq_dsn

__all__ = [
    "TABLES",
    "VERSION_TABLE",
    "DowngradeRefusedError",
    "create_index_concurrently",
    "drop_index_concurrently",
    "ident",
    "libpq_dsn",
    "migration_lock",
]

# Alembic's version table of pgcheckpoint, apart from any application's own.
VERSION_TABLE = "pgcheckpoint_alembic_version"
# The tables the savers read and write at run time (a revision adding one adds it here).
TABLES = ("pgc_checkpoints", "pgc_blobs", "pgc_writes", "pgc_store", "pgc_deletions")


def ident(name: str) -> str:
    """Quote an SQL identifier (a schema name) for text SQL, revisions included.

    Revisions run their text through SQLAlchemy, which reads `:word` as a bind
    parameter, and some wrap it in a dollar-quoted `DO $$ ... $$` block, which
    a `$$` would end: a name with `:` or `$` is written as a Unicode-escaped
    identifier (`U&"..."`), which PostgreSQL reads as the same name.

    Example:
        >>> ident("tenant_a"), ident("a:b").startswith('U&"a')
        ('"tenant_a"', True)
    """
    quoted = sql.Identifier(name).as_string(None)
    if ":" not in name and "$" not in name:
        return quoted
    body = quoted[1:-1].replace("\\", "\\\\").replace(":", "\\003A").replace("$", "\\0024")
    return f'U&"{body}"'


@contextmanager
def migration_lock(
    conninfo: str, schema: str = "public", *, timeout: float = 600
) -> Iterator[None]:
    """Hold the lock that serialises migrations of `schema` in this database.

    Taken by polling `pg_try_advisory_lock` on a connection of its own, which
    holds no transaction open, so it never blocks a concurrent index build.

    Example:
        >>> with migration_lock("postgresql://postgres@127.0.0.1/app"):  # doctest: +SKIP
        ...     pass
    """
    key = migration_lock_key(check_schema(schema))
    with psycopg.connect(libpq_dsn(conninfo), autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        delay = 0.05
        while not conn.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS_MIGRATE, key)
        ).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise PgCheckpointError(
                    f"another process has been migrating schema {schema!r} for over "
                    f"{timeout:.0f}s; check for a stuck `pgcheckpoint migrate` and retry"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS_MIGRATE, key))


def _index_exists_invalid(schema: str, name: str) -> bool | None:
    from alembic import op
    from sqlalchemy import text

    row = (
        op.get_bind()
        .execute(
            text(
                "SELECT i.indisvalid FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :schema AND c.relname = :name"
            ),
            {"schema": schema, "name": name},
        )
        .fetchone()
    )
    return None if row is None else not row[0]


def create_index_concurrently(schema: str, name: str, definition: str) -> None:
    """Build an index without blocking writers, from inside a revision.

    An INVALID index left by an interrupted build is dropped and built again.

    Args:
        schema: The schema of the table.
        name: The index name.
        definition: What follows `ON`, e.g. `"pgc_checkpoints (run_id)"`; the
            table is qualified with the schema.

    Example:
        >>> create_index_concurrently("public", "t_idx", "t (a)")  # doctest: +SKIP
    """
    from alembic import op

    context = op.get_context()
    with context.autocommit_block():
        if not context.as_sql and _index_exists_invalid(schema, name):
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {ident(schema)}.{ident(name)}")
        op.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {ident(name)} ON {ident(schema)}.{definition}"
        )


def drop_index_concurrently(schema: str, name: str) -> None:
    """Drop an index without blocking writers, from inside a revision.

    Example:
        >>> drop_index_concurrently("public", "t_idx")  # doctest: +SKIP
    """
    from alembic import op

    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {ident(schema)}.{ident(name)}")

"""What the tables hold, read on a connection of the test's own."""

from __future__ import annotations

import psycopg
from psycopg import sql

TABLES = ("pgc_checkpoints", "pgc_blobs", "pgc_writes")


def rows_of(dsn: str, thread_id: str | None = None) -> dict[str, int]:
    """How many rows each table holds for a thread, or in all (`thread_id=None`)."""
    where = sql.SQL("") if thread_id is None else sql.SQL(" WHERE thread_id = %s")
    params = [] if thread_id is None else [thread_id]
    with psycopg.connect(dsn) as conn:
        return {
            table: int(
                conn.execute(  # type: ignore[index]
                    sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)) + where,
                    params,
                ).fetchone()[0]
            )
            for table in TABLES
        }


def total_rows(dsn: str) -> int:
    """How many rows the three tables hold together."""
    return sum(rows_of(dsn).values())

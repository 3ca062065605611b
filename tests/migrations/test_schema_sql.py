"""`sql/schema.sql` is the schema the revisions build, and is kept fresh."""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg import sql
from render_schema import SCHEMA_SQL, catalog, render_from_revisions

from pgcheckpoint.schema.migrate import head, offline_sql, upgrade


def _apply(dsn: str, schema: str, script: str) -> None:
    """Run a script the way psql would, statement by statement, in `schema`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        # statements end with ";" and a blank line in both scripts; a DO block's
        # inner ";" never does, and CREATE INDEX CONCURRENTLY must run on its own
        for statement in re.split(r";\s*\n\s*\n", script):
            body = "\n".join(
                line for line in statement.splitlines() if not line.lstrip().startswith("--")
            ).strip()
            if body:
                conn.execute(body)


def test_checked_in_schema_sql_equals_a_fresh_render(empty_db_dsn: str) -> None:
    fresh = render_from_revisions(empty_db_dsn)
    assert SCHEMA_SQL.read_text(encoding="utf-8") == fresh, (
        "sql/schema.sql is stale: run `make schema-sql`"
    )


@pytest.mark.parametrize("schema", ["public", "tenant_a"])
def test_database_from_schema_sql_equals_one_from_revisions(empty_db_dsn: str, schema: str) -> None:
    # two schemas of one database: one migrated, one built from the file
    upgrade(empty_db_dsn, schema=schema)
    _apply(empty_db_dsn, "from_file", SCHEMA_SQL.read_text(encoding="utf-8"))
    from_revisions = catalog(empty_db_dsn, schema)
    from_file = catalog(empty_db_dsn, "from_file")
    assert from_revisions["versions"] == [head()]
    assert {"pgc_checkpoints", "pgc_blobs", "pgc_writes"} <= set(from_revisions["tables"])
    assert from_file == from_revisions


def test_offline_sql_builds_the_same_database(empty_db_dsn: str) -> None:
    """What `pgcheckpoint migrate --sql` prints, applied by hand, equals a migration."""
    upgrade(empty_db_dsn, schema="online")
    script = offline_sql(schema="offline")
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        for statement in re.split(r";\s*\n\s*\n", script):
            if statement.strip():
                conn.execute(statement)
    assert catalog(empty_db_dsn, "offline") == catalog(empty_db_dsn, "online")


def test_offline_sql_from_a_revision_upgrades_only_the_rest(empty_db_dsn: str) -> None:
    upgrade(empty_db_dsn, schema="online")
    upgrade(empty_db_dsn, schema="offline", revision="0001")
    script = offline_sql(schema="offline", start="0001")
    assert 'TABLE IF NOT EXISTS "offline".pgc_checkpoints' not in script  # 0001 ran already
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        for statement in re.split(r";\s*\n\s*\n", script):
            if statement.strip():
                conn.execute(statement)
    assert catalog(empty_db_dsn, "offline") == catalog(empty_db_dsn, "online")

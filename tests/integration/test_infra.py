"""The database fixtures every other test relies on."""

from __future__ import annotations

import secrets
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgcheckpoint.schema.ddl import VERSION_TABLE

DB_PREFIX = "pgc_test_"


def _user_tables(dsn: str) -> dict[str, int]:
    """Row counts of the tables in non-system schemas."""
    with psycopg.connect(dsn) as conn:
        names = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables"
            " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        return {
            f"{schema}.{table}": conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))
            ).fetchone()[0]  # type: ignore[index]
            for schema, table in names
        }


@pytest.mark.parametrize("run", range(3))
def test_each_test_gets_its_own_database_without_rows(db_dsn: str, run: int) -> None:
    tables = _user_tables(db_dsn)
    assert tables.pop(f"public.{VERSION_TABLE}") == 1
    assert tables, "the cloned database has no tables: were the migrations run?"
    assert set(tables.values()) == {0}
    assert "public.infra_marker" not in tables
    with psycopg.connect(db_dsn) as conn:
        assert conn.info.dbname.startswith(DB_PREFIX)
        # a later test seeing this table would share this database
        conn.execute("CREATE TABLE infra_marker (run int)")
        conn.execute("INSERT INTO infra_marker VALUES (%s)", [run])


def test_template_has_the_migrated_tables(template_db: str, db_dsn: str) -> None:
    assert "public.pgc_checkpoints" in _user_tables(template_db)
    assert "public.pgc_checkpoints" in _user_tables(db_dsn)


def test_empty_database_has_no_tables(empty_db_dsn: str) -> None:
    assert _user_tables(empty_db_dsn) == {}


def test_databases_of_dead_runs_are_dropped(_databases: Any, db_dsn: str) -> None:
    dead = f"{DB_PREFIX}{secrets.randbits(31)}_1"  # a token no live session holds
    _databases.create(dead, "template0")
    _databases.drop_dead_runs()
    with psycopg.connect(_databases.server_dsn) as conn:
        names = {
            name
            for (name,) in conn.execute(
                "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", [DB_PREFIX]
            )
        }
    assert dead not in names
    # databases of live sessions (this one's, other workers') are kept
    assert conninfo_to_dict(db_dsn)["dbname"] in names

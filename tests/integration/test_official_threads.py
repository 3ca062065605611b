"""Switching from langgraph-checkpoint-postgres: a warning while its threads are not imported.

The official saver's threads stay in its own tables until `pgcheckpoint
import-langgraph` copies them; `setup()`, `pgcheckpoint migrate` and a saver's
first read say so (a warning on the `pgcheckpoint` logger, a line on the
command line), naming the command, and say nothing once they are copied or
when there is nothing to copy.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver
from psycopg import sql
from support.cli import run_cli

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.schema.migrate import upgrade

IMPORT = "pgcheckpoint import-langgraph"


@pytest.fixture
def official_threads(db_dsn: str) -> list[str]:
    """Two threads written by the official saver, in the tables beside ours."""
    threads = ["from-official-1", "from-official-2"]
    with OfficialSaver.from_conn_string(db_dsn) as official:
        official.setup()
        for thread_id in threads:
            official.put(generate_config(thread_id), generate_checkpoint(), generate_metadata(), {})
    return threads


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pgcheckpoint" and r.levelno == logging.WARNING
    ]


def test_setup_and_the_first_read_warn_once_per_saver(
    db_dsn: str, official_threads: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        saver.setup()
        [warning] = warnings_of(caplog)
        assert "schema 'public' hold threads that pgcheckpoint's tables do not" in warning
        # the example thread is withheld unless the saver's telemetry records ids
        assert "(2 of the 2 looked at, e.g. <withheld>)" in warning
        assert warning.endswith(f"copy them with `{IMPORT}`")
        # setup() checked already: the reads that follow add nothing
        assert saver.get_tuple(generate_config("from-official-1")) is None
        assert len(warnings_of(caplog)) == 1
    caplog.clear()
    with PostgresSaver.from_conn_string(db_dsn, pool=True) as saver:
        assert list(saver.list(generate_config("from-official-2"))) == []
        assert saver.get_tuple(generate_config("from-official-2")) is None
        assert len(warnings_of(caplog)) == 1


async def test_the_async_saver_warns_on_its_first_read(
    db_dsn: str, official_threads: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    async with AsyncPostgresSaver.from_conn_string(db_dsn) as saver:
        assert await saver.aget_tuple(generate_config("from-official-1")) is None
        assert [t async for t in saver.alist(None)] == []
        [warning] = warnings_of(caplog)
        assert IMPORT in warning
    caplog.clear()
    async with AsyncPostgresSaver.from_conn_string(db_dsn, pool=True) as saver:
        await saver.setup()
        assert len(warnings_of(caplog)) == 1


def test_migrate_prints_the_warning_and_the_import_silences_it(
    db_dsn: str, official_threads: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    migrated = run_cli("migrate", "--dsn", db_dsn)
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stderr.startswith("pgcheckpoint: warning: the tables of langgraph-")
    assert IMPORT in migrated.stderr

    imported = run_cli("import-langgraph", "--dsn", db_dsn)
    assert imported.returncode == 0, imported.stderr
    again = run_cli("migrate", "--dsn", db_dsn)
    assert (again.returncode, again.stderr) == (0, "")
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        saver.setup()
        assert saver.get_tuple(generate_config("from-official-1")) is not None
    assert warnings_of(caplog) == []


def test_a_custom_schema_names_both_schema_options(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA tenant_a")
    options = "-c search_path=tenant_a"
    with OfficialSaver.from_conn_string(f"{db_dsn} options='{options}'") as official:
        official.setup()
        official.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
    upgrade(db_dsn, schema="tenant_a")
    with PostgresSaver.from_conn_string(db_dsn, schema="tenant_a") as saver:
        saver.get_tuple(generate_config("t"))
    [warning] = warnings_of(caplog)
    assert warning.endswith(f"`{IMPORT} --schema tenant_a --from-schema tenant_a`")


def test_no_warning_without_official_threads(db_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    migrated = run_cli("migrate", "--dsn", db_dsn)
    assert (migrated.returncode, migrated.stderr) == (0, "")
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        saver.setup()
        saver.put(generate_config("ours"), generate_checkpoint(), generate_metadata(), {})
        assert saver.get_tuple(generate_config("ours")) is not None
    # the official tables, empty
    with OfficialSaver.from_conn_string(db_dsn) as official:
        official.setup()
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        saver.setup()
        assert saver.get_tuple(generate_config("ours")) is not None
    assert warnings_of(caplog) == []


@pytest.fixture
def app_conn(db_dsn: str) -> Iterator[psycopg.Connection]:
    """A connection as a role that may use pgcheckpoint's tables and nothing else."""
    role = f"pgc_test_app_{secrets.token_hex(4)}"
    ident = sql.Identifier(role)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {}").format(ident))
        conn.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(
                sql.SQL(", ").join(
                    sql.Identifier(t) for t in ("pgc_checkpoints", "pgc_blobs", "pgc_writes")
                ),
                ident,
            )
        )
        conn.execute(sql.SQL("SET ROLE {}").format(ident))
        try:
            yield conn
        finally:
            conn.execute("RESET ROLE")
            conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
            conn.execute(sql.SQL("DROP ROLE {}").format(ident))


def test_official_tables_the_role_cannot_read_are_no_error(
    official_threads: list[str], app_conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    saver = PostgresSaver(app_conn)
    stored = saver.put(generate_config("ours"), generate_checkpoint(), generate_metadata(), {})
    assert saver.get_tuple(stored) is not None
    assert warnings_of(caplog) == []

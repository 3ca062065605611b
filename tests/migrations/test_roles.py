"""Two roles: the migrating role owns the DDL, the application role only reads and writes."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from pgcheckpoint import AsyncPostgresSaver, SchemaOutOfDateError
from pgcheckpoint.cli import main
from pgcheckpoint.migrate import upgrade

SCHEMA = "tenant_a"


@pytest.fixture
def runtime_dsn(db_dsn: str) -> Iterator[str]:
    """A DSN for a fresh login role with no rights beyond what Postgres gives everyone."""
    role = f"pgc_test_rt_{secrets.token_hex(4)}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        # Postgres < 15 lets everyone create tables in public; this test wants no DDL at all
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    try:
        yield make_conninfo(db_dsn, user=role)
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                [role],
            )
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _role(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        return str(conn.info.user)


async def test_runtime_role_without_ddl_rights_passes_the_conformance_suite(
    db_dsn: str, runtime_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(db_dsn, schema=SCHEMA)  # as the migrating role
    role = _role(runtime_dsn)
    assert main(["grants", "--role", role, "--schema", SCHEMA, "--apply", "--dsn", db_dsn]) == 0

    with psycopg.connect(runtime_dsn, autocommit=True) as conn:
        for ddl in (
            f"CREATE TABLE {SCHEMA}.intruder (a int)",
            f"CREATE INDEX intruder_idx ON {SCHEMA}.pgc_checkpoints (type)",
            f"ALTER TABLE {SCHEMA}.pgc_checkpoints ADD COLUMN intruder int",
            "CREATE TABLE public.intruder (a int)",
            f"UPDATE {SCHEMA}.pgcheckpoint_alembic_version SET version_num = 'x'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(ddl)

    # the settings an app behind pgbouncer in transaction mode uses: no prepared statements
    pool = AsyncConnectionPool(runtime_dsn, open=False, kwargs={"prepare_threshold": None})
    await pool.open()
    try:
        saver = AsyncPostgresSaver(pool, schema=SCHEMA)

        @checkpointer_test(name="AsyncPostgresSaver as a runtime role")
        async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
            yield saver

        report = await validate(factory)
    finally:
        await pool.close()
    assert set(report.results) == {cap.value for cap in ALL_CAPABILITIES}
    problems = {
        name: result.failures or "not detected"
        for name, result in report.results.items()
        if not (result.detected and result.passed)
    }
    assert not problems, problems


async def test_runtime_role_on_an_unmigrated_schema_is_told_to_migrate(
    db_dsn: str, runtime_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with AsyncPostgresSaver.from_conn_string(runtime_dsn, schema="tenant_b") as saver:
        with pytest.raises(SchemaOutOfDateError, match="pgcheckpoint migrate --schema tenant_b"):
            await saver.aget_tuple({"configurable": {"thread_id": "t1"}})
    # and the runtime role cannot migrate: a clear error, no traceback
    assert main(["migrate", "--schema", "tenant_b", "--dsn", runtime_dsn]) == 1
    err = capsys.readouterr().err
    assert "permission denied" in err and "Traceback" not in err


def test_grants_prints_the_statements(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grants", "--role", "app", "--schema", SCHEMA]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        'GRANT USAGE ON SCHEMA "tenant_a" TO "app";',
        'GRANT SELECT, INSERT, UPDATE, DELETE ON "tenant_a".pgc_checkpoints, '
        '"tenant_a".pgc_blobs, "tenant_a".pgc_writes TO "app";',
        'GRANT SELECT ON "tenant_a".pgcheckpoint_alembic_version TO "app";',
    ]

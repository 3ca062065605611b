"""Two roles: the migrating role owns the DDL, the application role only reads and writes."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool
from support.docblocks import ROOT, parse

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver, PostgresStore, SchemaOutOfDateError
from pgcheckpoint.cli import EXIT_FAILED, main
from pgcheckpoint.schema.migrate import current, head, upgrade

SCHEMA = "tenant_a"


@contextlib.contextmanager
def _runtime_role(dsn: str) -> Iterator[str]:
    """A DSN for a fresh login role with no rights beyond what Postgres gives everyone."""
    role = f"pgc_test_rt_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        # Postgres < 15 lets everyone create tables in public; this test wants no DDL at all
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    try:
        yield make_conninfo(dsn, user=role)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                [role],
            )
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def runtime_dsn(db_dsn: str) -> Iterator[str]:
    """A runtime role's DSN for `db_dsn`."""
    with _runtime_role(db_dsn) as dsn:
        yield dsn


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
        '"tenant_a".pgc_blobs, "tenant_a".pgc_writes, "tenant_a".pgc_store, '
        '"tenant_a".pgc_deletions TO "app";',
        'GRANT SELECT ON "tenant_a".pgcheckpoint_alembic_version TO "app";',
        'DO $$ BEGIN IF to_regclass(\'"tenant_a"."pgc_store_vectors"\') IS NOT NULL THEN '
        'GRANT SELECT, INSERT, UPDATE, DELETE ON "tenant_a".pgc_store_vectors TO "app"; '
        "END IF; END $$;",
    ]
    # what docs/migrations.md shows `grants` printing is what it prints
    (shown,) = [
        b for b in parse(ROOT / "docs" / "migrations.md") if b.text.startswith("GRANT USAGE")
    ]
    assert shown.text.splitlines() == out


# -- the store as a runtime role ----------------------------------------------------------


def test_a_runtime_role_runs_the_store_and_its_sweeps(
    db_dsn: str, runtime_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(db_dsn, schema=SCHEMA)
    role = _role(runtime_dsn)
    assert main(["grants", "--role", role, "--schema", SCHEMA, "--apply", "--dsn", db_dsn]) == 0
    with PostgresStore.from_conn_string(runtime_dsn, schema=SCHEMA) as store:
        store.setup()  # at head: nothing to create, and no DDL right needed
        store.put(("users", "u1"), "prefs", {"theme": "dark"})
        store.put(("cache",), "old", {"v": 1}, ttl=0.001)
        store.put(("cache",), "gone", {"v": 2})
        store.delete(("cache",), "gone")
        assert store.get(("users", "u1"), "prefs").value == {"theme": "dark"}
        assert [i.key for i in store.search(("users",), filter={"theme": "dark"})] == ["prefs"]
        time.sleep(0.2)
        assert store.sweep_ttl() == 1
        store.put(("cache",), "old", {"v": 1}, ttl=0.001)
    time.sleep(0.2)
    # the cron paths, as the runtime role: prune sweeps the store too; stats count it
    dsn = ["--schema", SCHEMA, "--dsn", runtime_dsn]
    assert main(["prune", "--older-than", "30d", "--json", *dsn]) == 0
    assert '"store_items": 1' in capsys.readouterr().out
    assert main(["stats", "--json", *dsn]) == 0
    assert '"store": {"items": 1, "expired": 0}' in capsys.readouterr().out


def test_the_grants_reach_the_vector_table_where_it_exists(
    db_dsn: str, runtime_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The grant SQL alone, on a stand-in table: this server may have no pgvector."""
    upgrade(db_dsn, schema=SCHEMA)
    role = _role(runtime_dsn)
    grants = ["grants", "--role", role, "--schema", SCHEMA, "--apply", "--dsn", db_dsn]
    assert main(grants) == 0  # no vector table yet: nothing to grant on, no error

    def privileges() -> list[bool]:
        with psycopg.connect(db_dsn) as conn:
            return [
                bool(
                    conn.execute(  # type: ignore[index]
                        "SELECT has_table_privilege(%s, %s, %s)",
                        [role, f"{SCHEMA}.pgc_store_vectors", p],
                    ).fetchone()[0]
                )
                for p in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
            ]

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {SCHEMA}.pgc_store_vectors (ns text, key text, field text)")
    assert privileges() == [False] * 5
    assert main(grants) == 0  # again, once `setup()` with an index made the table
    assert privileges() == [True, True, True, True, False]


@pytest.mark.parametrize("schema", ["t'$x", "a:b", "x$$y"])
def test_the_grants_run_for_a_schema_whose_name_needs_quoting(
    db_dsn: str, runtime_dsn: str, schema: str
) -> None:
    upgrade(db_dsn, schema=schema)
    role = _role(runtime_dsn)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {}.pgc_store_vectors (ns text)").format(sql.Identifier(schema))
        )
    grants = ["grants", "--role", role, "--schema", schema, "--apply", "--dsn", db_dsn]
    assert main(grants) == 0
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT has_table_privilege(%s, %s, 'INSERT')",
            [role, sql.Identifier(schema, "pgc_store_vectors").as_string(None)],
        ).fetchone()
    assert row == (True,)


def test_a_runtime_role_searches_by_vector_once_the_migrating_role_set_the_index_up(
    vector_db_dsn: str,
) -> None:
    index = {"dims": 2, "embed": lambda texts: [[len(t), 1.0] for t in texts], "fields": ["t"]}
    upgrade(vector_db_dsn, schema=SCHEMA)
    with _runtime_role(vector_db_dsn) as runtime_dsn:
        role = _role(runtime_dsn)
        grants = ["grants", "--role", role, "--schema", SCHEMA, "--apply", "--dsn", vector_db_dsn]
        assert main(grants) == 0
        with PostgresStore.from_conn_string(vector_db_dsn, schema=SCHEMA, index=index) as owner:
            owner.setup()  # as the migrating role: pgvector, the vector table, its index
        with PostgresStore.from_conn_string(runtime_dsn, schema=SCHEMA, index=index) as store:
            store.setup()  # all there: nothing to create
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                store.put(("docs",), "a", {"t": "aa"})  # granted before the table was made
            assert main(grants) == 0
            store.put(("docs",), "a", {"t": "aa"})
            store.put(("docs",), "b", {"t": "bbbbbbbb"})
            store.put(("docs",), "c", {"t": "c"}, index=False)
            assert [i.key for i in store.search(("docs",), query="bbbbbbb")] == ["b", "a", "c"]
            store.delete(("docs",), "b")
            store.put(("docs",), "a", {"t": "x"}, ttl=0.001)
            time.sleep(0.2)
            assert store.sweep_ttl() == 1
            assert [i.key for i in store.search(("docs",), query="x")] == ["c"]


# -- tables another role created first -----------------------------------------------


@pytest.fixture
def roles(db_dsn: str) -> Iterator[dict[str, str]]:
    """A migrating role that owns schema `squatted`, and a squatter that may create in it."""
    token = secrets.token_hex(4)
    names = {"migrator": f"pgc_test_mig_{token}", "squatter": f"pgc_test_sq_{token}"}
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for role in names.values():
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("CREATE SCHEMA squatted AUTHORIZATION {}").format(
                sql.Identifier(names["migrator"])
            )
        )
        conn.execute(
            sql.SQL("GRANT USAGE, CREATE ON SCHEMA squatted TO {}").format(
                sql.Identifier(names["squatter"])
            )
        )
    try:
        yield {kind: make_conninfo(db_dsn, user=role) for kind, role in names.items()} | {
            f"{kind}_role": role for kind, role in names.items()
        }
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA squatted CASCADE")
            for role in names.values():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_migrate_refuses_tables_another_role_created(
    db_dsn: str, roles: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(roles["squatter"], autocommit=True) as conn:
        # a table the squatter still owns, and can change (a trigger that copies rows out)
        conn.execute("CREATE TABLE squatted.pgc_checkpoints (thread_id text)")
    for who in (db_dsn, roles["migrator"]):  # a superuser, and the owner of the schema
        assert main(["migrate", "--schema", "squatted", "--dsn", who]) == EXIT_FAILED
        err = capsys.readouterr().err
        assert f"pgc_checkpoints (owned by {roles['squatter_role']!r})" in err
        assert "does not take over tables another role created" in err
        assert "Traceback" not in err
    assert current(db_dsn, schema="squatted") is None  # nothing was done
    with psycopg.connect(db_dsn) as conn:
        (owner,) = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE schemaname = 'squatted'"
        ).fetchone()  # type: ignore[misc]
    assert owner == roles["squatter_role"]


def test_a_planted_version_table_is_not_taken_for_a_migration(
    db_dsn: str, roles: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(roles["squatter"], autocommit=True) as conn:
        table = "squatted.pgcheckpoint_alembic_version"
        conn.execute(f"CREATE TABLE {table} (version_num varchar(32) PRIMARY KEY)")
        conn.execute(f"INSERT INTO {table} VALUES (%s)", [head()])
        conn.execute(f"GRANT SELECT ON {table} TO PUBLIC")
    dsn = ["--schema", "squatted", "--dsn", roles["migrator"]]
    assert main(["migrate", *dsn]) == EXIT_FAILED
    assert "pgcheckpoint_alembic_version (owned by" in capsys.readouterr().err
    # a readiness probe is not fooled either: the tables that revision made are missing
    assert main(["current", "--check", *dsn]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "pgc_checkpoints is missing" in err and "Traceback" not in err


def test_the_owner_migrates_again_and_the_application_sets_up_at_head(
    db_dsn: str, roles: dict[str, str], runtime_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = ["--schema", "squatted", "--dsn", roles["migrator"]]
    assert main(["migrate", *dsn]) == 0
    assert main(["migrate", *dsn]) == 0
    assert "already at" in capsys.readouterr().out
    assert main(["current", "--check", *dsn]) == 0
    app = _role(runtime_dsn)
    assert main(["grants", "--role", app, "--apply", *dsn]) == 0
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA squatted TO {}").format(sql.Identifier(app)))
    # an application that calls setup() on a schema already at head, as a role
    # that only reads and writes it, goes on as before
    with PostgresSaver.from_conn_string(runtime_dsn, schema="squatted") as saver:
        saver.setup()
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None

"""`pgcheckpoint migrate` in deploy pipelines: many replicas at once, interruptions, re-runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from render_schema import catalog

from pgcheckpoint.cli import main
from pgcheckpoint.schema.migrate import current, downgrade, head, upgrade

RUN_ID_INDEX = "pgc_checkpoints_run_id_idx"


def migrate_process(*args: str) -> subprocess.Popen[str]:
    """`pgcheckpoint migrate ARGS` as a separate process, as a deploy step runs it."""
    return subprocess.Popen(
        [sys.executable, "-m", "pgcheckpoint", "migrate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )


def invalid_indexes(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE NOT i.indisvalid OR NOT i.indisready"
        ).fetchall()
    return [r[0] for r in rows]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("schema", ["public", "tenant_a"])
def test_eight_concurrent_migrations_end_with_one_correct_schema(
    empty_db_dsn: str, schema: str
) -> None:
    processes = [migrate_process("--dsn", empty_db_dsn, "--schema", schema) for _ in range(8)]
    results = [(*p.communicate(timeout=300), p.returncode) for p in processes]
    results = [(code, out, err) for out, err, code in results]
    for code, out, err in results:
        assert code == 0, err
        assert "Traceback" not in err
        assert f"schema {schema!r}" in out
    assert sum("migrated from" in out for _code, out, _err in results) == 1
    assert current(empty_db_dsn, schema=schema) == head()
    assert invalid_indexes(empty_db_dsn) == []
    upgrade(empty_db_dsn, schema="reference")
    assert catalog(empty_db_dsn, schema) == catalog(empty_db_dsn, "reference")


def test_invalid_index_from_a_failed_build_is_rebuilt(db_dsn: str) -> None:
    """A failed concurrent build leaves an INVALID index under the revision's index name."""
    downgrade(db_dsn, "0001")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for checkpoint_id in ("c1", "c2"):
            conn.execute(
                "INSERT INTO pgc_checkpoints (thread_id, checkpoint_id, run_id, type, checkpoint,"
                " metadata_type, metadata_blob) VALUES ('t', %s, 'same-run', 'msgpack', '',"
                " 'msgpack', '')",
                [checkpoint_id],
            )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                f"CREATE UNIQUE INDEX CONCURRENTLY {RUN_ID_INDEX} ON pgc_checkpoints (run_id)"
            )
    assert invalid_indexes(db_dsn) == [f"public.{RUN_ID_INDEX}"]

    assert main(["migrate", "--dsn", db_dsn]) == 0

    assert invalid_indexes(db_dsn) == []
    assert current(db_dsn) == head()
    with psycopg.connect(db_dsn) as conn:
        definition = conn.execute("SELECT pg_get_indexdef(%s::regclass)", [RUN_ID_INDEX]).fetchone()
    assert definition is not None
    assert "UNIQUE" not in definition[0] and "WHERE (run_id IS NOT NULL)" in definition[0]


@pytest.mark.slow
def test_migration_killed_during_a_concurrent_build_can_be_rerun(db_dsn: str) -> None:
    downgrade(db_dsn, "0001")
    with psycopg.connect(db_dsn) as blocker:
        # an open writing transaction: CREATE INDEX CONCURRENTLY waits for it to end
        blocker.execute(
            "INSERT INTO pgc_checkpoints (thread_id, checkpoint_id, type, checkpoint,"
            " metadata_type, metadata_blob) VALUES ('t', 'c1', 'msgpack', '', 'msgpack', '')"
        )
        process = migrate_process("--dsn", db_dsn)

        def building() -> int | None:
            with psycopg.connect(db_dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND query ILIKE 'CREATE INDEX CONCURRENTLY%%'"
                ).fetchone()
            return None if row is None else int(row[0])

        pid = wait_for("the concurrent index build", building)
        process.kill()  # the deploy step dies...
        process.communicate()
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_cancel_backend(%s)", [pid])  # ...and its build is cancelled
        wait_for("the build to stop", lambda: building() is None)
        assert invalid_indexes(db_dsn) == [f"public.{RUN_ID_INDEX}"]
        assert current(db_dsn) == "0001"
        blocker.rollback()

    rerun = migrate_process("--dsn", db_dsn)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert "migrated from 0001" in out
    assert invalid_indexes(db_dsn) == []
    assert current(db_dsn) == head()


@pytest.mark.slow
def test_plain_alembic_takes_the_same_lock_as_pgcheckpoint_migrate(empty_db_dsn: str) -> None:
    """Teams that run `alembic -c .../alembic.ini` race safely with `pgcheckpoint migrate`."""
    from pgcheckpoint.resources import migrations_dir

    ini = str(migrations_dir() / "alembic.ini")
    alembic = [
        subprocess.Popen(
            [sys.executable, "-m", "alembic", "-c", ini, "-x", f"dsn={empty_db_dsn}",
             "-x", "schema=tenant_a", "upgrade", "head"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]  # fmt: skip
    ours = [migrate_process("--dsn", empty_db_dsn, "--schema", "tenant_a") for _ in range(2)]
    for process in alembic + ours:
        _out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    assert current(empty_db_dsn, schema="tenant_a") == head()
    assert invalid_indexes(empty_db_dsn) == []
    upgrade(empty_db_dsn, schema="reference")
    assert catalog(empty_db_dsn, "tenant_a") == catalog(empty_db_dsn, "reference")

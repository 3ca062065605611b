"""`setup()` called by many processes at once, as replicas starting together do."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from pgcheckpoint.schema.migrate import current, head

SETUP_SCRIPT = """
import asyncio, sys
from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

dsn, kind = sys.argv[1], sys.argv[2]
if kind == "sync":
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        assert saver.get_tuple({"configurable": {"thread_id": "probe"}}) is None
else:
    async def main():
        async with AsyncPostgresSaver.from_conn_string(dsn, pool=True) as saver:
            await saver.setup()
            assert await saver.aget_tuple({"configurable": {"thread_id": "probe"}}) is None
    asyncio.run(main())
"""


@pytest.mark.slow
def test_setup_from_eight_processes_leaves_one_valid_schema(empty_db_dsn: str) -> None:
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", SETUP_SCRIPT, empty_db_dsn, "sync" if i % 2 else "async"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "error"},
        )
        for i in range(8)
    ]
    results = []
    for process in processes:
        _, err = process.communicate(timeout=300)
        results.append((process.returncode, err))
    assert [code for code, _ in results] == [0] * 8, [err for _, err in results if err]
    assert current(empty_db_dsn) == head()
    with psycopg.connect(empty_db_dsn) as conn:
        invalid = conn.execute(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND NOT (i.indisvalid AND i.indisready)"
        ).fetchone()
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' "
            "AND tablename IN ('pgc_checkpoints', 'pgc_blobs', 'pgc_writes')"
        ).fetchone()
        versions = conn.execute("SELECT count(*) FROM pgcheckpoint_alembic_version").fetchone()
    assert invalid == (0,)
    assert tables == (3,)
    assert versions == (1,)

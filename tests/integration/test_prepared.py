"""Speed that does not depend on the caller's connection settings.

The savers prepare each statement at its first execution on a connection, as
LangGraph's documented `prepare_threshold=0` does, on a connection opened with
psycopg's defaults too (`prepare_threshold=5`, which would parse and plan every
statement anew for its first five calls there). A connection that disables
preparation (`prepare_threshold=None`, behind pgbouncer) prepares nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config, generate_metadata
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from support.checkpoints import with_values

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

PREPARED = "SELECT statement FROM pg_prepared_statements"


def _names(rows: list[Any]) -> set[str]:
    """The pgcheckpoint statements among prepared ones (each starts with its name)."""
    return {
        row[0].split("\n", 1)[0].removeprefix("-- pgcheckpoint: ")
        for row in rows
        if row[0].startswith("-- pgcheckpoint: ")
    }


def _put_and_read(saver: PostgresSaver) -> None:
    checkpoint, versions = with_values({"n": 1})
    config = saver.put(generate_config("t"), checkpoint, generate_metadata(), versions)
    saver.put_writes(config, [("x", 1)], "task-1")
    saver.get_tuple(generate_config("t"))


@pytest.mark.parametrize("threshold", [5, None], ids=["defaults", "disabled"])
def test_a_connection_with_psycopgs_defaults_prepares_at_the_first_call(
    db_dsn: str, threshold: int | None
) -> None:
    with psycopg.connect(db_dsn, prepare_threshold=threshold) as conn:
        assert not conn.autocommit
        _put_and_read(PostgresSaver(conn))
        prepared = _names(conn.execute(PREPARED, prepare=False).fetchall())
    if threshold is None:
        assert prepared == set()
    else:
        assert {"put_checkpoint", "get_latest_checkpoint"} <= prepared


def test_a_bare_pool_prepares_on_each_connection_at_its_first_call(db_dsn: str) -> None:
    with ConnectionPool(db_dsn, min_size=2, max_size=2, open=True) as pool:
        _put_and_read(PostgresSaver(pool))
        # which connection ran which call is the pool's choice: read both
        with pool.connection() as first, pool.connection() as second:
            prepared = set()
            for conn in (first, second):
                prepared |= _names(conn.execute(PREPARED, prepare=False).fetchall())
                conn.rollback()
    assert {"put_checkpoint", "get_latest_checkpoint"} <= prepared


@pytest.mark.parametrize("threshold", [5, None], ids=["defaults", "disabled"])
async def test_the_async_saver_prepares_as_the_sync_one(db_dsn: str, threshold: int | None) -> None:
    async with AsyncConnectionPool(
        db_dsn, min_size=1, max_size=1, kwargs={"prepare_threshold": threshold}, open=False
    ) as pool:
        saver = AsyncPostgresSaver(pool)
        checkpoint, versions = with_values({"n": 1})
        await saver.aput(generate_config("t"), checkpoint, generate_metadata(), versions)
        await saver.aget_tuple(generate_config("t"))
        async with pool.connection() as conn:
            cur = await conn.execute(PREPARED, prepare=False)
            prepared = _names(await cur.fetchall())
            await conn.rollback()
    if threshold is None:
        assert prepared == set()
    else:
        assert {"put_checkpoint", "get_latest_checkpoint"} <= prepared

"""The savers behind pgbouncer in transaction pooling mode, with the documented settings.

Skipped when pgbouncer is not installed. Each transaction may run on another
server connection, so anything a saver kept in the session (a SET, a prepared
statement, a temporary table) would break here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from conftest import transaction_pooler
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from test_revisions import _write_thread

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.schema.migrate import upgrade


@pytest.fixture
def bouncer_dsn(db_dsn: str) -> Iterator[str]:
    """`db_dsn` through pgbouncer, pool_mode=transaction, two server connections."""
    with transaction_pooler(db_dsn, pool_size=2) as dsn:
        yield dsn


async def test_async_saver_passes_the_conformance_suite_through_pgbouncer(
    db_dsn: str, bouncer_dsn: str
) -> None:
    upgrade(db_dsn, schema="tenant_a")  # migrations go to Postgres directly
    pool = AsyncConnectionPool(
        bouncer_dsn, min_size=4, max_size=4, open=False, kwargs={"prepare_threshold": None}
    )
    await pool.open()
    try:
        saver = AsyncPostgresSaver(pool, schema="tenant_a")

        @checkpointer_test(name="AsyncPostgresSaver behind pgbouncer")
        async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
            yield saver

        report = await validate(factory)
    finally:
        await pool.close()
    problems = {
        name: result.failures or "not detected"
        for name, result in report.results.items()
        if not (result.detected and result.passed)
    }
    assert not problems, problems


def test_sync_saver_through_pgbouncer(bouncer_dsn: str) -> None:
    settings = {"min_size": 3, "max_size": 3, "kwargs": {"prepare_threshold": None}}
    with PostgresSaver.from_conn_string(bouncer_dsn, pool=settings) as saver:
        written = _write_thread(saver, "t1")
        assert list(saver.list({"configurable": {"thread_id": "t1"}})) == written
    with ConnectionPool(bouncer_dsn, kwargs={"prepare_threshold": None}) as pool:
        assert list(PostgresSaver(pool).list({"configurable": {"thread_id": "t1"}})) == written

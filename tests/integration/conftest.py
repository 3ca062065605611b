"""The `saver` fixture: every integration test runs on both drivers and three kinds of connection.

Variants are `sync|async` x `conn|pool|pipeline`. The caller's resources are
deliberately unfriendly: connections keep psycopg's defaults (`autocommit=False`,
tuple rows), since the saver must set up transactions and row factories itself.
Pools are the test's own and must still be open when the test ends.

`api` drives either saver with the same awaitable calls (`support.savers.SaverApi`),
so a test is written once: `await api.put(...)` awaits `aput` on an
`AsyncPostgresSaver` and calls `put` on a `PostgresSaver`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from support.savers import Saver, SaverApi

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

DRIVERS = ("sync", "async")
CONNECTIONS = ("conn", "pool", "pipeline")
VARIANTS = [f"{driver}-{kind}" for driver in DRIVERS for kind in CONNECTIONS]
ASYNC_VARIANTS = [v for v in VARIANTS if v.startswith("async-")]
SYNC_VARIANTS = [v for v in VARIANTS if v.startswith("sync-")]


@pytest.fixture(params=VARIANTS)
async def saver(request: pytest.FixtureRequest, db_dsn: str) -> AsyncIterator[Saver]:
    """A saver on this test's database, over one of the six driver/connection variants."""
    driver, kind = request.param.split("-")
    if driver == "sync":
        if kind == "pool":
            pool = ConnectionPool(db_dsn, min_size=1, max_size=4, open=True)
            try:
                yield PostgresSaver(pool)
                assert not pool.closed, "the saver closed a pool it was handed"
            finally:
                pool.close()
            return
        with psycopg.connect(db_dsn) as conn:
            if kind == "pipeline":
                with conn.pipeline() as pipe:
                    yield PostgresSaver(conn, pipe)
            else:
                yield PostgresSaver(conn)
            assert not conn.closed, "the saver closed a connection it was handed"
        return
    if kind == "pool":
        apool = AsyncConnectionPool(db_dsn, min_size=1, max_size=4, open=False)
        await apool.open()
        try:
            yield AsyncPostgresSaver(apool)
            assert not apool.closed, "the saver closed a pool it was handed"
        finally:
            await apool.close()
        return
    async with await psycopg.AsyncConnection.connect(db_dsn) as aconn:
        if kind == "pipeline":
            async with aconn.pipeline() as apipe:
                yield AsyncPostgresSaver(aconn, apipe)
        else:
            yield AsyncPostgresSaver(aconn)
        assert not aconn.closed, "the saver closed a connection it was handed"


@pytest.fixture
def api(saver: Saver) -> SaverApi:
    return SaverApi(saver)

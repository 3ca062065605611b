"""The `saver` fixture: every integration test runs on both drivers and three kinds of connection.

Variants are `sync|async` x `conn|pool|pipeline`. The caller's resources are
deliberately unfriendly: connections keep psycopg's defaults (`autocommit=False`,
tuple rows), since the saver must set up transactions and row factories itself.
Pools are the test's own and must still be open when the test ends. A test
parametrizes `cache_bytes` to run the savers at another cache budget.

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
from pgcheckpoint.caches import DEFAULT_CACHE_BYTES

DRIVERS = ("sync", "async")
CONNECTIONS = ("conn", "pool", "pipeline")
VARIANTS = [f"{driver}-{kind}" for driver in DRIVERS for kind in CONNECTIONS]
ASYNC_VARIANTS = [v for v in VARIANTS if v.startswith("async-")]
SYNC_VARIANTS = [v for v in VARIANTS if v.startswith("sync-")]


@pytest.fixture
def cache_bytes() -> int:
    """The savers' cache budget; a test parametrizes `cache_bytes` to run at another."""
    return DEFAULT_CACHE_BYTES


@pytest.fixture(params=VARIANTS)
async def saver(
    request: pytest.FixtureRequest, db_dsn: str, cache_bytes: int
) -> AsyncIterator[Saver]:
    """A saver on this test's database, over one of the six driver/connection variants."""
    driver, kind = request.param.split("-")
    if driver == "sync":
        if kind == "pool":
            pool = ConnectionPool(db_dsn, min_size=1, max_size=4, open=True)
            try:
                yield PostgresSaver(pool, cache_bytes=cache_bytes)
                assert not pool.closed, "the saver closed a pool it was handed"
            finally:
                pool.close()
            return
        with psycopg.connect(db_dsn) as conn:
            if kind == "pipeline":
                with conn.pipeline() as pipe:
                    yield PostgresSaver(conn, pipe, cache_bytes=cache_bytes)
            else:
                yield PostgresSaver(conn, cache_bytes=cache_bytes)
            assert not conn.closed, "the saver closed a connection it was handed"
        return
    if kind == "pool":
        apool = AsyncConnectionPool(db_dsn, min_size=1, max_size=4, open=False)
        await apool.open()
        try:
            yield AsyncPostgresSaver(apool, cache_bytes=cache_bytes)
            assert not apool.closed, "the saver closed a pool it was handed"
        finally:
            await apool.close()
        return
    async with await psycopg.AsyncConnection.connect(db_dsn) as aconn:
        if kind == "pipeline":
            async with aconn.pipeline() as apipe:
                yield AsyncPostgresSaver(aconn, apipe, cache_bytes=cache_bytes)
        else:
            yield AsyncPostgresSaver(aconn, cache_bytes=cache_bytes)
        assert not aconn.closed, "the saver closed a connection it was handed"


@pytest.fixture
def api(saver: Saver) -> SaverApi:
    return SaverApi(saver)

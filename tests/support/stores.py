"""Stores as tests drive them: both drivers behind one awaitable API, each way they connect.

`open_store` opens a store on a test's database the way a variant says
(`VARIANTS` of `support.savers`: `sync|async` x `conn|pool|pipeline`), with
psycopg's defaults on the connections the test hands over (no autocommit,
tuple rows). `StoreApi` lets a test be written once: `await api.put(...)`
awaits `aput` on an `AsyncPostgresStore` and calls `put` on a `PostgresStore`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgcheckpoint import AsyncPostgresStore, PostgresStore

Store = PostgresStore | AsyncPostgresStore


@contextlib.asynccontextmanager
async def open_store(variant: str, dsn: str, **options: Any) -> AsyncIterator[Store]:
    """A store on `dsn` over `variant` ("sync-pool", "async-pipeline"...)."""
    driver, kind = variant.split("-", 1)
    settings = {"min_size": 1, "max_size": 4, "timeout": 30.0}
    if driver == "sync":
        if kind == "pool":
            with ConnectionPool(dsn, **settings) as pool:
                yield PostgresStore(pool, **options)
                assert not pool.closed, "the store closed a pool it was handed"
            return
        with psycopg.connect(dsn) as conn:
            if kind == "pipeline":
                with conn.pipeline() as pipe:
                    yield PostgresStore(conn, pipe=pipe, **options)
            else:
                yield PostgresStore(conn, **options)
        return
    if kind == "pool":
        async with AsyncConnectionPool(dsn, open=False, **settings) as apool:
            yield AsyncPostgresStore(apool, **options)
            assert not apool.closed, "the store closed a pool it was handed"
        return
    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        if kind == "pipeline":
            async with aconn.pipeline() as apipe:
                yield AsyncPostgresStore(aconn, pipe=apipe, **options)
        else:
            yield AsyncPostgresStore(aconn, **options)


# methods both stores name alike (awaitable on the async one)
SAME_NAME = frozenset({"setup", "sweep_ttl", "start_ttl_sweeper", "stop_ttl_sweeper"})


class StoreApi:
    """`await api.NAME(...)`: `aNAME` of an async store, `NAME` of a sync one."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if isinstance(self.store, AsyncPostgresStore) and method not in SAME_NAME:
                result = getattr(self.store, "a" + method)(*args, **kwargs)
                return await result if inspect.isawaitable(result) else result
            result = getattr(self.store, method)(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return call

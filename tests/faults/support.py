"""Helpers the fault tests share: one awaitable API over both savers, saver factories.

`Api` drives either saver with the same awaitable calls. A sync saver's call runs
in a worker thread (`asyncio.to_thread`), so a test can leave one in flight while
it restarts the server or starts another; the async saver's `a`-methods are
awaited on the test's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import psycopg
from langgraph.checkpoint.base import CheckpointTuple
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

Saver = PostgresSaver | AsyncPostgresSaver

# How a test reaches the database: the saver opens a pool (`from_conn_string`),
# the test hands it a pool with a check, a pool without one, or one connection.
POOLED = ("own-pool", "user-pool", "user-pool-unchecked")
KINDS = (*POOLED, "conn")


class Api:
    """Awaitable calls to either saver: `a<method>` awaited, or `<method>` in a thread."""

    def __init__(self, saver: Saver) -> None:
        self.saver = saver
        self.is_async = isinstance(saver, AsyncPostgresSaver)

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        return functools.partial(self._call, method)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.saver, "a" + method)(*args, **kwargs)
        return await asyncio.to_thread(getattr(self.saver, method), *args, **kwargs)

    async def list(self, config: Any, **kwargs: Any) -> list[CheckpointTuple]:
        if self.is_async:
            return [t async for t in self.saver.alist(config, **kwargs)]
        return await asyncio.to_thread(lambda: list(self.saver.list(config, **kwargs)))


@contextlib.asynccontextmanager
async def open_saver(
    driver: str, kind: str, dsn: str, pool: Mapping[str, Any] | None = None
) -> AsyncIterator[Api]:
    """A saver over `dsn`: `driver` is sync or async, `kind` one of `KINDS`."""
    settings = {"min_size": 2, "max_size": 4, "timeout": 30.0, **(pool or {})}
    if driver == "sync":
        if kind == "own-pool":
            with PostgresSaver.from_conn_string(dsn, pool=settings) as saver:
                yield Api(saver)
        elif kind == "conn":
            with PostgresSaver.from_conn_string(dsn) as saver:
                yield Api(saver)
        else:
            check = ConnectionPool.check_connection if kind == "user-pool" else None
            with ConnectionPool(dsn, check=check, **settings) as user_pool:
                yield Api(PostgresSaver(user_pool))
                assert not user_pool.closed
        return
    if kind == "own-pool":
        async with AsyncPostgresSaver.from_conn_string(dsn, pool=settings) as asaver:
            yield Api(asaver)
    elif kind == "conn":
        async with AsyncPostgresSaver.from_conn_string(dsn) as asaver:
            yield Api(asaver)
    else:
        acheck = AsyncConnectionPool.check_connection if kind == "user-pool" else None
        async with AsyncConnectionPool(dsn, check=acheck, open=False, **settings) as apool:
            yield Api(AsyncPostgresSaver(apool))
            assert not apool.closed


def count_rows(dsn: str, thread_id: str) -> dict[str, int]:
    """How many rows each table holds for a thread."""
    query = sql.SQL("SELECT count(*) FROM {} WHERE thread_id = %s")
    with psycopg.connect(dsn) as conn:
        return {
            table: int(
                conn.execute(query.format(sql.Identifier(table)), [thread_id]).fetchone()[0]  # type: ignore[index]
            )
            for table in ("pgc_checkpoints", "pgc_blobs", "pgc_writes")
        }

"""Savers as tests drive them: one awaitable API over both drivers, and ways to open them.

`open_variant` is the one place that opens a saver for a test, each way an
application reaches the database (`VARIANTS`: the driver, then how it
connects); every suite's fixtures call it. `SaverApi` lets a test be written
once for both savers: `await api.put(...)` awaits `aput` on an
`AsyncPostgresSaver` and calls `put` on a `PostgresSaver`; `open_saver` gives
one over a variant. `ThreadedSaver` puts a sync saver behind async methods,
for suites that only call those. `async_saver_in_thread` gives an async saver
to sync code.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

Saver = PostgresSaver | AsyncPostgresSaver

DRIVERS = ("sync", "async")
# How a saver reaches the database: a connection the test hands it (with
# psycopg's defaults unless `connection` says otherwise), a pipeline of one, a
# pool the test hands it (without a check, or with one: `-checked`), or a
# connection or pool the saver opens itself (`from_conn_string`).
CONNECTIONS = ("conn", "pipeline", "pool", "pool-checked", "own-conn", "own-pool")
# The variants most suites run: both drivers, on a connection, a pipeline, a pool.
VARIANTS = [f"{driver}-{kind}" for driver in DRIVERS for kind in ("conn", "pool", "pipeline")]
ASYNC_VARIANTS = [v for v in VARIANTS if v.startswith("async-")]
POOLED = ("own-pool", "pool-checked", "pool")


@contextlib.asynccontextmanager
async def open_variant(
    variant: str,
    dsn: str,
    *,
    serde: Any = None,
    cache_bytes: int | None = None,
    connection: Mapping[str, Any] | None = None,
    pool: Mapping[str, Any] | None = None,
) -> AsyncIterator[Saver]:
    """A saver on `dsn` the way `variant` ("sync-pool", "async-own-pool"...) says.

    Args:
        variant: The driver (`DRIVERS`) and the way it connects (`CONNECTIONS`).
        serde: The savers' serializer.
        cache_bytes: Their cache budget (default: the savers' own).
        connection: Keyword arguments of the connections the test opens (for
            a pool, its `kwargs`); psycopg's defaults when not given.
        pool: Settings of a pool (`min_size`, `max_size`, `timeout`...).

    A connection or pool the test handed over must still be open at the end.
    """
    driver, kind = variant.split("-", 1)
    if driver not in DRIVERS or kind not in CONNECTIONS:
        raise ValueError(f"unknown saver variant {variant!r}")
    options: dict[str, Any] = {"serde": serde}
    if cache_bytes is not None:
        options["cache_bytes"] = cache_bytes
    settings = {"min_size": 1, "max_size": 4, "timeout": 30.0, **(pool or {})}
    connect = dict(connection or {})
    if driver == "sync":
        if kind.startswith("own-"):
            opened = settings if kind == "own-pool" else False
            with PostgresSaver.from_conn_string(dsn, pool=opened, **options) as saver:
                yield saver
        elif kind.startswith("pool"):
            check = ConnectionPool.check_connection if kind == "pool-checked" else None
            with ConnectionPool(dsn, check=check, kwargs=connect, **settings) as user_pool:
                yield PostgresSaver(user_pool, **options)
                assert not user_pool.closed, "the saver closed a pool it was handed"
        else:
            with psycopg.connect(dsn, **connect) as conn:
                if kind == "pipeline":
                    with conn.pipeline() as pipe:
                        yield PostgresSaver(conn, pipe, **options)
                else:
                    yield PostgresSaver(conn, **options)
                assert not conn.closed, "the saver closed a connection it was handed"
        return
    if kind.startswith("own-"):
        aopened = settings if kind == "own-pool" else False
        async with AsyncPostgresSaver.from_conn_string(dsn, pool=aopened, **options) as asaver:
            yield asaver
    elif kind.startswith("pool"):
        acheck = AsyncConnectionPool.check_connection if kind == "pool-checked" else None
        async with AsyncConnectionPool(
            dsn, check=acheck, kwargs=connect, open=False, **settings
        ) as apool:
            yield AsyncPostgresSaver(apool, **options)
            assert not apool.closed, "the saver closed a pool it was handed"
    else:
        async with await psycopg.AsyncConnection.connect(dsn, **connect) as aconn:
            if kind == "pipeline":
                async with aconn.pipeline() as apipe:
                    yield AsyncPostgresSaver(aconn, apipe, **options)
            else:
                yield AsyncPostgresSaver(aconn, **options)
            assert not aconn.closed, "the saver closed a connection it was handed"


class SaverApi:
    """Awaitable calls to either saver: `a<method>` on the async one, `<method>` on the sync one.

    With `threaded`, a sync call runs in a worker thread (`asyncio.to_thread`),
    so a test can leave one in flight while it restarts the server or starts
    another; without, it runs on the test's own thread.
    """

    def __init__(self, saver: Saver, *, threaded: bool = False) -> None:
        self.saver = saver
        self.is_async = isinstance(saver, AsyncPostgresSaver)
        self.threaded = threaded

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        return functools.partial(self._call, method)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.saver, "a" + method)(*args, **kwargs)
        if self.threaded:
            return await asyncio.to_thread(getattr(self.saver, method), *args, **kwargs)
        return getattr(self.saver, method)(*args, **kwargs)

    async def list(self, config: Any, **kwargs: Any) -> list[CheckpointTuple]:
        if self.is_async:
            return [t async for t in self.saver.alist(config, **kwargs)]
        if self.threaded:
            return await asyncio.to_thread(lambda: list(self.saver.list(config, **kwargs)))
        return list(self.saver.list(config, **kwargs))


@contextlib.asynccontextmanager
async def open_saver(
    driver: str, kind: str, dsn: str, pool: Mapping[str, Any] | None = None
) -> AsyncIterator[SaverApi]:
    """A threaded `SaverApi` over `dsn`: `driver` is sync or async, `kind` one of `CONNECTIONS`."""
    settings = {"min_size": 2, **(pool or {})}
    async with open_variant(f"{driver}-{kind}", dsn, pool=settings) as saver:
        yield SaverApi(saver, threaded=True)


@contextlib.contextmanager
def async_saver_in_thread(dsn: str, *, max_size: int = 2) -> Iterator[AsyncPostgresSaver]:
    """An AsyncPostgresSaver on a pool, its event loop running in another thread.

    Sync code uses its sync methods, which run each call on that loop.
    """
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, name="async-saver-loop", daemon=True)
    runner.start()

    async def opened() -> tuple[AsyncConnectionPool[Any], AsyncPostgresSaver]:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn, min_size=1, max_size=max_size, open=False
        )
        await pool.open()
        return pool, AsyncPostgresSaver(pool)

    pool, saver = asyncio.run_coroutine_threadsafe(opened(), loop).result()
    try:
        yield saver
    finally:
        asyncio.run_coroutine_threadsafe(pool.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        loop.close()


class ThreadedSaver(BaseCheckpointSaver[str]):
    """A sync saver behind async methods, each call run with `asyncio.to_thread`.

    The async methods are overridden here (not inherited), so LangGraph's
    conformance suite's capability detection sees every one of them.
    """

    def __init__(self, inner: PostgresSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    def get_next_version(self, current: str | None, channel: None) -> str:
        return self.inner.get_next_version(current, channel)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.inner.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        def collect() -> list[CheckpointTuple]:
            return list(self.inner.list(config, filter=filter, before=before, limit=limit))

        for tup in await asyncio.to_thread(collect):
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.inner.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.inner.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.inner.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.inner.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.inner.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.inner.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            self.inner.get_delta_channel_history, config=config, channels=channels
        )

"""What the async and the sync store do differently: batching calls, sweeping, embedding.

`AsyncStoreFront` is LangGraph's `AsyncBatchedBaseStore` (calls made in one
turn of the event loop become one batch; sync calls from other threads
work, and fail on the loop's own thread), except that each batch runs as a
task of its own, so batches run side by side over a pool, and that a batch
whose ops fail their checks is run op by op, so one caller's bad input fails
that caller only. `StoreFront` is the sync `BaseStore`, whose async methods
run the sync batch in a worker thread, as the official sync store's do. Each
has its TTL sweeper (a task, a thread) and its embedding calls; the store
classes (`store_async.AsyncPostgresStore` and its generated twin
`store.PostgresStore`) hold the rest, once. `setup_vectors` creates the
vector table for both.

Example:
    >>> from pgcheckpoint.drivers.store_front import StoreFront
    >>> StoreFront.supports_ttl
    True
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from langgraph.store.base import BaseStore, Op, PutOp, Result, TTLConfig
from langgraph.store.base.batch import AsyncBatchedBaseStore
from psycopg.rows import dict_row

from ..schema.ddl import migration_lock
from ..statements.queries import Queries
from ..store.batch import prepare_batch
from ..store.state import StoreState
from ..store.vectors import (
    VECTOR_TABLE,
    IndexSettings,
    PgvectorMissingError,
    index_name,
    vector_ddl,
)
from ..telemetry.activity import logger
from ..validate import check_schema

__all__ = ["AsyncStoreFront", "StoreFront", "setup_vectors", "sweep_seconds"]

_INSTALL = (
    "install pgvector on the server (Debian/Ubuntu: apt-get install postgresql-<version>-pgvector; "
    "see https://github.com/pgvector/pgvector#installation), or create the store without index="
)


def sweep_seconds(ttl_config: TTLConfig | None, minutes: float | None) -> float:
    """Seconds between two TTL sweeps: the argument, the config's, else 5 minutes.

    Example:
        >>> sweep_seconds({"sweep_interval_minutes": 0.5}, None)
        30.0
    """
    chosen = minutes or (ttl_config or {}).get("sweep_interval_minutes") or 5
    return float(chosen) * 60


def setup_vectors(conninfo: str, schema: str, settings: IndexSettings) -> None:
    """Create pgvector, the vector table and its index, under the migration lock.

    Where all of them are there already, as `settings` asks, nothing is
    created: an application role given the runtime grants (`pgcheckpoint
    grants`), which may not run DDL, sets up a store the migrating role set up.

    Raises:
        PgvectorMissingError: The server has no pgvector (the message says how
            to install it), or the table holds vectors of another type or
            dimension than `settings`.
    """
    schema = check_schema(schema)
    index = index_name(settings)
    found = {
        "table": psycopg.sql.Identifier(schema, VECTOR_TABLE).as_string(None),
        "index": None if index is None else psycopg.sql.Identifier(schema, index).as_string(None),
    }
    with (
        migration_lock(conninfo, schema),
        psycopg.connect(conninfo, autocommit=True, row_factory=dict_row) as conn,
    ):
        row = conn.execute(Queries(schema)["store_vector_column"], found).fetchall()[0]
        if not row["installed"]:
            if not row["available"]:
                raise PgvectorMissingError(
                    "semantic search needs the pgvector extension, which this PostgreSQL "
                    f"server does not have: {_INSTALL}"
                )
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.errors.InsufficientPrivilege as exc:
                raise PgvectorMissingError(
                    "semantic search needs the pgvector extension, which this role may not "
                    "create: have a superuser run CREATE EXTENSION vector in this database"
                ) from exc
        column_type = row["column_type"]
        if column_type is not None and column_type != settings.column_type:
            raise PgvectorMissingError(
                f"the store's vectors in schema {schema!r} are {column_type}, but its index "
                f"config asks for {settings.column_type}: use the same dims and vector_type, "
                "or another schema"
            )
        if row["installed"] and column_type is not None and (index is None or row["indexed"]):
            return
        for statement in vector_ddl(schema, settings):
            conn.execute(statement)


def _deduplicated(ops: list[Op]) -> tuple[list[Op], list[int]]:
    # Calls made at once often repeat a read (every task searching the same
    # prefix): run each distinct read once. Puts stay: the batch keeps the last.
    unique: list[Op] = []
    seen: dict[Op, int] = {}
    where: list[int] = []
    for op in ops:
        if isinstance(op, PutOp):
            where.append(len(unique))
            unique.append(op)
            continue
        try:
            index = seen.setdefault(op, len(unique))
        except TypeError:  # an op holding a dict (a filter) is not hashable
            index = len(unique)
        if index == len(unique):
            unique.append(op)
        where.append(index)
    return unique, where


async def _serve(store: Any, items: list[tuple[asyncio.Future[Any], Op]]) -> None:
    unique, where = _deduplicated([op for _, op in items])
    try:
        prepared = prepare_batch(store.state, unique)
    except Exception as exc:
        if len(items) == 1:
            if not items[0][0].done():
                items[0][0].set_exception(exc)
            return
        for item in items:  # each op alone: one caller's bad op fails that caller only
            await _serve(store, [item])
        return
    try:
        results = await store.arun_batch(prepared)
    except Exception as exc:
        for fut, _ in items:
            if not fut.done():
                fut.set_exception(exc)
        return
    for (fut, _), index in zip(items, where, strict=True):
        if not fut.done():
            fut.set_result(results[index])


async def _dispatch(
    queue: asyncio.Queue[tuple[asyncio.Future[Any], Op]], ref: weakref.ReferenceType[Any]
) -> None:
    running: set[asyncio.Task[None]] = set()
    while item := await queue.get():
        items = [item]
        while not queue.empty():
            items.append(queue.get_nowait())
        items = [(fut, op) for fut, op in items if not fut.done()]
        store = ref()
        if store is None:
            return
        if items:
            task = asyncio.get_running_loop().create_task(_serve(store, items))
            running.add(task)
            task.add_done_callback(running.discard)
        del store


class AsyncStoreFront(AsyncBatchedBaseStore):
    """The async store's batching of calls, TTL sweeper and embedding calls.

    Example:
        >>> task = await store.start_ttl_sweeper()  # doctest: +SKIP
    """

    supports_ttl: bool = True
    state: StoreState

    def __init__(self) -> None:
        super().__init__()
        self._ttl_sweeper_task: asyncio.Task[None] | None = None
        self._ttl_stop_event = asyncio.Event()

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(_dispatch(self._aqueue, weakref.ref(self)))

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """The embeddings of `texts`, in one call."""
        embeddings = self.state.index.embeddings if self.state.index else None
        if embeddings is None:
            raise PgvectorMissingError("this store's index config has no embed function")
        return await embeddings.aembed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        """The embedding of one search query."""
        embeddings = self.state.index.embeddings if self.state.index else None
        if embeddings is None:
            raise PgvectorMissingError("this store's index config has no embed function")
        return await embeddings.aembed_query(text)

    async def sweep_ttl(self) -> int:
        """Delete the expired items; how many went."""
        raise NotImplementedError

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Delete expired items every `sweep_interval_minutes` (fractional), in a task.

        Example:
            >>> task = await store.start_ttl_sweeper(0.5)  # doctest: +SKIP
        """
        if not self.ttl_config:
            return asyncio.create_task(asyncio.sleep(0))
        if self._ttl_sweeper_task is not None and not self._ttl_sweeper_task.done():
            return self._ttl_sweeper_task
        self._ttl_stop_event.clear()
        interval = sweep_seconds(self.ttl_config, sweep_interval_minutes)

        async def sweep_loop() -> None:
            while not self._ttl_stop_event.is_set():
                try:
                    await asyncio.wait_for(self._ttl_stop_event.wait(), timeout=interval)
                    return
                except asyncio.TimeoutError:
                    pass
                try:
                    swept = await self.sweep_ttl()
                    if swept:
                        logger.info("store: swept %d expired items", swept)
                except Exception as exc:  # the next sweep tries again
                    logger.warning("store: TTL sweep failed: %s", exc)

        self._ttl_sweeper_task = asyncio.create_task(sweep_loop(), name="pgcheckpoint-ttl-sweeper")
        return self._ttl_sweeper_task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; whether it stopped within `timeout` seconds.

        Example:
            >>> await store.stop_ttl_sweeper(timeout=5)  # doctest: +SKIP
            True
        """
        task = self._ttl_sweeper_task
        if task is None or task.done():
            return True
        self._ttl_stop_event.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=timeout)
        except asyncio.TimeoutError:
            return False
        self._ttl_sweeper_task = None
        return True

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._ttl_stop_event.set()


class StoreFront(BaseStore):
    """The sync store's async methods (a worker thread), TTL sweeper and embedding calls.

    Example:
        >>> future = store.start_ttl_sweeper()  # doctest: +SKIP
    """

    supports_ttl: bool = True
    state: StoreState

    def __init__(self) -> None:
        super().__init__()
        self._ttl_sweeper_thread: threading.Thread | None = None
        self._ttl_stop_event = threading.Event()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch`, in a worker thread."""
        listed: Sequence[Op] = list(ops)
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, listed)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The embeddings of `texts`, in one call."""
        embeddings = self.state.index.embeddings if self.state.index else None
        if embeddings is None:
            raise PgvectorMissingError("this store's index config has no embed function")
        return embeddings.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """The embedding of one search query."""
        embeddings = self.state.index.embeddings if self.state.index else None
        if embeddings is None:
            raise PgvectorMissingError("this store's index config has no embed function")
        return embeddings.embed_query(text)

    def sweep_ttl(self) -> int:
        """Delete the expired items; how many went."""
        raise NotImplementedError

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Delete expired items every `sweep_interval_minutes` (fractional), in a thread.

        Example:
            >>> future = store.start_ttl_sweeper(0.5)  # doctest: +SKIP
        """
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config:
            future.set_result(None)
            return future
        future.add_done_callback(lambda f: self._ttl_stop_event.set() if f.cancelled() else None)
        if self._ttl_sweeper_thread is not None and self._ttl_sweeper_thread.is_alive():
            return future
        self._ttl_stop_event.clear()
        interval = sweep_seconds(self.ttl_config, sweep_interval_minutes)

        def sweep_loop() -> None:
            while not self._ttl_stop_event.wait(interval):
                try:
                    swept = self.sweep_ttl()
                    if swept:
                        logger.info("store: swept %d expired items", swept)
                except Exception as exc:  # the next sweep tries again
                    logger.warning("store: TTL sweep failed: %s", exc)
            if not future.done():
                future.set_result(None)

        thread = threading.Thread(target=sweep_loop, daemon=True, name="pgcheckpoint-ttl-sweeper")
        self._ttl_sweeper_thread = thread
        thread.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; whether it stopped within `timeout` seconds.

        Example:
            >>> store.stop_ttl_sweeper(timeout=5)  # doctest: +SKIP
            True
        """
        thread = self._ttl_sweeper_thread
        if thread is None or not thread.is_alive():
            return True
        self._ttl_stop_event.set()
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._ttl_sweeper_thread = None
        return True

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_ttl_sweeper(timeout=1)

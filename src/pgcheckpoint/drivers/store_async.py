"""`AsyncPostgresStore`: LangGraph's `BaseStore` on PostgreSQL, for asyncio code.

Each batch is planned and encoded by `pgcheckpoint.store.batch`, embedded
here with no connection held, and run as one op through the runner
(`runner_async.AsyncRunner`), on a connection, a pool or a pipeline. This
file is the source of its sync twin, `store.py` (`make sync-twin`); what the
two do differently (batching calls, the TTL sweeper) is in `store_front`.

Example:
    >>> from pgcheckpoint import AsyncPostgresStore
    >>> async with AsyncPostgresStore.from_conn_string(DSN) as store:  # doctest: +SKIP
    ...     await store.setup()
    ...     await store.aput(("users", "u1"), "prefs", {"theme": "dark"})
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import Op, Result, TTLConfig
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from ..schema.migrate import upgrade
from ..store.batch import Prepared, prepare_batch, read_op, sweep_op, write_op
from ..store.state import DEFAULT_MAX_VALUE_BYTES, StoreState, omit_expired
from ..telemetry.config import Telemetry
from ..validate import libpq_dsn
from ._acompat import arun_blocking
from .connections import conninfo_of, pool_settings
from .runner_async import AsyncRunner
from .store_front import AsyncStoreFront, setup_vectors

__all__ = ["AsyncPostgresStore"]


class AsyncPostgresStore(AsyncRunner, AsyncStoreFront):
    """LangGraph's long-term memory on PostgreSQL, for asyncio code.

    Drop-in for `langgraph.store.postgres.AsyncPostgresStore`: the same
    constructor, `from_conn_string`, `setup()`, `index` and `ttl` settings.
    Its sync methods (`get`, `put`, ...) work from other threads while the
    event loop it was created on runs.

    Args:
        conn: A psycopg `AsyncConnection` or a `psycopg_pool.AsyncConnectionPool`.
            Its `autocommit` and `row_factory` settings do not matter; a pool
            passed in is never closed by the store.
        pipe: A pipeline of `conn` to batch statements in (single connection only).
        deserializer: Reads a value's JSON bytes into a dict (default `json.loads`).
        index: Semantic search settings (`dims`, `embed`, `fields`,
            `ann_index_config`, `distance_type`), as the official store's.
        ttl: TTL settings (`default_ttl` and `sweep_interval_minutes` in
            fractional minutes, `refresh_on_read`, `omit_expired`).
        serde: The serializer of values JSON cannot hold; `EncryptedSerde`
            seals every value (see docs/encryption.md).
        filterable: With encryption, the top-level fields kept readable for
            filters; the rest of each value is sealed.
        schema: The Postgres schema that holds the tables.
        telemetry: Where spans and metrics go (`pgcheckpoint.telemetry`).
        max_value_bytes: The largest serialised value a put takes.

    Example:
        >>> store = AsyncPostgresStore(pool)  # doctest: +SKIP
        >>> graph = builder.compile(checkpointer=saver, store=store)  # doctest: +SKIP
    """

    # the official store's migration list, which its tests rewrite; the schema
    # here is pgcheckpoint's Alembic chain
    MIGRATIONS: Sequence[str] = ()

    def __init__(
        self,
        conn: AsyncConnection[Any] | AsyncConnectionPool[Any],
        *,
        pipe: AsyncPipeline | None = None,
        deserializer: Callable[[bytes], dict[str, Any]] | None = None,
        index: Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        serde: SerializerProtocol | None = None,
        filterable: Iterable[str] | None = None,
        schema: str = "public",
        telemetry: Telemetry | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        self.state = StoreState(
            schema=schema,
            serde=serde,
            index=index,
            filterable=filterable,
            deserializer=deserializer,
            max_value_bytes=max_value_bytes,
        )
        super().__init__(conn, pipe, schema=schema, telemetry=telemetry)
        self.queries = self.state.queries
        self.index_config = dict(index) if index else None
        self.embeddings = self.state.index.embeddings if self.state.index else None
        self.ttl_config = ttl

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        pool_config: Mapping[str, Any] | None = None,
        index: Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        serde: SerializerProtocol | None = None,
        filterable: Iterable[str] | None = None,
        schema: str = "public",
        telemetry: Telemetry | None = None,
    ) -> AsyncIterator[AsyncPostgresStore]:
        """Open a store over one new connection (or a pool), closed on exit.

        Args:
            conn_string: A libpq connection string or URI.
            pipeline: Run statements in a psycopg pipeline (one connection).
            pool_config: `AsyncConnectionPool` settings (`min_size`, `max_size`,
                `kwargs`, ...) to open a pool instead of one connection.
            index: Semantic search settings, as the constructor's.
            ttl: TTL settings, as the constructor's.
            serde: The serializer (`EncryptedSerde` to seal values).
            filterable: With encryption, the fields kept readable for filters.
            schema: The Postgres schema that holds the tables.
            telemetry: Where spans and metrics go.

        Example:
            >>> async with AsyncPostgresStore.from_conn_string(DSN) as store:  # doctest: +SKIP
            ...     await store.setup()
        """
        conn_string = libpq_dsn(conn_string)
        options: dict[str, Any] = {
            "index": index,
            "ttl": ttl,
            "serde": serde,
            "filterable": filterable,
            "schema": schema,
            "telemetry": telemetry,
        }
        if pool_config is not None:
            settings = pool_settings(pool_config, asynchronous=True)
            async with (
                AsyncConnectionPool(conn_string, **settings) as opened,
                cls(opened, **options) as store,
            ):
                yield store
            return
        async with await AsyncConnection.connect(
            conn_string, autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as conn:
            if pipeline:
                async with conn.pipeline() as pipe, cls(conn, pipe=pipe, **options) as store:
                    yield store
            else:
                async with cls(conn, **options) as store:
                    yield store

    async def setup(self) -> None:
        """Create or upgrade the tables (pgcheckpoint's Alembic chain), and the vector table.

        Safe when several processes call it at once (a migration lock), on
        any connection (it opens its own). With an `index`, it creates
        pgvector, the vector table and its index, and refuses a `dims` or
        `vector_type` other than the table's.

        Example:
            >>> await store.setup()  # doctest: +SKIP
        """
        conninfo = conninfo_of(self.conn)
        await arun_blocking(
            upgrade,
            conninfo,
            schema=self.schema,
            telemetry=self.telemetry,
            check_at_target=False,
        )
        if self.state.index is not None:
            await arun_blocking(setup_vectors, conninfo, self.schema, self.state.index)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run a batch of ops: reads first (as the store was), then the writes.

        Example:
            >>> await store.abatch([GetOp(("users", "u1"), "prefs")])  # doctest: +SKIP
        """
        return await self.arun_batch(prepare_batch(self.state, ops))

    async def arun_batch(self, prepared: Prepared) -> list[Result]:
        """Embed a prepared batch's texts (no connection held), then run it."""
        index = self.state.index
        if index is not None and prepared.texts:
            vectors = await self.aembed_documents([text for _, _, text in prepared.texts])
            prepared.vectors = index.checked(vectors, len(prepared.texts), "texts")
        for position, op in prepared.plan.queries:
            if index is not None and op.query:
                vector = await self.aembed_query(op.query)
                prepared.query_vectors[position] = index.checked([vector], 1, "query")[0]
        results: list[Result] = [None] * prepared.plan.size
        if prepared.reads:
            omit = omit_expired(self.ttl_config)

            def reads() -> Any:
                return read_op(self.state, prepared, omit_expired=omit)

            results = await self.run(reads(), restart=reads, name="store_read")
        if prepared.puts:
            writes = write_op(self.state, prepared)
            await self.run(writes, atomic=prepared.atomic, name="store_write")
        return results

    async def sweep_ttl(self) -> int:
        """Delete the expired items now; how many went.

        Example:
            >>> await store.sweep_ttl()  # doctest: +SKIP
            3
        """
        return await self.run(sweep_op(), name="store_sweep")

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        # the official store's private cursor, which its own tests use; in the store's
        # pipeline the block's statements are synced as it ends, so that one that
        # failed fails the block rather than the store's next op
        async with self._connection() as conn:
            try:
                async with conn.cursor(row_factory=dict_row) as cur:
                    yield cur
            finally:
                if self.pipe is not None and conn is self.conn:
                    await self.pipe.sync()

# Generated from store_async.py by tools/async_to_sync.py: edit store_async.py and
# run `make sync-twin`; a unit test checks that this file matches.
"""`PostgresStore`: LangGraph's `BaseStore` on PostgreSQL, for synchronous code.

Each batch is planned and encoded by `pgcheckpoint.store.batch`, embedded
here with no connection held, and run as one op through the runner
(`runner.Runner`), on a connection, a pool or a pipeline. This
file is the source of its sync twin, `store.py` (`make sync-twin`); what the
two do differently (batching calls, the TTL sweeper) is in `store_front`.

Example:
    >>> from pgcheckpoint import PostgresStore
    >>> with PostgresStore.from_conn_string(DSN) as store:  # doctest: +SKIP
    ...     store.setup()
    ...     store.put(("users", "u1"), "prefs", {"theme": "dark"})
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import Op, Result, TTLConfig
from psycopg import Connection, Cursor, Pipeline
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from ..schema.migrate import upgrade
from ..store.batch import Prepared, prepare_batch, read_op, sweep_op, write_op
from ..store.state import DEFAULT_MAX_VALUE_BYTES, StoreState, omit_expired
from ..telemetry.config import Telemetry
from ..validate import libpq_dsn
from ._acompat import run_blocking
from .connections import conninfo_of, pool_settings
from .runner import Runner
from .store_front import StoreFront, setup_vectors

__all__ = ["PostgresStore"]


class PostgresStore(Runner, StoreFront):
    """LangGraph's long-term memory on PostgreSQL, for synchronous code.

    Drop-in for `langgraph.store.postgres.PostgresStore`: the same
    constructor, `from_conn_string`, `setup()`, `index` and `ttl` settings.
    Its async methods run the sync batch in a worker thread.

    Args:
        conn: A psycopg `Connection` or a `psycopg_pool.ConnectionPool`.
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
        >>> store = PostgresStore(pool)  # doctest: +SKIP
        >>> graph = builder.compile(checkpointer=saver, store=store)  # doctest: +SKIP
    """

    # the official store's migration list, which its tests rewrite; the schema
    # here is pgcheckpoint's Alembic chain
    MIGRATIONS: Sequence[str] = ()

    def __init__(
        self,
        conn: Connection[Any] | ConnectionPool[Any],
        *,
        pipe: Pipeline | None = None,
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
    @contextmanager
    def from_conn_string(
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
    ) -> Iterator[PostgresStore]:
        """Open a store over one new connection (or a pool), closed on exit.

        Args:
            conn_string: A libpq connection string or URI.
            pipeline: Run statements in a psycopg pipeline (one connection).
            pool_config: `ConnectionPool` settings (`min_size`, `max_size`,
                `kwargs`, ...) to open a pool instead of one connection.
            index: Semantic search settings, as the constructor's.
            ttl: TTL settings, as the constructor's.
            serde: The serializer (`EncryptedSerde` to seal values).
            filterable: With encryption, the fields kept readable for filters.
            schema: The Postgres schema that holds the tables.
            telemetry: Where spans and metrics go.

        Example:
            >>> with PostgresStore.from_conn_string(DSN) as store:  # doctest: +SKIP
            ...     store.setup()
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
            settings = pool_settings(pool_config)
            with (
                ConnectionPool(conn_string, **settings) as opened,
                cls(opened, **options) as store,
            ):
                yield store
            return
        with Connection.connect(
            conn_string, autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as conn:
            if pipeline:
                with conn.pipeline() as pipe, cls(conn, pipe=pipe, **options) as store:
                    yield store
            else:
                with cls(conn, **options) as store:
                    yield store

    def setup(self) -> None:
        """Create or upgrade the tables (pgcheckpoint's Alembic chain), and the vector table.

        Safe when several processes call it at once (a migration lock), on
        any connection (it opens its own). With an `index`, it creates
        pgvector, the vector table and its index, and refuses a `dims` or
        `vector_type` other than the table's.

        Example:
            >>> store.setup()  # doctest: +SKIP
        """
        conninfo = conninfo_of(self.conn)
        run_blocking(
            upgrade,
            conninfo,
            schema=self.schema,
            telemetry=self.telemetry,
            check_at_target=False,
        )
        if self.state.index is not None:
            run_blocking(setup_vectors, conninfo, self.schema, self.state.index)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run a batch of ops: reads first (as the store was), then the writes.

        Example:
            >>> store.batch([GetOp(("users", "u1"), "prefs")])  # doctest: +SKIP
        """
        return self.run_batch(prepare_batch(self.state, ops))

    def run_batch(self, prepared: Prepared) -> list[Result]:
        """Embed a prepared batch's texts (no connection held), then run it."""
        index = self.state.index
        if index is not None and prepared.texts:
            vectors = self.embed_documents([text for _, _, text in prepared.texts])
            prepared.vectors = index.checked(vectors, len(prepared.texts), "texts")
        for position, op in prepared.plan.queries:
            if index is not None and op.query:
                vector = self.embed_query(op.query)
                prepared.query_vectors[position] = index.checked([vector], 1, "query")[0]
        results: list[Result] = [None] * prepared.plan.size
        if prepared.reads:
            omit = omit_expired(self.ttl_config)

            def reads() -> Any:
                return read_op(self.state, prepared, omit_expired=omit)

            results = self.run(reads(), restart=reads, name="store_read")
        if prepared.puts:
            writes = write_op(self.state, prepared)
            self.run(writes, atomic=prepared.atomic, name="store_write")
        return results

    def sweep_ttl(self) -> int:
        """Delete the expired items now; how many went.

        Example:
            >>> store.sweep_ttl()  # doctest: +SKIP
            3
        """
        return self.run(sweep_op(), name="store_sweep")

    @contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Cursor[DictRow]]:
        # the official store's private cursor, which its own tests use; in the store's
        # pipeline the block's statements are synced as it ends, so that one that
        # failed fails the block rather than the store's next op
        with self._connection() as conn:
            try:
                with conn.cursor(row_factory=dict_row) as cur:
                    yield cur
            finally:
                if self.pipe is not None and conn is self.conn:
                    self.pipe.sync()

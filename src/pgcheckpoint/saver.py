"""`PostgresSaver`: the synchronous driver of the core.

Example:
    >>> from pgcheckpoint import PostgresSaver
    >>> with PostgresSaver.from_conn_string("postgresql://postgres@127.0.0.1/app") as saver:  # doctest: +SKIP
    ...     saver.setup()
    ...     graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import Capabilities, Connection, Cursor, Pipeline
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from . import migrate
from .core import Op, SaverCore
from .drivers import conninfo_of, pool_settings, pool_timeout_error
from .queries import Queries

__all__ = ["PostgresSaver"]

T = TypeVar("T")


class PostgresSaver(SaverCore):
    """A LangGraph checkpointer on PostgreSQL, for synchronous code.

    Drop-in for `langgraph.checkpoint.postgres.PostgresSaver`: the same
    constructor, `from_conn_string` and `setup()`.

    Args:
        conn: A psycopg `Connection` or a `psycopg_pool.ConnectionPool`. Its
            `autocommit` and `row_factory` settings do not matter; a pool
            passed in is never closed by the saver.
        pipe: A pipeline of `conn` to batch statements in (single connection only).
        serde: The serializer of values (default: LangGraph's `JsonPlusSerializer`).
        schema: The Postgres schema that holds the tables.

    Example:
        >>> from psycopg_pool import ConnectionPool
        >>> pool = ConnectionPool("postgresql://postgres@127.0.0.1/app")  # doctest: +SKIP
        >>> saver = PostgresSaver(pool)  # doctest: +SKIP
        >>> graph = builder.compile(checkpointer=saver)  # doctest: +SKIP
    """

    def __init__(
        self,
        conn: Connection[Any] | ConnectionPool[Any],
        pipe: Pipeline | None = None,
        serde: SerializerProtocol | None = None,
        *,
        schema: str = "public",
    ) -> None:
        super().__init__(serde=serde)
        if isinstance(conn, ConnectionPool) and pipe is not None:
            raise ValueError(
                "a pipeline belongs to one connection; pass a Connection with pipe=, "
                "or a ConnectionPool without it"
            )
        self.conn = conn
        self.pipe = pipe
        self.lock = threading.Lock()
        self.schema = schema
        self.queries = Queries(schema)
        self.supports_pipeline = Capabilities().has_pipeline()

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        serde: SerializerProtocol | None = None,
        pool: bool | Mapping[str, Any] = False,
        schema: str = "public",
    ) -> Iterator[PostgresSaver]:
        """Open a saver over one new connection (or a pool), closed on exit.

        Args:
            conn_string: A libpq connection string or URI.
            pipeline: Run statements in a psycopg pipeline.
            serde: The serializer of values.
            pool: True, or `ConnectionPool` settings such as
                `{"min_size": 2, "max_size": 20, "timeout": 10}`, to open a pool
                instead of one connection.
            schema: The Postgres schema that holds the tables.

        Example:
            >>> with PostgresSaver.from_conn_string(DSN, pool={"max_size": 8}) as saver:  # doctest: +SKIP
            ...     graph = builder.compile(checkpointer=saver)
        """
        if pool:
            with ConnectionPool(conn_string, **pool_settings(pool)) as opened:
                yield cls(opened, serde=serde, schema=schema)
            return
        with Connection.connect(
            conn_string, autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as conn:
            if pipeline:
                with conn.pipeline() as pipe:
                    yield cls(conn, pipe, serde=serde, schema=schema)
            else:
                yield cls(conn, serde=serde, schema=schema)

    def setup(self) -> None:
        """Create or upgrade the tables (Alembic, to the newest revision).

        Safe when several processes call it at once. Deploy pipelines can run
        `pgcheckpoint migrate` instead; then the application needs no DDL rights.

        Example:
            >>> saver.setup()  # doctest: +SKIP
        """
        migrate.upgrade(conninfo_of(self.conn), schema=self.schema)

    # -- the driver ---------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        if isinstance(self.conn, ConnectionPool):
            try:
                with self.conn.connection() as conn:
                    yield conn
            except PoolTimeout as exc:
                raise pool_timeout_error(self.conn, exc) from exc
        else:
            with self.lock:
                yield self.conn

    def _run(self, op: Op[T], *, atomic: bool = False) -> T:
        with self._connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            in_pipe = self.pipe is not None and conn is self.conn
            if atomic or not conn.autocommit:
                with conn.transaction():
                    result = self._drive(cur, op)
            else:
                result = self._drive(cur, op)
            if in_pipe and self.pipe is not None:
                self.pipe.sync()
            return result

    def _drive(self, cur: Cursor[DictRow], op: Op[T]) -> T:
        try:
            stmt = next(op)
            while True:
                cur.execute(self.queries[stmt.name], stmt.params)
                stmt = op.send(cur.fetchall() if stmt.fetch else [])
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    # -- BaseCheckpointSaver ------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Load the checkpoint `config` names, or the thread's latest.

        Example:
            >>> saver.get_tuple({"configurable": {"thread_id": "t1"}})  # doctest: +SKIP
        """
        return self._run(self.get_tuple_op(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """List checkpoints newest first; `config=None` lists across threads.

        Example:
            >>> list(saver.list({"configurable": {"thread_id": "t1"}}, limit=2))  # doctest: +SKIP
        """
        op = self.list_op(config, filter=filter, before=before, limit=limit)
        rows, recheck = self._run(op)
        yield from self.decode_listed(rows, recheck, limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (one statement, one transaction).

        Example:
            >>> saver.put(config, checkpoint, {"source": "input", "step": -1}, {})  # doctest: +SKIP
        """
        return self._run(self.put_op(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the writes of one task against a checkpoint.

        Example:
            >>> saver.put_writes(config, [("messages", ["hi"])], task_id="t")  # doctest: +SKIP
        """
        self._run(self.put_writes_op(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread: every checkpoint, value and write of it.

        Example:
            >>> saver.delete_thread("t1")  # doctest: +SKIP
        """
        self._run(self.delete_thread_op(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's whole history to another thread id.

        Example:
            >>> saver.copy_thread("t1", "t1-copy")  # doctest: +SKIP
        """
        self._run(self.copy_thread_op(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only each namespace's latest checkpoint, or delete the threads.

        With `keep_latest`, checkpoints that a kept one needs to be rebuilt
        (its `DeltaChannel` history) are kept too.

        Example:
            >>> saver.prune(["t1", "t2"], strategy="keep_latest")  # doctest: +SKIP
        """
        self._run(self.prune_op(thread_ids, strategy=strategy), atomic=True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints and writes that the given runs created.

        Example:
            >>> saver.delete_for_runs(["run-1"])  # doctest: +SKIP
        """
        self._run(self.delete_for_runs_op(run_ids), atomic=True)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes and seed of `DeltaChannel`s along the parent chain, in one query.

        Example:
            >>> saver.get_delta_channel_history(config=config, channels=["messages"])  # doctest: +SKIP
        """
        return self._run(self.delta_history_op(config, channels))

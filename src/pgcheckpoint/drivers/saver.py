# Generated from saver_async.py by tools/async_to_sync.py: edit saver_async.py and
# run `make sync-twin`; a unit test checks that this file matches.
"""`PostgresSaver`: LangGraph's checkpointer API over the core's ops, for synchronous code.

Each method runs one op of `pgcheckpoint.core` (or a sweep) through the
runner (`runner.Runner`); the op's module is imported by name, so a
call site leads to the op it runs. This file is the source of its sync twin,
`saver.py` (`make sync-twin`).

Example:
    >>> from pgcheckpoint import PostgresSaver
    >>> with PostgresSaver.from_conn_string(DSN) as saver:  # doctest: +SKIP
    ...     saver.setup()
    ...     graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import Connection, Pipeline
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ..core.caches import DEFAULT_CACHE_BYTES
from ..core.copies import copy_thread_op
from ..core.deletes import delete_for_runs_sweep, delete_thread_sweep, prune_sweep
from ..core.delta_history import delta_history_op
from ..core.locks import ThreadLock
from ..core.official import OfficialThreads, official_threads_op, warn_official_threads
from ..core.reads import decode_listed, get_tuple_op, list_op
from ..core.writes import put_op, put_writes_op
from ..maintenance.retention import (
    DEFAULT_BATCH_SIZE,
    PruneReport,
    SweepLimits,
    keep_last_sweep,
    older_than_sweep,
)
from ..ops import Op, Row
from ..schema.migrate import upgrade
from ..telemetry.activity import logger
from ..telemetry.config import Telemetry
from ..validate import libpq_dsn
from ._acompat import run_blocking
from .connections import conninfo_of, pool_settings
from .cross_calls import CrossCalls
from .locks import hold_thread_lock, resume_thread
from .runner import Runner
from .thread_locks import ResumableGraph

__all__ = ["PostgresSaver"]


class PostgresSaver(Runner, CrossCalls):
    """A LangGraph checkpointer on PostgreSQL, for synchronous code.

    Drop-in for `langgraph.checkpoint.postgres.PostgresSaver`: the same
    constructor, `from_conn_string` and `setup()`.

    Args:
        conn: A psycopg `Connection` or a `psycopg_pool.ConnectionPool`.
            Its `autocommit` and `row_factory` settings do not matter; a pool
            passed in is never closed by the saver.
        pipe: A pipeline of `conn` to batch statements in (single connection only).
        serde: The serializer of values (default: LangGraph's `JsonPlusSerializer`).
        schema: The Postgres schema that holds the tables.
        telemetry: Where spans and metrics go, and whether they name threads
            (`pgcheckpoint.telemetry.Telemetry`); default the global providers,
            without thread ids.
        cache_bytes: The memory the saver may keep between calls (stored lists
            for deltas, decoded `DeltaChannel` values), shared with its
            `with_allowlist` copies; 0 keeps nothing. See docs/memory.md.

    Example:
        >>> pool = ConnectionPool(DSN)  # doctest: +SKIP
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
        telemetry: Telemetry | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        super().__init__(
            conn, pipe, schema=schema, telemetry=telemetry, serde=serde, cache_bytes=cache_bytes
        )
        # whether this saver looked for the official saver's threads yet (first read)
        self.official_checked = False

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
        telemetry: Telemetry | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> Iterator[PostgresSaver]:
        """Open a saver over one new connection (or a pool), closed on exit.

        Args:
            conn_string: A libpq connection string or URI (a Unix-socket
                directory as `host=/path`, a SQLAlchemy-style
                `postgresql+psycopg://` URL as well).
            pipeline: Run statements in a psycopg pipeline.
            serde: The serializer of values.
            pool: True, or `ConnectionPool` settings such as
                `{"min_size": 2, "max_size": 20, "timeout": 10}`, to open a pool
                instead of one connection.
            schema: The Postgres schema that holds the tables.
            telemetry: Where spans and metrics go (`pgcheckpoint.telemetry`).
            cache_bytes: The memory the saver may keep between calls; 0 keeps nothing.

        Example:
            >>> with PostgresSaver.from_conn_string(DSN) as saver:  # doctest: +SKIP
            ...     graph = builder.compile(checkpointer=saver)
        """
        conn_string = libpq_dsn(conn_string)
        if pool:
            with ConnectionPool(conn_string, **pool_settings(pool)) as opened:
                yield cls(
                    opened,
                    serde=serde,
                    schema=schema,
                    telemetry=telemetry,
                    cache_bytes=cache_bytes,
                )
            return
        with Connection.connect(
            conn_string, autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as conn:
            if pipeline:
                with conn.pipeline() as pipe:
                    yield cls(
                        conn,
                        pipe,
                        serde=serde,
                        schema=schema,
                        telemetry=telemetry,
                        cache_bytes=cache_bytes,
                    )
            else:
                yield cls(
                    conn, serde=serde, schema=schema, telemetry=telemetry, cache_bytes=cache_bytes
                )

    def setup(self) -> None:
        """Create or upgrade the tables (Alembic, to the newest revision).

        Safe when several processes call it at once. Deploy pipelines can run
        `pgcheckpoint migrate` instead; then the application needs no DDL rights.
        Logs a warning when the official saver's tables in the schema hold
        threads pgcheckpoint's do not (see `check_official_threads`).

        Example:
            >>> saver.setup()  # doctest: +SKIP
        """
        run_blocking(
            upgrade,
            conninfo_of(self.conn),
            schema=self.schema,
            telemetry=self.telemetry,
            check_at_target=False,
        )
        self.check_official_threads()

    def check_official_threads(self) -> OfficialThreads | None:
        """Warn when the official saver's tables hold threads pgcheckpoint's do not.

        After switching from langgraph-checkpoint-postgres, its threads stay in
        its own tables until `pgcheckpoint import-langgraph` copies them; until
        then they look empty. `setup()` and the saver's first read call this
        (once per saver): a warning on the `pgcheckpoint` logger names the
        command. It never fails: an error only skips the check.

        Returns:
            What was found, or None.

        Example:
            >>> found = saver.check_official_threads()  # doctest: +SKIP
            >>> found.missing if found else 0  # doctest: +SKIP
            12
        """
        self.official_checked = True
        try:
            found = self.run(official_threads_op(self.schema))
        except PoolTimeout:
            raise  # the read would wait for the pool again
        except Exception as exc:  # the read it comes before must not fail because of it
            logger.debug("could not look for the official saver's threads: %s", exc)
            return None
        warn_official_threads(found, thread_ids=self.telemetry.thread_ids)
        return found

    # -- BaseCheckpointSaver -------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Load the checkpoint `config` names, or the thread's latest.

        Example:
            >>> saver.get_tuple({"configurable": {"thread_id": "t1"}})  # doctest: +SKIP
        """

        def reading() -> Op[CheckpointTuple | None]:
            return get_tuple_op(self, config)

        if not self.official_checked:
            self.check_official_threads()
        # it only reads (a pre-v4 checkpoint's sends in a second statement): a lost
        # connection starts it over
        return self.run(reading(), restart=reading)

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
            >>> [t for t in saver.list(config, limit=2)]  # doctest: +SKIP
        """

        def listing() -> Op[tuple[list[Row], Mapping[str, Any] | None]]:
            return list_op(self, config, filter=filter, before=before, limit=limit)

        if not self.official_checked:
            self.check_official_threads()
        # two statements that only read: a lost connection starts the listing over
        rows, recheck = self.run(listing(), restart=listing)
        for tup in decode_listed(self, rows, recheck, limit):
            yield tup

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (one statement, one transaction).

        Example:
            >>> saver.put(config, checkpoint, {"source": "input"}, {})  # doctest: +SKIP
        """
        return self.run(put_op(self, config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the writes of one task against a checkpoint.

        Example:
            >>> saver.put_writes(config, [("messages", ["hi"])], "t")  # doctest: +SKIP
        """
        if not self.run(put_writes_op(self, config, writes, task_id, task_path)):
            # a delete of the thread was in the way: wait for it, then save in one transaction
            op = put_writes_op(self, config, writes, task_id, task_path, after_delete=True)
            self.run(op, atomic=True)

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread: every checkpoint, value and write of it.

        Safe while a run writes to the thread: when it returns, no row of the
        thread is left; the run's next save fails with `MissingParentError`.

        Example:
            >>> saver.delete_thread("t1")  # doctest: +SKIP
        """
        self.run_each(delete_thread_sweep(self, thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's whole history to another thread id.

        Example:
            >>> saver.copy_thread("t1", "t1-copy")  # doctest: +SKIP
        """
        self.run(copy_thread_op(self, source_thread_id, target_thread_id), atomic=True)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only each namespace's latest checkpoint, or delete the threads.

        With `keep_latest`, checkpoints that a kept one needs to be rebuilt
        (its `DeltaChannel` history) are kept too.

        Example:
            >>> saver.prune(["t1", "t2"], strategy="keep_latest")  # doctest: +SKIP
        """
        self.run_each(prune_sweep(self, thread_ids, strategy=strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints and writes that the given runs created.

        Example:
            >>> saver.delete_for_runs(["run-1"])  # doctest: +SKIP
        """
        self.run_each(delete_for_runs_sweep(self, run_ids))

    def prune_older_than(
        self,
        older_than: timedelta,
        *,
        strategy: str = "delete",
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_threads: int | None = None,
        max_seconds: float | None = None,
        dry_run: bool = False,
        progress: Callable[[PruneReport], None] | None = None,
        sweep_store: bool = False,
    ) -> PruneReport:
        """Delete the threads idle for longer than `older_than`, or trim them.

        A thread's age is that of its newest checkpoint, in any namespace.
        `delete` deletes such threads whole; `keep_latest` keeps each one's
        newest checkpoint per namespace (with what it needs to be rebuilt) and
        deletes the rest. Safe while the application runs: see
        `pgcheckpoint.maintenance.retention`.

        Args:
            older_than: How long a thread must have been idle.
            strategy: `delete` or `keep_latest`.
            batch_size: Threads per transaction.
            max_threads: Stop after looking at this many threads.
            max_seconds: Start no new batch after this many seconds.
            dry_run: Count what would go; change nothing.
            progress: Called with the report so far after each batch (and
                once before the first, with `total` counted).
            sweep_store: Then delete the store's expired items too
                (`pgc_store`; `report.store_items` counts them).

        Returns:
            What went (or would go), and the threads skipped or failed.

        Example:
            >>> report = saver.prune_older_than(timedelta(days=30))  # doctest: +SKIP
            >>> report.threads, report.checkpoints  # doctest: +SKIP
            (12, 480)
        """
        limits = SweepLimits(batch_size, max_threads, max_seconds, dry_run, progress, sweep_store)
        sweep = older_than_sweep(self, older_than, strategy=strategy, limits=limits)
        return self.run_each(sweep, name="prune_older_than")

    def prune_keep_last(
        self,
        keep: int,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_threads: int | None = None,
        max_seconds: float | None = None,
        dry_run: bool = False,
        progress: Callable[[PruneReport], None] | None = None,
        sweep_store: bool = False,
    ) -> PruneReport:
        """Trim every thread to its newest `keep` checkpoints per namespace, whatever their age.

        Checkpoints a kept one needs to be rebuilt (`DeltaChannel` history) stay.
        The other arguments are those of `prune_older_than`.

        Example:
            >>> saver.prune_keep_last(20, dry_run=True).checkpoints  # doctest: +SKIP
            1200
        """
        limits = SweepLimits(batch_size, max_threads, max_seconds, dry_run, progress, sweep_store)
        return self.run_each(keep_last_sweep(self, keep, limits=limits), name="prune_keep_last")

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes and seed of `DeltaChannel`s along the parent chain, in one query.

        Example:
            >>> saver.get_delta_channel_history(config=cfg, channels=["m"])  # doctest: +SKIP
        """
        wanted = list(channels)  # read again if the op starts over

        def history() -> Op[dict[str, DeltaChannelHistory]]:
            return delta_history_op(self, config, wanted)

        return self.run(history(), restart=history, name="get_delta_channel_history")

    # -- thread locks -------------------------------------------------------------

    def lock_thread(
        self, thread_id: str, timeout: float | None = 0
    ) -> AbstractContextManager[ThreadLock]:
        """Hold a thread's lock: no other worker runs the thread until the block ends.

        A PostgreSQL advisory lock on a connection reserved for the block:
        taken from the pool (at most `max_size - 1` at once, so one is always
        left for saving checkpoints), or a new connection for a saver over one
        connection. A guarded run thus needs one connection more than an
        unguarded one. Behind a pooler (pgbouncer in session or transaction
        mode) the lock lives in a transaction kept open for the block, which
        pins one server session. The lock is released however the block ends;
        if the process dies or the connection drops, PostgreSQL frees it as
        soon as it sees the session (or transaction) end. Sync and async savers
        take the same lock.

        Args:
            thread_id: The thread to lock.
            timeout: 0 tries once; a number of seconds waits up to that long
                (waiters are served in turn); None waits until the thread is free.

        Yields:
            The `ThreadLock` held, with the backend pid that holds it.

        Raises:
            ThreadBusyError: Another worker holds the lock (its backend pid in
                `holder_pid`, when PostgreSQL can tell), or this block already does.
            PgCheckpointError: The connection goes through a pooler that shares
                server sessions between clients, where the lock cannot work.

        Example:
            >>> with saver.lock_thread("t1", timeout=5):  # doctest: +SKIP
            ...     graph.invoke(Command(resume="yes"), config)
        """
        return hold_thread_lock(self, thread_id, timeout)

    def resume(
        self,
        graph: ResumableGraph,
        config: RunnableConfig,
        value: Any,
        *,
        timeout: float | None = 0,
        **invoke_kwargs: Any,
    ) -> Any:
        """Resume an interrupted thread under its lock: lock, `invoke`, unlock.

        Runs `graph.invoke(Command(resume=value), config, **invoke_kwargs)` in
        `lock_thread`. With `timeout=0` a second resume of the same thread (a
        double click, a redelivered message) fails with `ThreadBusyError`
        instead of running the node twice; with a timeout it runs after the
        first, from the checkpoint the first one left.

        Args:
            graph: A graph compiled with `checkpointer=` this saver.
            config: The thread's config, `{"configurable": {"thread_id": ...}}`.
            value: What `interrupt()` returns in the resumed node.
            timeout: As in `lock_thread`.
            **invoke_kwargs: Passed to `graph.invoke`.

        Returns:
            What `graph.invoke` returns.

        Example:
            >>> config = {"configurable": {"thread_id": "t1"}}
            >>> saver.resume(graph, config, "approve", timeout=0)  # doctest: +SKIP
        """
        return resume_thread(self, graph, config, value, timeout=timeout, **invoke_kwargs)

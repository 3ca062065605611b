# Generated from aio.py by tools/async_to_sync.py: edit aio.py and run
# `make sync-twin`; a unit test checks that this file matches.
"""`PostgresSaver`: the synchronous driver of the core.

Example:
    >>> from pgcheckpoint import PostgresSaver
    >>> with PostgresSaver.from_conn_string(DSN) as saver:  # doctest: +SKIP
    ...     saver.setup()
    ...     graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from time import monotonic
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
from psycopg import Capabilities, Connection, Cursor, Error, Pipeline
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from . import migrate
from .blocking import RefusesAsync
from .caches import DEFAULT_CACHE_BYTES
from .drivers import (
    POOL_PATIENCE,
    SCHEMA_ERRORS,
    Cursors,
    bypass_connect_args,
    conninfo_of,
    cursor_of,
    libpq_dsn,
    pool_outage,
    pool_settings,
    pool_timeout_error,
    release_results,
    schema_error,
    schema_revision_op,
)
from .errors import (
    PoolTimeoutError,
    SchemaOutOfDateError,
    ThreadBusyError,
)
from .locking import (
    ResumableGraph,
    ThreadLock,
    acquire_op,
    holding,
    log_lost,
    log_not_held,
    not_held_error,
    pool_lock_slots,
    release_op,
    resume_command,
    slots_timeout_message,
)
from .maintenance.retention import (
    DEFAULT_BATCH_SIZE,
    PruneReport,
    keep_last_sweep,
    older_than_sweep,
)
from .official import OfficialThreads, official_threads_op, warn_official_threads
from .ops import On, Op, OpRun, Row, Sweep
from .queries import Queries
from .telemetry import DEFAULT_TELEMETRY, Activity, Telemetry, logger, observe
from .validate import thread_of

__all__ = ["PostgresSaver"]

T = TypeVar("T")


class PostgresSaver(RefusesAsync):
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
        super().__init__(serde=serde, cache_bytes=cache_bytes)
        if isinstance(conn, ConnectionPool) and pipe is not None:
            raise ValueError(
                "a pipeline belongs to one connection; pass a Connection with pipe=, "
                "or a ConnectionPool without it"
            )
        self.conn = conn
        self.pipe = pipe
        self.lock = threading.Lock()
        # the cursor kept per connection (drivers.cursor_of), used under self.lock
        self.cursors: Cursors = weakref.WeakKeyDictionary()
        self.schema = schema
        self.queries = Queries(schema)
        self.supports_pipeline = Capabilities().has_pipeline()
        self.telemetry = telemetry or DEFAULT_TELEMETRY
        if isinstance(conn, ConnectionPool):
            self.telemetry.watch_pool(conn)
            # when to connect without the pool, while it fails to (drivers.PoolOutage)
            self.outage = pool_outage(conn, threading.BoundedSemaphore)
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
        migrate.upgrade(
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
        warn_official_threads(found)
        return found

    # -- the driver ---------------------------------------------------------------

    @contextmanager
    def _connection(self, *, lost: bool = False) -> Iterator[Connection[Any]]:
        # `lost`: the operation lost its connection a moment ago
        if isinstance(self.conn, ConnectionPool):
            conn, pooled = self._take(self.conn, lost=lost)
            try:
                yield conn
            finally:
                self._give_back(self.conn, conn, pooled)
        else:
            with self.lock:
                yield self.conn

    def _take(
        self, pool: ConnectionPool[Any], *, lost: bool = False
    ) -> tuple[Connection[Any], bool]:
        # A connection for an operation, and whether it is the pool's. When the
        # pool has none ready and is failing to connect, the saver tries the
        # server itself, so it is back as soon as the server is, whatever the
        # pool's back-off (drivers.PoolOutage).
        outage = self.outage
        deadline = monotonic() + pool.timeout
        wait = outage.first_wait()
        while True:
            try:
                conn = pool.getconn(timeout=max(min(wait, deadline - monotonic()), 0.001))
            except PoolTimeout as exc:
                timed_out = exc
            else:
                outage.served()
                return conn, True
            left = deadline - monotonic()
            if not outage.suspected(pool, lost=lost):
                if left <= 0:
                    raise pool_timeout_error(pool, timed_out) from timed_out
                wait = left  # busy, not failing: wait in line
                continue
            own = self._connect_bypassing(pool, left)
            if own is not None:
                return own, False
            if deadline - monotonic() <= 0:
                raise pool_timeout_error(pool, timed_out, outage.error) from timed_out
            wait = POOL_PATIENCE

    def _connect_bypassing(self, pool: ConnectionPool[Any], left: float) -> Connection[Any] | None:
        # a connection of the saver's own, as the pool's would be, or None
        args = bypass_connect_args(pool, left)
        if args is None:
            return None
        slots = self.outage.slots
        if not slots.acquire(blocking=False):
            return None
        try:
            conn: Connection[Any] = pool.connection_class.connect(args[0], **args[1])
        except Error as exc:
            slots.release()
            self.outage.failed(exc)
            return None
        except BaseException:  # cancelled, interrupted
            slots.release()
            raise
        self.outage.connected()
        return conn

    def _give_back(self, pool: ConnectionPool[Any], conn: Connection[Any], pooled: bool) -> None:
        if pooled:
            pool.putconn(conn)
            return
        try:
            conn.close()
        finally:
            self.outage.slots.release()

    def run(
        self,
        op: Op[T],
        *,
        atomic: bool = False,
        restart: Callable[[], Op[T]] | None = None,
        name: str | None = None,
    ) -> T:
        """Run an op (`pgcheckpoint.ops`) to its result: the one way every operation runs.

        Over a pool, on a connection taken for the op; over one connection,
        under the saver's lock. A schema that lacks a table raises
        `SchemaOutOfDateError` naming the command that fixes it.

        Args:
            op: The op.
            atomic: Run it in one transaction (else each statement commits
                on its own, or joins the caller's open transaction).
            restart: For an op that only reads: makes it anew, so a connection
                lost at any of its statements starts it over on another one.
            name: The operation's name in spans and logs, if not the op's
                function's without `_op` (`pgcheckpoint.telemetry`).

        Example:
            >>> from pgcheckpoint.maintenance.stats import storage_stats_op
            >>> saver.run(storage_stats_op(saver.schema)).threads  # doctest: +SKIP
            12
        """
        with observe(self, op, name) as activity:
            return self._run(op, restart, activity, atomic=atomic)

    def _run(
        self, op: Op[T], restart: Callable[[], Op[T]] | None, activity: Activity, *, atomic: bool
    ) -> T:
        try:
            run = OpRun(
                op,
                pooled=isinstance(self.conn, ConnectionPool),
                restart=restart,
                activity=activity,
            )
        except StopIteration as done:  # nothing to run
            return done.value  # type: ignore[no-any-return]
        try:
            lost = False
            while True:
                with self._connection(lost=lost) as conn:
                    try:
                        return self._run_on(conn, run, atomic=atomic)
                    except Error as exc:
                        if not run.may_retry(exc, conn):
                            raise
                try:
                    run = run.again()
                except StopIteration as done:  # made anew, it needed no statement
                    return done.value  # type: ignore[no-any-return]
                if isinstance(self.conn, ConnectionPool):
                    # what broke this connection (a restart) broke the idle ones too
                    self.conn.check()
                lost = True
        except SCHEMA_ERRORS as exc:
            error = self._schema_error()
            if error is None:
                raise
            raise error from exc

    def run_each(self, sweep: Sweep[T], *, name: str | None = None) -> T:
        """Run a sweep: each op it yields in a transaction of its own, to its result.

        Each op's result goes back into the sweep, or its error is raised there
        (the sweep may handle it and go on). An `On(saver, op)` runs on that saver.
        `name` names the sweep in spans and logs, if not its function's
        without `_sweep`.

        Example:
            >>> from pgcheckpoint.maintenance.rotation import rotation_sweep
            >>> report = saver.run_each(rotation_sweep(saver))  # doctest: +SKIP
        """
        with observe(self, sweep, name, sweep=True):
            return self._run_each(sweep)

    def _run_each(self, sweep: Sweep[T]) -> T:
        try:
            step = next(sweep)
            while True:
                try:
                    if isinstance(step, On):
                        result = step.saver.run(step.op, atomic=True)
                    else:
                        result = self.run(step, atomic=True)
                except Exception as exc:
                    step = sweep.throw(exc)
                else:
                    step = sweep.send(result)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _schema_error(self) -> SchemaOutOfDateError | None:
        try:
            revision = self.run(schema_revision_op(self.schema))
        except Exception:  # the original error says more than a failed check
            return None
        return schema_error(self.schema, revision)

    def _run_on(self, conn: Connection[Any], run: OpRun[T], *, atomic: bool) -> T:
        cur = cursor_of(conn, self.cursors)
        try:
            return self._run_with(cur, run, atomic=atomic)
        finally:
            release_results(cur, self.cursors)

    def _run_with(self, cur: Cursor[DictRow], run: OpRun[T], *, atomic: bool) -> T:
        conn = cur.connection
        in_pipe = self.pipe is not None and conn is self.conn
        if run.activity is not None:
            run.activity.connected(conn, atomic=atomic, pipelined=in_pipe)
        if atomic:
            with conn.transaction():
                result = self._drive(cur, run)
        elif conn.autocommit:
            result = self._drive(cur, run)
        elif in_pipe or conn.info.transaction_status != TransactionStatus.IDLE:
            # inside the caller's transaction (or pipeline): a savepoint there
            with conn.transaction():
                result = self._drive(cur, run)
        else:
            # A caller's idle connection without autocommit: run in autocommit
            # rather than BEGIN ... COMMIT, so a statement that succeeded is
            # not lost to a COMMIT that fails (a restart between the two), and
            # two round trips are saved. The caller's setting comes back after.
            conn.autocommit = True
            try:
                result = self._drive(cur, run)
            finally:
                if not conn.closed:
                    conn.autocommit = False
        if in_pipe and self.pipe is not None:
            self.pipe.sync()
        return result

    def _drive(self, cur: Cursor[DictRow], op: Op[T] | OpRun[T]) -> T:
        try:
            run = op if isinstance(op, OpRun) else OpRun(op)
            prepare = self.queries.prepare
            stmt = run.first
            while True:
                try:
                    cur.execute(self.queries[stmt.name], stmt.params, prepare=prepare[stmt.name])
                    if stmt.fetch:
                        rows = cur.fetchall()
                    elif stmt.count:
                        # in a pipeline the count comes with the result: flush and fetch
                        # it as fetchall does (psycopg's own check; nothing otherwise).
                        # Pipeline.sync() right after a statement of megabytes hangs.
                        cur._fetch_pipeline()
                        rows = [{}] * max(cur.rowcount, 0)
                    else:
                        rows = []
                except Error as exc:  # raised at the op's yield: it may handle it
                    stmt = run.throw(exc, cur.connection)
                else:
                    stmt = run.send(rows)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    # -- BaseCheckpointSaver -------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Load the checkpoint `config` names, or the thread's latest.

        Example:
            >>> saver.get_tuple({"configurable": {"thread_id": "t1"}})  # doctest: +SKIP
        """
        if not self.official_checked:
            self.check_official_threads()
        return self.run(self.get_tuple_op(config))

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
            return self.list_op(config, filter=filter, before=before, limit=limit)

        if not self.official_checked:
            self.check_official_threads()
        # two statements that only read: a lost connection starts the listing over
        rows, recheck = self.run(listing(), restart=listing)
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
            >>> saver.put(config, checkpoint, {"source": "input"}, {})  # doctest: +SKIP
        """
        return self.run(self.put_op(config, checkpoint, metadata, new_versions))

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
        if not self.run(self.put_writes_op(config, writes, task_id, task_path)):
            # a delete of the thread was in the way: wait for it, then save in one transaction
            op = self.put_writes_op(config, writes, task_id, task_path, after_delete=True)
            self.run(op, atomic=True)

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread: every checkpoint, value and write of it.

        Safe while a run writes to the thread: when it returns, no row of the
        thread is left; the run's next save fails with `MissingParentError`.

        Example:
            >>> saver.delete_thread("t1")  # doctest: +SKIP
        """
        self.run_each(self.delete_thread_sweep(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's whole history to another thread id.

        Example:
            >>> saver.copy_thread("t1", "t1-copy")  # doctest: +SKIP
        """
        self.run(self.copy_thread_op(source_thread_id, target_thread_id), atomic=True)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only each namespace's latest checkpoint, or delete the threads.

        With `keep_latest`, checkpoints that a kept one needs to be rebuilt
        (its `DeltaChannel` history) are kept too.

        Example:
            >>> saver.prune(["t1", "t2"], strategy="keep_latest")  # doctest: +SKIP
        """
        self.run_each(self.prune_sweep(thread_ids, strategy=strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints and writes that the given runs created.

        Example:
            >>> saver.delete_for_runs(["run-1"])  # doctest: +SKIP
        """
        self.run_each(self.delete_for_runs_sweep(run_ids))

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
    ) -> PruneReport:
        """Delete the threads idle for longer than `older_than`, or trim them.

        A thread's age is that of its newest checkpoint, in any namespace.
        `delete` deletes such threads whole; `keep_latest` keeps each one's
        newest checkpoint per namespace (with what it needs to be rebuilt) and
        deletes the rest. Safe while the application runs: see
        `pgcheckpoint.retention`.

        Args:
            older_than: How long a thread must have been idle.
            strategy: `delete` or `keep_latest`.
            batch_size: Threads per transaction.
            max_threads: Stop after looking at this many threads.
            max_seconds: Start no new batch after this many seconds.
            dry_run: Count what would go; change nothing.
            progress: Called with the report so far after each batch (and
                once before the first, with `total` counted).

        Returns:
            What went (or would go), and the threads skipped or failed.

        Example:
            >>> report = saver.prune_older_than(timedelta(days=30))  # doctest: +SKIP
            >>> report.threads, report.checkpoints  # doctest: +SKIP
            (12, 480)
        """
        return self.run_each(
            older_than_sweep(
                self,
                older_than,
                strategy=strategy,
                schema=self.schema,
                batch_size=batch_size,
                max_threads=max_threads,
                max_seconds=max_seconds,
                dry_run=dry_run,
                progress=progress,
            ),
            name="prune_older_than",
        )

    def prune_keep_last(
        self,
        keep: int,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_threads: int | None = None,
        max_seconds: float | None = None,
        dry_run: bool = False,
        progress: Callable[[PruneReport], None] | None = None,
    ) -> PruneReport:
        """Trim every thread to its newest `keep` checkpoints per namespace, whatever their age.

        Checkpoints a kept one needs to be rebuilt (`DeltaChannel` history) stay.
        The other arguments are those of `prune_older_than`.

        Example:
            >>> saver.prune_keep_last(20, dry_run=True).checkpoints  # doctest: +SKIP
            1200
        """
        return self.run_each(
            keep_last_sweep(
                self,
                keep,
                schema=self.schema,
                batch_size=batch_size,
                max_threads=max_threads,
                max_seconds=max_seconds,
                dry_run=dry_run,
                progress=progress,
            ),
            name="prune_keep_last",
        )

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes and seed of `DeltaChannel`s along the parent chain, in one query.

        Example:
            >>> saver.get_delta_channel_history(config=cfg, channels=["m"])  # doctest: +SKIP
        """
        wanted = list(channels)  # read again if the op starts over

        def history() -> Op[dict[str, DeltaChannelHistory]]:
            return self.delta_history_op(config, wanted)

        return self.run(history(), restart=history, name="get_delta_channel_history")

    # -- thread locks -------------------------------------------------------------

    @contextmanager
    def lock_thread(self, thread_id: str, timeout: float | None = 0) -> Iterator[ThreadLock]:
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
        with self._lock_connection() as conn:
            op = acquire_op(
                thread_id,
                schema=self.schema,
                timeout=timeout,
                client_pid=conn.info.backend_pid,
            )
            lock = self._drive_lock(conn, op, "lock_thread", thread_id)
            try:
                with holding(lock):
                    yield lock
            except BaseException:
                if not self._unlock(conn, lock):
                    log_not_held(lock)
                raise
            if not self._unlock(conn, lock):
                raise not_held_error(lock)

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
        command = resume_command(graph, self, value)
        with self.lock_thread(thread_of(config)[0], timeout=timeout):
            return graph.invoke(command, config, **invoke_kwargs)

    @contextmanager
    def _lock_connection(self) -> Iterator[Connection[Any]]:
        if not isinstance(self.conn, ConnectionPool):
            # the saver's own connection keeps serving its statements meanwhile
            with Connection.connect(
                conninfo_of(self.conn), autocommit=True, prepare_threshold=None
            ) as conn:
                yield conn
            return
        pool = self.conn
        slots = pool_lock_slots(pool, threading.BoundedSemaphore)
        if not slots.acquire(timeout=pool.timeout):
            raise PoolTimeoutError(slots_timeout_message(pool))
        try:
            conn, pooled = self._take(pool)
            if pooled:
                try:
                    # held for a whole run, so worth a round trip: one an outage
                    # broke is replaced, as `run` replaces one
                    pool.check_connection(conn)
                except Error:
                    pool.putconn(conn)
                    pool.check()
                    conn, pooled = self._take(pool, lost=True)
            autocommit = conn.autocommit
            try:
                conn.autocommit = True
                yield conn
            finally:
                if pooled and not conn.closed and not autocommit:
                    conn.autocommit = False
                self._give_back(pool, conn, pooled)  # a closed one is replaced
        finally:
            slots.release()

    def _drive_lock(self, conn: Connection[Any], op: Op[T], name: str, thread_id: str) -> T:
        with observe(self, op, name, thread_id=thread_id) as activity:
            try:
                with conn.cursor(row_factory=dict_row) as cur:
                    activity.connected(conn, atomic=False, pipelined=False)
                    return self._drive(cur, OpRun(op, activity=activity))
            except ThreadBusyError:
                raise  # not taken: the connection holds nothing
            except BaseException:
                conn.close()  # it may hold the lock; ending the session frees it
                raise

    def _unlock(self, conn: Connection[Any], lock: ThreadLock) -> bool:
        # False when the session no longer held the lock (then closed)
        try:
            released = self._drive_lock(conn, release_op(lock), "unlock_thread", lock.thread_id)
        except Error as exc:
            log_lost(lock, exc)
            return True
        if not released:
            conn.close()
        return released

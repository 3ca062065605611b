"""`AsyncPostgresSaver`: the asyncio driver of the core.

Example:
    >>> from pgcheckpoint import AsyncPostgresSaver
    >>> async with AsyncPostgresSaver.from_conn_string(DSN) as saver:  # doctest: +SKIP
    ...     await saver.setup()
    ...     graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
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
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline, Capabilities, Error
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from . import migrate
from .blocking import SyncFromThreads  # sync: from .blocking import RefusesAsync
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

__all__ = ["AsyncPostgresSaver"]

T = TypeVar("T")



class AsyncPostgresSaver(SyncFromThreads):  # sync: class PostgresSaver(RefusesAsync):
    """A LangGraph checkpointer on PostgreSQL, for asyncio code.

    Drop-in for `langgraph.checkpoint.postgres.aio.AsyncPostgresSaver`. Its
    sync methods (`get_tuple`, `list`, ...) work from other threads while the
    event loop it was created on runs.

    Args:
        conn: A psycopg `AsyncConnection` or a `psycopg_pool.AsyncConnectionPool`.
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
        >>> pool = AsyncConnectionPool(DSN)  # doctest: +SKIP
        >>> saver = AsyncPostgresSaver(pool)  # doctest: +SKIP
        >>> graph = builder.compile(checkpointer=saver)  # doctest: +SKIP
    """

    def __init__(
        self,
        conn: AsyncConnection[Any] | AsyncConnectionPool[Any],
        pipe: AsyncPipeline | None = None,
        serde: SerializerProtocol | None = None,
        *,
        schema: str = "public",
        telemetry: Telemetry | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        super().__init__(serde=serde, cache_bytes=cache_bytes)
        if isinstance(conn, AsyncConnectionPool) and pipe is not None:
            raise ValueError(
                "a pipeline belongs to one connection; pass an AsyncConnection with pipe=, "
                "or an AsyncConnectionPool without it"
            )
        self.conn = conn
        self.pipe = pipe
        self.lock = asyncio.Lock()
        # the cursor kept per connection (drivers.cursor_of), used under self.lock
        self.cursors: Cursors = weakref.WeakKeyDictionary()
        self.loop = asyncio.get_running_loop()  # async-only
        self.schema = schema
        self.queries = Queries(schema)
        self.supports_pipeline = Capabilities().has_pipeline()
        self.telemetry = telemetry or DEFAULT_TELEMETRY
        if isinstance(conn, AsyncConnectionPool):
            self.telemetry.watch_pool(conn)
            # when to connect without the pool, while it fails to (drivers.PoolOutage)
            self.outage = pool_outage(conn, asyncio.BoundedSemaphore)
        # whether this saver looked for the official saver's threads yet (first read)
        self.official_checked = False

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        serde: SerializerProtocol | None = None,
        pool: bool | Mapping[str, Any] = False,
        schema: str = "public",
        telemetry: Telemetry | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> AsyncIterator[AsyncPostgresSaver]:
        """Open a saver over one new connection (or a pool), closed on exit.

        Args:
            conn_string: A libpq connection string or URI (a Unix-socket
                directory as `host=/path`, a SQLAlchemy-style
                `postgresql+psycopg://` URL as well).
            pipeline: Run statements in a psycopg pipeline.
            serde: The serializer of values.
            pool: True, or `AsyncConnectionPool` settings such as
                `{"min_size": 2, "max_size": 20, "timeout": 10}`, to open a pool
                instead of one connection.
            schema: The Postgres schema that holds the tables.
            telemetry: Where spans and metrics go (`pgcheckpoint.telemetry`).
            cache_bytes: The memory the saver may keep between calls; 0 keeps nothing.

        Example:
            >>> async with AsyncPostgresSaver.from_conn_string(DSN) as saver:  # doctest: +SKIP
            ...     graph = builder.compile(checkpointer=saver)
        """
        conn_string = libpq_dsn(conn_string)
        if pool:
            async with AsyncConnectionPool(
                conn_string, **pool_settings(pool, asynchronous=True)
            ) as opened:
                yield cls(
                    opened,
                    serde=serde,
                    schema=schema,
                    telemetry=telemetry,
                    cache_bytes=cache_bytes,
                )
            return
        async with await AsyncConnection.connect(
            conn_string, autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as conn:
            if pipeline:
                async with conn.pipeline() as pipe:
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

    async def setup(self) -> None:
        """Create or upgrade the tables (Alembic, to the newest revision).

        Safe when several processes call it at once. Deploy pipelines can run
        `pgcheckpoint migrate` instead; then the application needs no DDL rights.
        Logs a warning when the official saver's tables in the schema hold
        threads pgcheckpoint's do not (see `check_official_threads`).

        Example:
            >>> await saver.setup()  # doctest: +SKIP
        """
        await asyncio.to_thread(
            migrate.upgrade,
            conninfo_of(self.conn),
            schema=self.schema,
            telemetry=self.telemetry,
            check_at_target=False,
        )
        await self.check_official_threads()

    async def check_official_threads(self) -> OfficialThreads | None:
        """Warn when the official saver's tables hold threads pgcheckpoint's do not.

        After switching from langgraph-checkpoint-postgres, its threads stay in
        its own tables until `pgcheckpoint import-langgraph` copies them; until
        then they look empty. `setup()` and the saver's first read call this
        (once per saver): a warning on the `pgcheckpoint` logger names the
        command. It never fails: an error only skips the check.

        Returns:
            What was found, or None.

        Example:
            >>> found = await saver.check_official_threads()  # doctest: +SKIP
            >>> found.missing if found else 0  # doctest: +SKIP
            12
        """
        self.official_checked = True
        try:
            found = await self.run(official_threads_op(self.schema))
        except PoolTimeout:
            raise  # the read would wait for the pool again
        except Exception as exc:  # the read it comes before must not fail because of it
            logger.debug("could not look for the official saver's threads: %s", exc)
            return None
        warn_official_threads(found)
        return found

    # -- the driver ---------------------------------------------------------------

    @asynccontextmanager
    async def _connection(self, *, lost: bool = False) -> AsyncIterator[AsyncConnection[Any]]:
        # `lost`: the operation lost its connection a moment ago
        if isinstance(self.conn, AsyncConnectionPool):
            conn, pooled = await self._take(self.conn, lost=lost)
            try:
                yield conn
            finally:
                await self._give_back(self.conn, conn, pooled)
        else:
            async with self.lock:
                yield self.conn

    async def _take(
        self, pool: AsyncConnectionPool[Any], *, lost: bool = False
    ) -> tuple[AsyncConnection[Any], bool]:
        # A connection for an operation, and whether it is the pool's. When the
        # pool has none ready and is failing to connect, the saver tries the
        # server itself, so it is back as soon as the server is, whatever the
        # pool's back-off (drivers.PoolOutage).
        outage = self.outage
        deadline = monotonic() + pool.timeout
        wait = outage.first_wait()
        while True:
            try:
                conn = await pool.getconn(timeout=max(min(wait, deadline - monotonic()), 0.001))
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
            own = await self._connect_bypassing(pool, left)
            if own is not None:
                return own, False
            if deadline - monotonic() <= 0:
                raise pool_timeout_error(pool, timed_out, outage.error) from timed_out
            wait = POOL_PATIENCE

    async def _connect_bypassing(
        self, pool: AsyncConnectionPool[Any], left: float
    ) -> AsyncConnection[Any] | None:
        # a connection of the saver's own, as the pool's would be, or None
        args = bypass_connect_args(pool, left)
        if args is None:
            return None
        slots = self.outage.slots
        if slots.locked():  # sync: if not slots.acquire(blocking=False):
            return None
        await slots.acquire()  # async-only
        try:
            conn: AsyncConnection[Any] = await pool.connection_class.connect(args[0], **args[1])
        except Error as exc:
            slots.release()
            self.outage.failed(exc)
            return None
        except BaseException:  # cancelled, interrupted
            slots.release()
            raise
        self.outage.connected()
        return conn

    async def _give_back(
        self, pool: AsyncConnectionPool[Any], conn: AsyncConnection[Any], pooled: bool
    ) -> None:
        if pooled:
            await pool.putconn(conn)
            return
        try:
            await conn.close()
        finally:
            self.outage.slots.release()

    async def run(
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
            >>> (await saver.run(storage_stats_op(saver.schema))).threads  # doctest: +SKIP
            12
        """
        with observe(self, op, name) as activity:
            return await self._run(op, restart, activity, atomic=atomic)

    async def _run(
        self, op: Op[T], restart: Callable[[], Op[T]] | None, activity: Activity, *, atomic: bool
    ) -> T:
        try:
            run = OpRun(
                op,
                pooled=isinstance(self.conn, AsyncConnectionPool),
                restart=restart,
                activity=activity,
            )
        except StopIteration as done:  # nothing to run
            return done.value  # type: ignore[no-any-return]
        try:
            lost = False
            while True:
                async with self._connection(lost=lost) as conn:
                    try:
                        return await self._run_on(conn, run, atomic=atomic)
                    except Error as exc:
                        if not run.may_retry(exc, conn):
                            raise
                try:
                    run = run.again()
                except StopIteration as done:  # made anew, it needed no statement
                    return done.value  # type: ignore[no-any-return]
                if isinstance(self.conn, AsyncConnectionPool):
                    # what broke this connection (a restart) broke the idle ones too
                    await self.conn.check()
                lost = True
        except SCHEMA_ERRORS as exc:
            error = await self._schema_error()
            if error is None:
                raise
            raise error from exc

    async def run_each(self, sweep: Sweep[T], *, name: str | None = None) -> T:
        """Run a sweep: each op it yields in a transaction of its own, to its result.

        Each op's result goes back into the sweep, or its error is raised there
        (the sweep may handle it and go on). An `On(saver, op)` runs on that saver.
        `name` names the sweep in spans and logs, if not its function's
        without `_sweep`.

        Example:
            >>> from pgcheckpoint.maintenance.rotation import rotation_sweep
            >>> report = await saver.run_each(rotation_sweep(saver))  # doctest: +SKIP
        """
        with observe(self, sweep, name, sweep=True):
            return await self._run_each(sweep)

    async def _run_each(self, sweep: Sweep[T]) -> T:
        try:
            step = next(sweep)
            while True:
                try:
                    if isinstance(step, On):
                        result = await step.saver.run(step.op, atomic=True)
                    else:
                        result = await self.run(step, atomic=True)
                except Exception as exc:
                    step = sweep.throw(exc)
                else:
                    step = sweep.send(result)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _schema_error(self) -> SchemaOutOfDateError | None:
        try:
            revision = await self.run(schema_revision_op(self.schema))
        except Exception:  # the original error says more than a failed check
            return None
        return schema_error(self.schema, revision)

    async def _run_on(self, conn: AsyncConnection[Any], run: OpRun[T], *, atomic: bool) -> T:
        cur = cursor_of(conn, self.cursors)
        try:
            return await self._run_with(cur, run, atomic=atomic)
        finally:
            release_results(cur, self.cursors)

    async def _run_with(self, cur: AsyncCursor[DictRow], run: OpRun[T], *, atomic: bool) -> T:
        conn = cur.connection
        in_pipe = self.pipe is not None and conn is self.conn
        if run.activity is not None:
            run.activity.connected(conn, atomic=atomic, pipelined=in_pipe)
        if atomic:
            async with conn.transaction():
                result = await self._drive(cur, run)
        elif conn.autocommit:
            result = await self._drive(cur, run)
        elif in_pipe or conn.info.transaction_status != TransactionStatus.IDLE:
            # inside the caller's transaction (or pipeline): a savepoint there
            async with conn.transaction():
                result = await self._drive(cur, run)
        else:
            # A caller's idle connection without autocommit: run in autocommit
            # rather than BEGIN ... COMMIT, so a statement that succeeded is
            # not lost to a COMMIT that fails (a restart between the two), and
            # two round trips are saved. The caller's setting comes back after.
            await conn.set_autocommit(True)
            try:
                result = await self._drive(cur, run)
            finally:
                if not conn.closed:
                    await conn.set_autocommit(False)
        if in_pipe and self.pipe is not None:
            await self.pipe.sync()
        return result

    async def _drive(self, cur: AsyncCursor[DictRow], op: Op[T] | OpRun[T]) -> T:
        try:
            run = op if isinstance(op, OpRun) else OpRun(op)
            prepare = self.queries.prepare
            stmt = run.first
            while True:
                try:
                    await cur.execute(
                        self.queries[stmt.name], stmt.params, prepare=prepare[stmt.name]
                    )
                    if stmt.fetch:
                        rows = await cur.fetchall()
                    elif stmt.count:
                        # in a pipeline the count comes with the result: flush and fetch
                        # it as fetchall does (psycopg's own check; nothing otherwise).
                        # Pipeline.sync() right after a statement of megabytes hangs.
                        await cur._fetch_pipeline()
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

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Load the checkpoint `config` names, or the thread's latest.

        Example:
            >>> await saver.aget_tuple({"configurable": {"thread_id": "t1"}})  # doctest: +SKIP
        """
        if not self.official_checked:
            await self.check_official_threads()
        return await self.run(self.get_tuple_op(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """List checkpoints newest first; `config=None` lists across threads.

        Example:
            >>> [t async for t in saver.alist(config, limit=2)]  # doctest: +SKIP
        """
        def listing() -> Op[tuple[list[Row], Mapping[str, Any] | None]]:
            return self.list_op(config, filter=filter, before=before, limit=limit)

        if not self.official_checked:
            await self.check_official_threads()
        # two statements that only read: a lost connection starts the listing over
        rows, recheck = await self.run(listing(), restart=listing)
        # sync-only: yield from self.decode_listed(rows, recheck, limit)
        for tup in self.decode_listed(rows, recheck, limit):  # async-only
            yield tup  # async-only

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (one statement, one transaction).

        Example:
            >>> await saver.aput(config, checkpoint, {"source": "input"}, {})  # doctest: +SKIP
        """
        return await self.run(self.put_op(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the writes of one task against a checkpoint.

        Example:
            >>> await saver.aput_writes(config, [("messages", ["hi"])], "t")  # doctest: +SKIP
        """
        if not await self.run(self.put_writes_op(config, writes, task_id, task_path)):
            # a delete of the thread was in the way: wait for it, then save in one transaction
            op = self.put_writes_op(config, writes, task_id, task_path, after_delete=True)
            await self.run(op, atomic=True)

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread: every checkpoint, value and write of it.

        Safe while a run writes to the thread: when it returns, no row of the
        thread is left; the run's next save fails with `MissingParentError`.

        Example:
            >>> await saver.adelete_thread("t1")  # doctest: +SKIP
        """
        await self.run_each(self.delete_thread_sweep(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's whole history to another thread id.

        Example:
            >>> await saver.acopy_thread("t1", "t1-copy")  # doctest: +SKIP
        """
        await self.run(self.copy_thread_op(source_thread_id, target_thread_id), atomic=True)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only each namespace's latest checkpoint, or delete the threads.

        With `keep_latest`, checkpoints that a kept one needs to be rebuilt
        (its `DeltaChannel` history) are kept too.

        Example:
            >>> await saver.aprune(["t1", "t2"], strategy="keep_latest")  # doctest: +SKIP
        """
        await self.run_each(self.prune_sweep(thread_ids, strategy=strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints and writes that the given runs created.

        Example:
            >>> await saver.adelete_for_runs(["run-1"])  # doctest: +SKIP
        """
        await self.run_each(self.delete_for_runs_sweep(run_ids))

    async def aprune_older_than(
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
            >>> report = await saver.aprune_older_than(timedelta(days=30))  # doctest: +SKIP
            >>> report.threads, report.checkpoints  # doctest: +SKIP
            (12, 480)
        """
        return await self.run_each(
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

    async def aprune_keep_last(
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
            >>> (await saver.aprune_keep_last(20, dry_run=True)).checkpoints  # doctest: +SKIP
            1200
        """
        return await self.run_each(
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

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes and seed of `DeltaChannel`s along the parent chain, in one query.

        Example:
            >>> await saver.aget_delta_channel_history(config=cfg, channels=["m"])  # doctest: +SKIP
        """
        wanted = list(channels)  # read again if the op starts over

        def history() -> Op[dict[str, DeltaChannelHistory]]:
            return self.delta_history_op(config, wanted)

        return await self.run(history(), restart=history, name="get_delta_channel_history")


    # -- thread locks -------------------------------------------------------------

    @asynccontextmanager
    async def lock_thread(
        self, thread_id: str, timeout: float | None = 0
    ) -> AsyncIterator[ThreadLock]:
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
            >>> async with saver.lock_thread("t1", timeout=5):  # doctest: +SKIP
            ...     await graph.ainvoke(Command(resume="yes"), config)
        """
        async with self._lock_connection() as conn:
            op = acquire_op(
                thread_id,
                schema=self.schema,
                timeout=timeout,
                client_pid=conn.info.backend_pid,
            )
            lock = await self._drive_lock(conn, op, "lock_thread", thread_id)
            try:
                with holding(lock):
                    yield lock
            except BaseException:
                if not await self._unlock(conn, lock):
                    log_not_held(lock)
                raise
            if not await self._unlock(conn, lock):
                raise not_held_error(lock)

    async def aresume(
        self,
        graph: ResumableGraph,
        config: RunnableConfig,
        value: Any,
        *,
        timeout: float | None = 0,
        **invoke_kwargs: Any,
    ) -> Any:
        """Resume an interrupted thread under its lock: lock, `ainvoke`, unlock.

        Runs `graph.ainvoke(Command(resume=value), config, **invoke_kwargs)` in
        `lock_thread`. With `timeout=0` a second resume of the same thread (a
        double click, a redelivered message) fails with `ThreadBusyError`
        instead of running the node twice; with a timeout it runs after the
        first, from the checkpoint the first one left.

        Args:
            graph: A graph compiled with `checkpointer=` this saver.
            config: The thread's config, `{"configurable": {"thread_id": ...}}`.
            value: What `interrupt()` returns in the resumed node.
            timeout: As in `lock_thread`.
            **invoke_kwargs: Passed to `graph.ainvoke`.

        Returns:
            What `graph.ainvoke` returns.

        Example:
            >>> config = {"configurable": {"thread_id": "t1"}}
            >>> await saver.aresume(graph, config, "approve", timeout=0)  # doctest: +SKIP
        """
        command = resume_command(graph, self, value)
        async with self.lock_thread(thread_of(config)[0], timeout=timeout):
            return await graph.ainvoke(command, config, **invoke_kwargs)

    @asynccontextmanager
    async def _lock_connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        if not isinstance(self.conn, AsyncConnectionPool):
            # the saver's own connection keeps serving its statements meanwhile
            async with await AsyncConnection.connect(
                conninfo_of(self.conn), autocommit=True, prepare_threshold=None
            ) as conn:
                yield conn
            return
        pool = self.conn
        slots = pool_lock_slots(pool, asyncio.BoundedSemaphore)
        # sync-only: if not slots.acquire(timeout=pool.timeout):
        # sync-only:     raise PoolTimeoutError(slots_timeout_message(pool))
        # async-only: begin
        try:
            await asyncio.wait_for(slots.acquire(), pool.timeout)
        except asyncio.TimeoutError:
            raise PoolTimeoutError(slots_timeout_message(pool)) from None
        # async-only: end
        try:
            conn, pooled = await self._take(pool)
            if pooled:
                try:
                    # held for a whole run, so worth a round trip: one an outage
                    # broke is replaced, as `run` replaces one
                    await pool.check_connection(conn)
                except Error:
                    await pool.putconn(conn)
                    await pool.check()
                    conn, pooled = await self._take(pool, lost=True)
            autocommit = conn.autocommit
            try:
                await conn.set_autocommit(True)
                yield conn
            finally:
                if pooled and not conn.closed and not autocommit:
                    await conn.set_autocommit(False)
                await self._give_back(pool, conn, pooled)  # a closed one is replaced
        finally:
            slots.release()

    async def _drive_lock(
        self, conn: AsyncConnection[Any], op: Op[T], name: str, thread_id: str
    ) -> T:
        with observe(self, op, name, thread_id=thread_id) as activity:
            try:
                async with conn.cursor(row_factory=dict_row) as cur:
                    activity.connected(conn, atomic=False, pipelined=False)
                    return await self._drive(cur, OpRun(op, activity=activity))
            except ThreadBusyError:
                raise  # not taken: the connection holds nothing
            except BaseException:
                await conn.close()  # it may hold the lock; ending the session frees it
                raise

    async def _unlock(self, conn: AsyncConnection[Any], lock: ThreadLock) -> bool:
        # False when the session no longer held the lock (then closed)
        try:
            released = await self._drive_lock(
                conn, release_op(lock), "unlock_thread", lock.thread_id
            )
        except Error as exc:
            log_lost(lock, exc)
            return True
        if not released:
            await conn.close()
        return released

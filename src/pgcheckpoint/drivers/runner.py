# Generated from runner_async.py by tools/async_to_sync.py: edit runner_async.py and
# run `make sync-twin`; a unit test checks that this file matches.
"""`Runner`: runs ops on a connection, a pool or a pipeline, for synchronous code.

The one way every operation of an async saver runs (`run`, `run_each`):
over a pool, on a connection taken for the op (connecting on its own while
the pool fails to, `connections.PoolOutage`); over one connection, under the
saver's lock; in a pipeline, batched in the caller's. The transaction is the
runner's: an op runs in autocommit, or in one transaction (`atomic`), or in a
savepoint of the caller's open transaction. A lost connection starts an op
over on another when the op allows it (`oprun.OpRun`); a missing table
raises `SchemaOutOfDateError` naming the command that fixes it. Savers and
the store are runners with their operations on top.

Example:
    >>> from pgcheckpoint.maintenance.stats import storage_stats_op
    >>> saver.run(storage_stats_op(saver.schema)).threads  # doctest: +SKIP
    12
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from time import monotonic
from typing import Any, TypeVar

from psycopg import Capabilities, Connection, Cursor, Error, Pipeline
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import PoolTimeoutError, SchemaOutOfDateError
from ..ops import On, Op, Sweep
from ..schema.status import SCHEMA_ERRORS, schema_error, schema_revision_op
from ..statements.queries import Queries
from ..telemetry.activity import Activity
from ..telemetry.config import DEFAULT_TELEMETRY, Telemetry, observe
from ._acompat import BoundedSemaphore, Lock, acquire_within, try_acquire
from .connections import (
    POOL_PATIENCE,
    Cursors,
    bypass_connect_args,
    conninfo_of,
    cursor_of,
    pool_outage,
    pool_timeout_error,
    release_results,
)
from .oprun import OpRun
from .thread_locks import pool_lock_slots, slots_timeout_message

__all__ = ["Runner"]

T = TypeVar("T")


class Runner:
    """The connection, pool or pipeline an async saver runs its ops on, and how it runs them.

    Args:
        conn: A psycopg `Connection` or a `psycopg_pool.ConnectionPool`.
            Its `autocommit` and `row_factory` settings do not matter; a pool
            passed in is never closed.
        pipe: A pipeline of `conn` to batch statements in (single connection only).
        schema: The Postgres schema that holds the tables.
        telemetry: Where spans and metrics go (`pgcheckpoint.telemetry`).
        **kwargs: Passed on to the next class of the saver.

    Example:
        >>> class Store(Runner): ...  # doctest: +SKIP
        >>> Store(pool).run(op)  # doctest: +SKIP
    """

    def __init__(
        self,
        conn: Connection[Any] | ConnectionPool[Any],
        pipe: Pipeline | None = None,
        *,
        schema: str = "public",
        telemetry: Telemetry | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(conn, ConnectionPool) and pipe is not None:
            raise ValueError(
                "a pipeline belongs to one connection; pass a Connection with pipe=, "
                "or a ConnectionPool without it"
            )
        self.conn = conn
        self.pipe = pipe
        self.lock = Lock()
        # the cursor kept per connection (connections.cursor_of), used under self.lock
        self.cursors: Cursors = weakref.WeakKeyDictionary()
        self.schema = schema
        self.queries = Queries(schema)
        self.supports_pipeline = Capabilities().has_pipeline()
        self.telemetry = telemetry or DEFAULT_TELEMETRY
        if isinstance(conn, ConnectionPool):
            self.telemetry.watch_pool(conn)
            # when to connect without the pool, while it fails to (connections.PoolOutage)
            self.outage = pool_outage(conn, BoundedSemaphore)

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
        if not try_acquire(slots):
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
        try:
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
                conn.set_autocommit(True)
                try:
                    result = self._drive(cur, run)
                finally:
                    if not conn.closed:
                        conn.set_autocommit(False)
        except Exception:
            if in_pipe and self.pipe is not None:
                # A failed statement leaves the pipeline aborted until its next sync
                # (a transaction block syncs on its way out, autocommit has none):
                # without one, every later statement on it fails with PipelineAborted.
                with suppress(Error):  # a broken connection: the op's error says more
                    self.pipe.sync()
            raise
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

    @contextmanager
    def reserved_connection(self) -> Iterator[Connection[Any]]:
        """A connection of this saver's database held for a whole block, in autocommit.

        Taken from the pool (at most `max_size - 1` at once: one always stays
        free for the statements the block runs through `run`), or a new
        connection for a saver over one connection, whose own connection goes
        on serving its statements meanwhile. A thread lock is held on one.

        Example:
            >>> with saver.reserved_connection() as conn:  # doctest: +SKIP
            ...     conn.info.backend_pid
        """
        if not isinstance(self.conn, ConnectionPool):
            # the saver's own connection keeps serving its statements meanwhile
            with Connection.connect(
                conninfo_of(self.conn), autocommit=True, prepare_threshold=None
            ) as conn:
                yield conn
            return
        pool = self.conn
        slots = pool_lock_slots(pool, BoundedSemaphore)
        if not acquire_within(slots, pool.timeout):
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
                conn.set_autocommit(True)
                yield conn
            finally:
                if pooled and not conn.closed and not autocommit:
                    conn.set_autocommit(False)
                self._give_back(pool, conn, pooled)  # a closed one is replaced
        finally:
            slots.release()

    def run_on_reserved(
        self, conn: Connection[Any], op: Op[T], *, name: str, thread_id: str | None = None
    ) -> T:
        """Run `op` on a connection of `reserved_connection`, outside any transaction.

        The op's statements commit one by one (the connection is in
        autocommit); its errors come out as raised, with no retry: the
        connection is the caller's to keep or close.

        Example:
            >>> with saver.reserved_connection() as conn:  # doctest: +SKIP
            ...     lock = saver.run_on_reserved(conn, acquire_op(...), name="lock_thread")
        """
        with observe(self, op, name, thread_id=thread_id) as activity:
            with conn.cursor(row_factory=dict_row) as cur:
                activity.connected(conn, atomic=False, pipelined=False)
                return self._drive(cur, OpRun(op, activity=activity))

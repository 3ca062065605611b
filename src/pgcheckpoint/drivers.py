"""Pieces both drivers share: pool settings, conninfo, error translation.

Example:
    >>> from pgcheckpoint.drivers import pool_settings
    >>> pool_settings({"max_size": 4})["max_size"]
    4
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, overload

from psycopg import (
    AsyncConnection,
    AsyncCursor,
    Connection,
    Cursor,
    Error,
    OperationalError,
    errors,
)
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from .core import Op, Row, Stmt
from .errors import PgCheckpointError, PoolTimeoutError, SchemaOutOfDateError

T = TypeVar("T")

# What a statement raises when the schema lacks a table or column it expects. The
# drivers catch these (free until raised) and ask `schema_error` what to say.
SCHEMA_ERRORS = (errors.UndefinedTable, errors.UndefinedColumn)

# Statements a saver over a pool runs once more, on another connection, when the
# connection is lost while one runs as its op's first (so nothing of the op is
# lost but that statement, which may or may not have committed): reads, locks
# that end with their transaction, and writes whose second run leaves what the
# first left (an upsert of the same values, an insert that skips existing rows,
# a delete). Every public operation starts with one of these.
RETRY_SAFE = frozenset(
    {
        "get_latest_checkpoint",
        "get_checkpoint_by_id",
        "list_checkpoints",
        "list_thread_checkpoints",
        "delta_channel_history",
        "run_checkpoints",
        "thread_checkpoints_page",
        "version_table_exists",
        "lock_threads_for_maintenance",
        "put_checkpoint",
        "insert_writes",
        "upsert_writes",
        "delete_thread",
        "copy_thread",
    }
)

# Connection options psycopg takes that are not libpq parameters.
_NOT_LIBPQ = {"autocommit", "prepare_threshold", "row_factory", "cursor_factory", "context"}


def pool_settings(pool: bool | Mapping[str, Any], *, asynchronous: bool = False) -> dict[str, Any]:
    """Settings for a pool the saver opens itself.

    Connections are autocommit (the saver makes its own transactions). They
    are not checked before each use (a round trip per operation): the saver
    replaces a connection that a restart or an idle timeout broke when an
    operation finds it so (`OpRun`), which psycopg_pool's `check` does only one
    stale connection at a time, sleeping 1, 2, 4... seconds in between. An
    async pool is opened by the caller (`await pool.open()`), as psycopg_pool asks.

    Example:
        >>> pool_settings(True)["kwargs"]["autocommit"]
        True
    """
    settings: dict[str, Any] = {"min_size": 1, "max_size": 10, "timeout": 30.0}
    if isinstance(pool, Mapping):
        settings.update(pool)
    kwargs = {"autocommit": True, "row_factory": dict_row}
    kwargs.update(settings.pop("kwargs", None) or {})
    settings["kwargs"] = kwargs
    settings.setdefault("open", not asynchronous)
    settings.setdefault("name", "pgcheckpoint")
    return settings


def conninfo_of(
    conn: Connection[Any] | ConnectionPool[Any] | AsyncConnection[Any] | AsyncConnectionPool[Any],
) -> str:
    """A conninfo that opens another connection to the same database.

    Example:
        >>> conninfo_of(pool)  # doctest: +SKIP
        'host=127.0.0.1 user=postgres dbname=app'
    """
    if isinstance(conn, ConnectionPool | AsyncConnectionPool):
        kwargs = conn.kwargs if isinstance(conn.kwargs, Mapping) else {}
        if not isinstance(conn.conninfo, str):
            raise PgCheckpointError(
                "this pool computes its conninfo at connect time, so pgcheckpoint cannot "
                "open a connection of its own; run `pgcheckpoint migrate` instead of setup()"
            )
        extra = {k: v for k, v in kwargs.items() if k not in _NOT_LIBPQ}
        return make_conninfo(conn.conninfo, **extra)
    params: dict[str, Any] = dict(conninfo_to_dict(conn.info.dsn))
    password = conn.info.password
    if password:
        params["password"] = password
    return make_conninfo("", **params)


class OpRun(Generic[T]):
    """An op in a driver's hands, and whether it may start over on another connection.

    Creating one runs the op to its first statement (no I/O, so a bad argument
    fails before a connection is taken); `StopIteration` means it needed none.
    The driver executes the statement, then gives the op its rows (`send`) or
    its error (`throw`), which return the next statement. A connection lost
    while the first statement runs leaves the op untouched: with a pool, and a
    statement in `RETRY_SAFE`, `throw` raises the error without giving it to
    the op, `may_retry` says yes, and the driver runs `again()` once, on
    another connection. An op that only reads passes `restart` (a function that
    makes it anew): then a connection lost at any of its statements starts it
    over from the first.

    Example:
        >>> run = OpRun(schema_revision_op("public"), pooled=True)
        >>> run.first.name
        'version_table_exists'
    """

    __slots__ = ("first", "op", "pooled", "restart", "retried", "started")

    def __init__(
        self,
        op: Op[T],
        *,
        pooled: bool = False,
        restart: Callable[[], Op[T]] | None = None,
    ) -> None:
        self.op = op
        self.pooled = pooled
        self.restart = restart
        self.first = next(op)
        self.started = False  # the op has seen the outcome of a statement
        self.retried = False

    def send(self, rows: list[Row]) -> Stmt:
        self.started = True
        return self.op.send(rows)

    def throw(self, exc: Error, conn: Connection[Any] | AsyncConnection[Any]) -> Stmt:
        if self.may_retry(exc, conn):
            raise exc
        self.started = True
        return self.op.throw(exc)

    def may_retry(self, exc: BaseException, conn: Connection[Any] | AsyncConnection[Any]) -> bool:
        """Whether `exc`, raised on `conn`, lets the op start over on another connection."""
        lost = (
            self.pooled
            and not self.retried
            and isinstance(exc, OperationalError)
            and conn.closed  # lost, not a statement that failed on a live session
        )
        if not lost:
            return False
        if self.restart is not None:
            return True
        return not self.started and self.first.name in RETRY_SAFE

    def again(self) -> OpRun[T]:
        """What to run on the next connection, once: this run, or the op made anew.

        An op that has seen no outcome yet runs from its first statement; one that
        has goes through `restart`, which raises StopIteration if the new op needs
        no statement.
        """
        if self.started and self.restart is not None:
            self.op.close()
            run = OpRun(self.restart(), pooled=self.pooled, restart=self.restart)
        else:
            run = self
        run.retried = True
        return run


Cursors = weakref.WeakKeyDictionary[Any, tuple[str, Any]]


@overload
def cursor_of(conn: Connection[Any], kept: Cursors) -> Cursor[DictRow]: ...
@overload
def cursor_of(conn: AsyncConnection[Any], kept: Cursors) -> AsyncCursor[DictRow]: ...
def cursor_of(conn: Connection[Any] | AsyncConnection[Any], kept: Cursors) -> Any:
    """The cursor a saver runs its statements with on `conn`, made once.

    A new cursor works out again how to send and read the values of each
    statement it runs (about 30 us a statement); this one is kept in the
    saver's `kept` (one per saver, whose lock or pool makes it the only user
    of the connection while it runs) and made anew if the connection's client
    encoding changed (its text values are encoded for that encoding). Binary
    results: bytea arrives as its bytes, not as hex text twice the size.

    Example:
        >>> cursor_of(conn, kept) is cursor_of(conn, kept)  # doctest: +SKIP
        True
    """
    encoding = conn.info.encoding
    found = kept.get(conn)
    # a closed connection gets psycopg's own error from conn.cursor()
    if found is not None and found[0] == encoding and not conn.closed:
        return found[1]
    cur = conn.cursor(row_factory=dict_row, binary=True)
    kept[conn] = (encoding, cur)
    return cur


def pool_timeout_error(
    pool: ConnectionPool[Any] | AsyncConnectionPool[Any], exc: PoolTimeout
) -> PoolTimeoutError:
    """Say which pool ran dry and what to do about it.

    Example:
        >>> pool_timeout_error(pool, PoolTimeout("timeout"))  # doctest: +SKIP
    """
    return PoolTimeoutError(
        f"no connection became free in pool {pool.name!r} (max_size={pool.max_size}) "
        f"within {pool.timeout:.1f}s: raise max_size, or hold connections for less time "
        f"({exc})"
    )


def schema_revision_op(schema: str) -> Op[str | None]:
    """Read the revision the schema is at; None when it was never migrated.

    Example:
        >>> op = schema_revision_op("public")
        >>> next(op).name
        'version_table_exists'
    """
    rows = yield Stmt("version_table_exists", {"schema": schema}, fetch=True)
    if not rows or not rows[0]["present"]:
        return None
    rows = yield Stmt("schema_revision", fetch=True)
    return str(rows[0]["version_num"]) if rows else None


def schema_error(schema: str, revision: str | None) -> SchemaOutOfDateError | None:
    """The error to raise instead of a missing table or column, if the schema explains it.

    None when the schema is at the newest revision: then the original error
    stands (something else removed the table).

    Example:
        >>> "`pgcheckpoint migrate --schema tenant_a`" in str(schema_error("tenant_a", None))
        True
    """
    from . import migrate

    newest = migrate.head()
    if revision == newest:
        return None
    command = migrate.migrate_command(schema)
    if revision is None:
        return SchemaOutOfDateError(
            f"schema {schema!r} has no pgcheckpoint tables: run `{command}` "
            "with a role that may run DDL (or call saver.setup())"
        )
    if revision not in {rev for rev, _down, _title in migrate.history()}:
        return SchemaOutOfDateError(
            f"schema {schema!r} is at revision {revision!r}, which this version of "
            f"pgcheckpoint does not know (its newest is {newest!r}): upgrade the "
            "pgcheckpoint package to the version that migrated the database"
        )
    return SchemaOutOfDateError(
        f"schema {schema!r} is at revision {revision!r} but this version of pgcheckpoint "
        f"needs {newest!r}: run `{command}`"
    )

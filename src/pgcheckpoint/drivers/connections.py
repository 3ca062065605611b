"""Pieces both drivers share: connection strings, pool settings, the kept cursor, a
pool's outages, errors.

Example:
    >>> from pgcheckpoint.drivers.connections import pool_settings
    >>> pool_settings({"max_size": 4})["max_size"]
    4
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, overload

from psycopg import (
    AsyncConnection,
    AsyncCursor,
    Connection,
    Cursor,
    Error,
)
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from ..errors import (
    PgCheckpointError,
    PoolTimeoutError,
)

# Connection options psycopg takes that are not libpq parameters.
_NOT_LIBPQ = {"autocommit", "prepare_threshold", "row_factory", "cursor_factory", "context"}

# How long an operation waits for a pooled connection before it asks whether the
# pool is failing to connect (`PoolOutage`); the saver is back within about this
# long of the server.
POOL_PATIENCE = 0.5
# How long an operation waits for the pool while the saver connects on its own.
_BYPASS_WAIT = 0.01
# The longest a connection of the saver's own waits for the server (libpq's
# `connect_timeout`, when the pool's settings give none).
_BYPASS_CONNECT_TIMEOUT = 10

S = TypeVar("S")


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


class PoolOutage(Generic[S]):
    """What the savers on a pool know of its trouble connecting; when they connect on their own.

    psycopg_pool replaces a lost connection in the background and, while the
    server refuses, tries again after 1, 2, 4, 8... seconds: after a failover
    it may come back seconds after the new primary accepts connections. So an
    operation that gets no connection within `POOL_PATIENCE` connects on its
    own, with the pool's conninfo and settings, when the pool is in trouble:
    the operation lost its connection a moment ago, or since the pool last
    served a connection it failed to connect (its `connections_errors`
    counter moved) or a connection of the savers' own failed or served.
    Such a connection serves one operation, then closes. Once the server
    answers, the next operations take a connection of the pool if it has one
    ready, else connect on their own, until the pool serves again. At most
    `max_size` such connections are open at once (`slots`), on top of the
    pool's. A pool that is merely busy (no trouble seen) is waited for in
    line; an operation already waiting so when trouble starts waits on.

    Attributes:
        slots: The semaphore of connections opened outside the pool.
        troubled: The pool failed to connect since it last served a connection.
        error: Why the last connection the savers opened themselves failed.
        bypassing: The server answered the savers while the pool had nothing ready.

    Example:
        >>> outage = PoolOutage(pool, threading.BoundedSemaphore)  # doctest: +SKIP
        >>> outage.first_wait()  # doctest: +SKIP
        0.5
    """

    def __init__(self, pool: Any, make: Callable[[int], S]) -> None:
        self.slots = make(pool.max_size)
        # from 0: a pool that failed before the saver was made is in trouble too
        self.errors_seen = 0
        self.troubled = False
        self.error: Error | None = None
        self.bypassing = False

    def first_wait(self) -> float:
        """How long to wait for a pooled connection before looking further."""
        return _BYPASS_WAIT if self.bypassing else POOL_PATIENCE

    def suspected(self, pool: Any, *, lost: bool) -> bool:
        """Whether a pool that gave no connection in time may be failing to connect.

        `lost`: the operation asking lost its connection a moment ago.
        """
        errors_now = _connect_errors(pool)
        if errors_now != self.errors_seen:  # != : pop_stats() starts it over
            self.errors_seen = errors_now
            self.troubled = True  # for every operation waiting, until the pool serves
        return lost or self.troubled or self.bypassing or self.error is not None

    def served(self) -> None:
        """The pool gave a connection: it is back."""
        if self.troubled or self.bypassing or self.error is not None:
            self.troubled = self.bypassing = False
            self.error = None

    def connected(self) -> None:
        """A connection of the saver's own succeeded while the pool had none."""
        self.bypassing = True
        self.error = None

    def failed(self, exc: Error) -> None:
        """A connection of the saver's own failed."""
        self.bypassing = False
        self.error = exc


_OUTAGES: weakref.WeakKeyDictionary[Any, PoolOutage[Any]] = weakref.WeakKeyDictionary()
_OUTAGES_MUTEX = threading.Lock()


def pool_outage(pool: Any, make: Callable[[int], S]) -> PoolOutage[S]:
    """The `PoolOutage` of `pool`, shared by every saver on it; `make` makes its semaphore.

    Example:
        >>> outage = pool_outage(pool, threading.BoundedSemaphore)  # doctest: +SKIP
        >>> outage is pool_outage(pool, threading.BoundedSemaphore)  # doctest: +SKIP
        True
    """
    with _OUTAGES_MUTEX:
        outage = _OUTAGES.get(pool)
        if outage is None:
            outage = _OUTAGES[pool] = PoolOutage(pool, make)
        return outage


def _connect_errors(pool: Any) -> int:
    return int(pool.get_stats().get("connections_errors", 0))


def bypass_connect_args(pool: Any, timeout: float) -> tuple[str, dict[str, Any]] | None:
    """The conninfo and keyword arguments to connect as `pool` does, outside it.

    None when the pool computes them at connect time. A `connect_timeout`
    bounded by `timeout` is added when the pool's settings give none.

    Example:
        >>> bypass_connect_args(ConnectionPool("dbname=app", open=False), 30)
        ('dbname=app', {'connect_timeout': 10})
    """
    conninfo, kwargs = pool.conninfo, pool.kwargs or {}
    if not isinstance(conninfo, str) or not isinstance(kwargs, Mapping):
        return None
    kwargs = dict(kwargs)
    if "connect_timeout" not in kwargs and "connect_timeout" not in conninfo_to_dict(conninfo):
        kwargs["connect_timeout"] = max(2, math.ceil(min(timeout, _BYPASS_CONNECT_TIMEOUT)))
    return conninfo, kwargs


def release_results(cur: Cursor[Any] | AsyncCursor[Any], kept: Cursors) -> None:
    """Let go of the last statement's result and parameters, keep what the cursor learnt.

    psycopg keeps a cursor's last result and its converted parameters until
    the cursor runs its next statement; on a kept cursor that is the
    connection's next operation, which on an idle pool connection may be much
    later (a `list` of a long thread: megabytes). This drops them as psycopg's
    own `execute` does first, and keeps the cursor's transformer, which is
    what the kept cursor is for (the same statement's dumpers, again).
    A psycopg without these internals gets its cursor forgotten instead.

    Example:
        >>> release_results(cur, saver.cursors)  # doctest: +SKIP
        >>> cur.pgresult is None  # doctest: +SKIP
        True
    """
    try:
        cur._reset()
        transformer = getattr(cur, "_tx", None)
        if transformer is not None:
            transformer.set_pgresult(None)
    except AttributeError:
        kept.pop(cur.connection, None)


def pool_timeout_error(
    pool: ConnectionPool[Any] | AsyncConnectionPool[Any],
    exc: PoolTimeout,
    connect_error: Error | None = None,
) -> PoolTimeoutError:
    """Say why a pool gave no connection in time, and what to do about it.

    `connect_error` is what connecting to the server answers when the pool
    has been failing to connect (a server that is down, a wrong password):
    then that is the reason, not the pool's size.

    Example:
        >>> pool_timeout_error(pool, PoolTimeout("timeout"))  # doctest: +SKIP
    """
    if connect_error is not None:
        reason = str(connect_error).strip().replace("\n", " ")
        return PoolTimeoutError(
            f"no connection from pool {pool.name!r} within {pool.timeout:.1f}s: it cannot "
            f"connect to the server ({type(connect_error).__name__}: {reason}); check that "
            "the server is up and reachable, and the connection string and credentials"
        )
    return PoolTimeoutError(
        f"no connection became free in pool {pool.name!r} (max_size={pool.max_size}) "
        f"within {pool.timeout:.1f}s: raise max_size, or hold connections for less time "
        f"({exc})"
    )

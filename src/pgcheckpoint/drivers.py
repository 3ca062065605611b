"""Pieces both drivers share: connection strings, pool settings, the kept cursor, errors.

Example:
    >>> from pgcheckpoint.drivers import pool_settings
    >>> pool_settings({"max_size": 4})["max_size"]
    4
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping
from typing import Any, overload

from psycopg import (
    AsyncConnection,
    AsyncCursor,
    Connection,
    Cursor,
    Error,
    ProgrammingError,
    errors,
)
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from .errors import InvalidInputError, PgCheckpointError, PoolTimeoutError, SchemaOutOfDateError
from .ops import Op, Stmt

# What a statement raises when the schema lacks a table or column it expects. The
# drivers catch these (free until raised) and ask `schema_error` what to say.
SCHEMA_ERRORS = (errors.UndefinedTable, errors.UndefinedColumn)

# Connection options psycopg takes that are not libpq parameters.
_NOT_LIBPQ = {"autocommit", "prepare_threshold", "row_factory", "cursor_factory", "context"}
# SQLAlchemy-style URLs ("postgresql+psycopg://", common in DATABASE_URL) name a
# driver in the scheme, which libpq does not read.
_DRIVER_SCHEME = re.compile(r"^(\s*postgres(?:ql)?)\+\w+://")


def libpq_dsn(dsn: str) -> str:
    """A connection string as libpq reads it; SQLAlchemy-style URLs lose their driver.

    Every form libpq takes passes unchanged, Unix-socket directories included
    (`host=/run/postgresql dbname=app`, `postgresql://app@/app?host=/run/postgresql`,
    `postgresql://app@%2Frun%2Fpostgresql/app`); `postgresql+psycopg://...`
    becomes `postgresql://...`.

    Raises:
        InvalidInputError: libpq cannot parse it (the message says why).

    Example:
        >>> libpq_dsn("postgresql+psycopg://app@/app?host=/run/postgresql")
        'postgresql://app@/app?host=/run/postgresql'
    """
    text = _DRIVER_SCHEME.sub(r"\1://", dsn)
    try:
        conninfo_to_dict(text)
    except ProgrammingError as exc:
        raise InvalidInputError(
            f"invalid connection string: {str(exc).strip()}; write a libpq string "
            "('host=/run/postgresql dbname=app') or URI ('postgresql://user@host/app')"
        ) from None
    return text


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

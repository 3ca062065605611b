"""Pieces both drivers share: pool settings, conninfo, error translation.

Example:
    >>> from pgcheckpoint.drivers import pool_settings
    >>> pool_settings({"max_size": 4})["max_size"]
    4
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg import AsyncConnection, Connection
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from .errors import PoolTimeoutError

# Connection options psycopg takes that are not libpq parameters.
_NOT_LIBPQ = {"autocommit", "prepare_threshold", "row_factory", "cursor_factory", "context"}


def pool_settings(pool: bool | Mapping[str, Any], *, asynchronous: bool = False) -> dict[str, Any]:
    """Settings for a pool the saver opens itself.

    Connections are autocommit (the saver makes its own transactions) and
    checked before use, so one left broken by a restart or an idle timeout is
    replaced instead of failing a request. An async pool is opened by the
    caller (`await pool.open()`), as psycopg_pool asks.

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
    pool_class = AsyncConnectionPool if asynchronous else ConnectionPool
    settings.setdefault("check", pool_class.check_connection)
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
        extra = {k: v for k, v in (conn.kwargs or {}).items() if k not in _NOT_LIBPQ}
        return make_conninfo(conn.conninfo, **extra)
    params = conninfo_to_dict(conn.info.dsn)
    password = conn.info.password
    if password:
        params["password"] = password
    return make_conninfo(**params)


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

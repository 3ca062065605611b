"""`checkpointer`: the factory LangGraph's Agent Server enters, from one line of `langgraph.json`.

The server loads `"checkpointer": {"path": "pgcheckpoint.agent_server.checkpointer"}`
(the dotted form; `module:attr` only works for a file path), calls it with no
arguments and enters what it returns, once per event loop, for the server's
whole life. Everything it needs comes from the environment
(`settings.ServerSettings`).

Example:
    >>> async with checkpointer() as saver:  # doctest: +SKIP
    ...     await saver.aget_tuple({"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from psycopg import AsyncConnection, OperationalError
from psycopg.conninfo import conninfo_to_dict

from ..codec.crypto import EncryptedSerde
from ..drivers.saver_async import AsyncPostgresSaver
from ..drivers.store_async import AsyncPostgresStore
from ..errors import PgCheckpointError
from ..schema.status import schema_error, schema_revision_op
from ..telemetry.activity import logger
from .settings import ServerSettings
from .ttl import in_background, ttl_sweeper

__all__ = [
    "CONNECT_TIMEOUT",
    "DatabaseUnreachableError",
    "check_reachable",
    "check_schema_current",
    "checkpointer",
]

# How long the start waits for PostgreSQL before it gives up (seconds).
CONNECT_TIMEOUT = 10
# What the factory logs once ready, by (encrypted, TTL swept): constant text and
# numbers, as every record of the library's logger
_READY = {
    (True, True): "pgcheckpoint checkpointer ready: a pool of %d, values encrypted, TTL swept",
    (True, False): "pgcheckpoint checkpointer ready: a pool of %d, values encrypted",
    (False, True): "pgcheckpoint checkpointer ready: a pool of %d, values not encrypted, TTL swept",
    (False, False): "pgcheckpoint checkpointer ready: a pool of %d, values not encrypted",
}


class DatabaseUnreachableError(PgCheckpointError, OperationalError):
    """The server could not start: the factory's first connection to PostgreSQL failed.

    Example:
        >>> issubclass(DatabaseUnreachableError, OperationalError)
        True
    """


@asynccontextmanager
async def checkpointer(
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[AsyncPostgresSaver]:
    """An `AsyncPostgresSaver` over a pool, for the Agent Server; closed when the server stops.

    Reads the environment (`environ`, default `os.environ`): the database
    (`PGCHECKPOINT_DSN`, else `POSTGRES_URI`, else `DATABASE_URI` unless it is
    `:memory:`), `PGCHECKPOINT_SCHEMA`, the pool's size
    (`PGCHECKPOINT_POOL_MIN_SIZE`, `PGCHECKPOINT_POOL_MAX_SIZE`), the
    encryption keys (`PGCHECKPOINT_AES_KEYS`, `LANGGRAPH_AES_KEY`) and the
    thread TTL (`LANGGRAPH_CHECKPOINTER`'s `ttl` block, or
    `LANGGRAPH_THREAD_TTL`), which a background task sweeps. The schema must
    be current: run `pgcheckpoint migrate` first, or set
    `PGCHECKPOINT_AUTO_MIGRATE=1` to let the server create or upgrade it.

    Raises:
        InvalidInputError: A variable is missing or malformed (the message names it).
        DatabaseUnreachableError: PostgreSQL does not answer.
        SchemaOutOfDateError: The schema is missing or behind, and
            `PGCHECKPOINT_AUTO_MIGRATE` is off.

    Example:
        >>> # langgraph.json: "checkpointer": {"path": "pgcheckpoint.agent_server.checkpointer"}
        >>> async with checkpointer({"PGCHECKPOINT_DSN": DSN}) as saver:  # doctest: +SKIP
        ...     await saver.aget_tuple({"configurable": {"thread_id": "t1"}})
    """
    settings = ServerSettings.from_env(environ)
    dsn = settings.dsn
    await check_reachable(dsn, settings.dsn_source)
    serde = EncryptedSerde.from_env(environ=environ) if settings.encrypt else None
    pool = {"min_size": settings.pool_min_size, "max_size": settings.pool_max_size}
    async with AsyncPostgresSaver.from_conn_string(
        dsn, pool=pool, serde=serde, schema=settings.schema
    ) as saver:
        await check_schema_current(saver, settings)
        job = None if settings.ttl is None else ttl_sweeper(saver, settings.ttl)
        async with in_background(job, "pgcheckpoint-ttl") as sweeping:
            logger.info(_READY[serde is not None, sweeping], settings.pool_max_size)
            yield saver
    logger.info("pgcheckpoint checkpointer closed its pool")


async def check_reachable(dsn: str, source: str) -> None:
    """Connect once, or raise `DatabaseUnreachableError` in one line naming `source`."""
    # The pool connects in the background and would only time out at the first
    # request; the server must not start without its database.
    try:
        conn = await AsyncConnection.connect(dsn, connect_timeout=CONNECT_TIMEOUT)
    except OperationalError as exc:
        reason = re.sub(r"\s+", " ", str(exc)).strip()
        raise DatabaseUnreachableError(
            f"pgcheckpoint cannot connect to PostgreSQL at {_where(dsn)} (from {source}): "
            f"{reason}; check that PostgreSQL runs there and that {source} names it "
            "(host, port, user, password, database)"
        ) from None
    await conn.close()


async def check_schema_current(
    runner: AsyncPostgresSaver | AsyncPostgresStore, settings: ServerSettings
) -> None:
    """Refuse a schema that is missing or behind, or upgrade it with `PGCHECKPOINT_AUTO_MIGRATE`."""
    revision = await runner.run(schema_revision_op(settings.schema))
    # reads the migrations' files: not on the event loop
    error = await asyncio.to_thread(schema_error, settings.schema, revision)
    if error is None:
        return
    if not settings.auto_migrate:
        raise type(error)(f"{error}; or set PGCHECKPOINT_AUTO_MIGRATE=1") from None
    logger.info("pgcheckpoint: creating or upgrading the schema (PGCHECKPOINT_AUTO_MIGRATE=1)")
    await runner.setup()


def _where(dsn: str) -> str:
    """Host, port and database of a DSN, without its password."""
    params = conninfo_to_dict(dsn)
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    return f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"

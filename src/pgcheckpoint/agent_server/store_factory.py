"""`store`: the memory store LangGraph's Agent Server enters, from one line of `langgraph.json`.

The server loads `"store": {"path": "pgcheckpoint.agent_server.store"}` as it
loads the checkpointer (the dotted form), calls it with no arguments and
enters what it returns for its whole life. The database, schema, pool size
and keys are the checkpointer's (`settings.ServerSettings`); the `index` and
`ttl` of the `store` block come in `LANGGRAPH_STORE` (`store_settings`). The
server starts no TTL sweeper for a custom store, so this one runs its own
(`ttl.store_ttl_sweeper`).

Example:
    >>> async with store() as memory:  # doctest: +SKIP
    ...     await memory.aput(("users", "u1"), "prefs", {"theme": "dark"})
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from ..codec.crypto import EncryptedSerde
from ..drivers._acompat import arun_blocking
from ..drivers.connections import conninfo_of
from ..drivers.store_async import AsyncPostgresStore
from ..drivers.store_front import setup_vectors
from ..telemetry.activity import logger
from .factory import check_reachable, check_schema_current
from .settings import ServerSettings
from .store_settings import StoreBlock
from .ttl import in_background, store_ttl_sweeper

__all__ = ["store"]

# What the factory logs once ready, by (encrypted, TTL swept): constant text and numbers
_READY = {
    (True, True): "pgcheckpoint store ready: a pool of %d, values encrypted, TTL swept",
    (True, False): "pgcheckpoint store ready: a pool of %d, values encrypted",
    (False, True): "pgcheckpoint store ready: a pool of %d, values not encrypted, TTL swept",
    (False, False): "pgcheckpoint store ready: a pool of %d, values not encrypted",
}


@asynccontextmanager
async def store(environ: Mapping[str, str] | None = None) -> AsyncIterator[AsyncPostgresStore]:
    """An `AsyncPostgresStore` over a pool, for the Agent Server; closed when the server stops.

    Reads what the checkpointer factory reads (the database, `PGCHECKPOINT_SCHEMA`,
    the pool's size, the encryption keys, `PGCHECKPOINT_AUTO_MIGRATE`; see
    `pgcheckpoint.agent_server.checkpointer`) and the `store` block of
    `langgraph.json` (`LANGGRAPH_STORE`): `index` (`dims`, `embed`, `fields`)
    for semantic search, whose vector table it creates at start, and `ttl`
    (`default_ttl`, `refresh_on_read`, `sweep_interval_minutes`), whose
    expired items a background task deletes, one worker at a time.

    Raises:
        InvalidInputError: A variable or a key of the block is missing or malformed.
        DatabaseUnreachableError: PostgreSQL does not answer.
        SchemaOutOfDateError: The schema is missing or behind, and
            `PGCHECKPOINT_AUTO_MIGRATE` is off.
        PgvectorMissingError: `index` is set and the server has no pgvector.

    Example:
        >>> # langgraph.json: "store": {"path": "pgcheckpoint.agent_server.store"}
        >>> async with store({"PGCHECKPOINT_DSN": DSN}) as memory:  # doctest: +SKIP
        ...     await memory.aget(("users", "u1"), "prefs")
    """
    settings = ServerSettings.from_env(environ)
    block = StoreBlock.from_env(environ)
    await check_reachable(settings.dsn, settings.dsn_source)
    serde = EncryptedSerde.from_env(environ=environ) if settings.encrypt else None
    pool = {"min_size": settings.pool_min_size, "max_size": settings.pool_max_size}
    async with AsyncPostgresStore.from_conn_string(
        settings.dsn,
        pool_config=pool,
        index=block.index,
        ttl=block.ttl,
        serde=serde,
        filterable=block.filterable,
        schema=settings.schema,
    ) as opened:
        await check_schema_current(opened, settings)
        if opened.state.index is not None:
            await arun_blocking(
                setup_vectors, conninfo_of(opened.conn), settings.schema, opened.state.index
            )
        interval = block.sweep_interval
        job = None if interval is None else store_ttl_sweeper(opened, interval)
        async with in_background(job, "pgcheckpoint-store-ttl") as sweeping:
            logger.info(_READY[serde is not None, sweeping], settings.pool_max_size)
            yield opened
    logger.info("pgcheckpoint store closed its pool")

"""A saver on a schema that is missing or behind says to migrate, instead of an SQL error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver, SchemaOutOfDateError
from pgcheckpoint.schema.ddl import VERSION_TABLE
from pgcheckpoint.schema.migrate import head, upgrade

VARIANTS = [f"{d}-{k}" for d in ("sync", "async") for k in ("conn", "pool", "pipeline")]
CONFIG: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}


@asynccontextmanager
async def open_saver(variant: str, dsn: str, schema: str) -> AsyncIterator[Any]:
    """A saver over one of the six driver/connection kinds, as users build them."""
    driver, kind = variant.split("-")
    if driver == "sync":
        if kind == "pool":
            with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
                yield PostgresSaver(pool, schema=schema)
            return
        with psycopg.connect(dsn) as conn:
            if kind == "pipeline":
                with conn.pipeline() as pipe:
                    yield PostgresSaver(conn, pipe, schema=schema)
            else:
                yield PostgresSaver(conn, schema=schema)
        return
    if kind == "pool":
        async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as apool:
            yield AsyncPostgresSaver(apool, schema=schema)
        return
    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        if kind == "pipeline":
            async with aconn.pipeline() as apipe:
                yield AsyncPostgresSaver(aconn, apipe, schema=schema)
        else:
            yield AsyncPostgresSaver(aconn, schema=schema)


async def put(saver: Any) -> Any:
    args = (CONFIG, empty_checkpoint(), {"source": "input", "step": -1}, {})
    if isinstance(saver, AsyncPostgresSaver):
        return await saver.aput(*args)
    return saver.put(*args)


async def get_tuple(saver: Any) -> Any:
    if isinstance(saver, AsyncPostgresSaver):
        return await saver.aget_tuple(CONFIG)
    return saver.get_tuple(CONFIG)


@pytest.mark.parametrize("variant", VARIANTS)
async def test_never_migrated_database_says_run_migrate(empty_db_dsn: str, variant: str) -> None:
    async with open_saver(variant, empty_db_dsn, "public") as saver:
        with pytest.raises(SchemaOutOfDateError, match=r"run `pgcheckpoint migrate`") as info:
            await get_tuple(saver)
        assert isinstance(info.value.__cause__, psycopg.errors.UndefinedTable)
        with pytest.raises(SchemaOutOfDateError, match="has no pgcheckpoint tables"):
            await put(saver)
        # the connection is still usable afterwards
        with pytest.raises(SchemaOutOfDateError):
            await get_tuple(saver)


async def test_custom_schema_message_names_the_schema_option(db_dsn: str) -> None:
    # public is migrated, tenant_a is not
    async with open_saver("async-pool", db_dsn, "tenant_a") as saver:
        with pytest.raises(SchemaOutOfDateError, match=r"`pgcheckpoint migrate --schema tenant_a`"):
            await get_tuple(saver)
    upgrade(db_dsn, schema="tenant_a")
    async with open_saver("async-pool", db_dsn, "tenant_a") as saver:
        await put(saver)
        assert (await get_tuple(saver)) is not None


def _pretend_behind(dsn: str) -> None:
    """A database at revision 0001 whose tables lack a column the current code uses."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgc_checkpoints DROP COLUMN inline_channels")
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '0001'")


@pytest.mark.parametrize("variant", ["sync-pipeline", "async-conn"])
async def test_schema_behind_head_names_both_revisions(db_dsn: str, variant: str) -> None:
    _pretend_behind(db_dsn)
    async with open_saver(variant, db_dsn, "public") as saver:
        with pytest.raises(SchemaOutOfDateError) as info:
            await put(saver)
    message = str(info.value)
    assert "'0001'" in message and repr(head()) in message
    assert "run `pgcheckpoint migrate`" in message
    assert isinstance(info.value.__cause__, psycopg.errors.UndefinedColumn)


async def test_unknown_newer_revision_says_upgrade_the_package(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgc_checkpoints DROP COLUMN inline_channels")
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    async with open_saver("sync-conn", db_dsn, "public") as saver:
        with pytest.raises(SchemaOutOfDateError, match="upgrade the pgcheckpoint package"):
            await put(saver)


async def test_missing_column_at_head_keeps_the_sql_error(db_dsn: str) -> None:
    """At head, a missing column is not about migrations: the SQL error stands."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgc_checkpoints DROP COLUMN inline_channels")
    async with open_saver("async-pool", db_dsn, "public") as saver:
        with pytest.raises(psycopg.errors.UndefinedColumn):
            await put(saver)

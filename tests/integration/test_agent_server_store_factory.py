"""The Agent Server's store factory on a real database, without the server.

`pgcheckpoint.agent_server.store` is entered here as the server enters it
(the environment its only input): the pool and the keys are the
checkpointer's settings, the `index` and `ttl` of the `store` block come in
`LANGGRAPH_STORE`, and its sweep of expired items runs one worker at a time
(its own lock, not the thread sweeper's). tests/agent_server drives it
through the server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from typing import Any

import psycopg
import pytest
from support.pgvector import pgvector_version

from pgcheckpoint import AsyncPostgresStore, EncryptedSerde, SchemaOutOfDateError
from pgcheckpoint.agent_server import store
from pgcheckpoint.agent_server.factory import DatabaseUnreachableError
from pgcheckpoint.agent_server.ttl import sweep_store_once
from pgcheckpoint.core.locks import store_ttl_sweep_lock_key, ttl_sweep_lock_key
from pgcheckpoint.schema import current, head
from pgcheckpoint.store.vectors import PgvectorMissingError

KEYS = "k1:" + base64.b64encode(bytes(range(32))).decode()


def store_block(**block: Any) -> str:
    return json.dumps({"path": "pgcheckpoint.agent_server.store", **block})


def rows(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def expire(dsn: str, key: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgc_store SET expires_at = now() - interval '1 minute' WHERE key = %s", (key,)
        )


def stored_keys(dsn: str) -> set[str]:
    return {key for (key,) in rows(dsn, "SELECT key FROM pgc_store")}


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding (the factory loads it by its dotted path)."""
    return [[t.count("a") + 0.1, t.count("b") + 0.1, 1.0] for t in texts]


async def test_the_factory_opens_a_pool_store_and_closes_it(db_dsn: str) -> None:
    env = {"DATABASE_URI": ":memory:", "POSTGRES_URI": db_dsn, "PGCHECKPOINT_POOL_MAX_SIZE": "3"}
    async with store(env) as memory:
        assert isinstance(memory, AsyncPostgresStore)
        assert memory.conn.max_size == 3  # type: ignore[union-attr]
        assert memory.ttl_config is None
        await memory.aput(("users", "u1"), "prefs", {"theme": "dark"})
        got = await memory.aget(("users", "u1"), "prefs")
        assert got is not None and got.value == {"theme": "dark"}
        pool = memory.conn
    assert pool.closed  # type: ignore[union-attr]
    assert stored_keys(db_dsn) == {"prefs"}


async def test_with_a_key_set_values_are_sealed_and_filterable_fields_stay_readable(
    db_dsn: str,
) -> None:
    env = {
        "PGCHECKPOINT_DSN": db_dsn,
        "PGCHECKPOINT_AES_KEYS": KEYS,
        "PGCHECKPOINT_STORE_FILTERABLE": "kind",
    }
    async with store(env) as memory:
        assert isinstance(memory.state.codec.serde, EncryptedSerde)
        await memory.aput(("notes",), "n1", {"kind": "secret", "text": "the vault code is 1234"})
        found = await memory.asearch(("notes",), filter={"kind": "secret"})
        assert [item.key for item in found] == ["n1"]
    ((kind, value, doc),) = rows(db_dsn, "SELECT type, value, doc FROM pgc_store")
    assert kind.endswith(":k1") and b"1234" not in value
    assert doc == {"kind": "secret"}


async def test_a_schema_never_migrated_stops_the_start_unless_auto_migrate_is_on(
    empty_db_dsn: str,
) -> None:
    with pytest.raises(SchemaOutOfDateError) as refused:
        async with store({"PGCHECKPOINT_DSN": empty_db_dsn}):
            pass
    message = str(refused.value)
    assert "`pgcheckpoint migrate`" in message and "PGCHECKPOINT_AUTO_MIGRATE=1" in message
    assert current(empty_db_dsn) is None
    env = {"PGCHECKPOINT_DSN": empty_db_dsn, "PGCHECKPOINT_AUTO_MIGRATE": "1"}
    async with store(env) as memory:
        await memory.aput(("a",), "k", {"v": 1})
    assert current(empty_db_dsn) == head()


async def test_a_database_that_does_not_answer_fails_the_start_with_one_line() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DatabaseUnreachableError) as refused:
        async with store({"PGCHECKPOINT_DSN": f"postgresql://postgres@127.0.0.1:{port}/app"}):
            pass
    message = str(refused.value)
    assert "\n" not in message and "that PGCHECKPOINT_DSN names it" in message


async def test_the_ttl_block_reaches_the_store_and_its_items_expire(db_dsn: str) -> None:
    block = {"ttl": {"default_ttl": 60, "refresh_on_read": False, "sweep_interval_minutes": 30}}
    env = {"PGCHECKPOINT_DSN": db_dsn, "LANGGRAPH_STORE": store_block(**block)}
    async with store(env) as memory:
        assert memory.ttl_config == {"default_ttl": 60.0, "refresh_on_read": False}
        await memory.aput(("a",), "default", {"v": 1})
        await memory.aput(("a",), "own", {"v": 2}, ttl=5)
    ttls = dict(rows(db_dsn, "SELECT key, ttl_minutes FROM pgc_store"))
    assert ttls == {"default": 60.0, "own": 5.0}


async def test_one_worker_sweeps_the_store_at_a_time_and_not_under_the_thread_lock(
    db_dsn: str,
) -> None:
    block = store_block(ttl={"default_ttl": 60})
    async with store({"PGCHECKPOINT_DSN": db_dsn, "LANGGRAPH_STORE": block}) as memory:
        await memory.aput(("a",), "old", {"v": 1})
        await memory.aput(("a",), "new", {"v": 2})
        expire(db_dsn, "old")
        with psycopg.connect(db_dsn, autocommit=True) as other_worker:
            other_worker.execute("BEGIN")
            other_worker.execute(
                "SELECT pg_advisory_xact_lock(%s)", (store_ttl_sweep_lock_key("public"),)
            )
            assert await sweep_store_once(memory) is None
            assert stored_keys(db_dsn) == {"old", "new"}
            other_worker.execute("ROLLBACK")
            # a thread sweep in progress does not stop the store's
            other_worker.execute("BEGIN")
            thread_sweep = ttl_sweep_lock_key("public")
            other_worker.execute("SELECT pg_advisory_xact_lock(%s)", (thread_sweep,))
            assert await sweep_store_once(memory) == 1
            other_worker.execute("ROLLBACK")
        assert stored_keys(db_dsn) == {"new"}
        assert await sweep_store_once(memory) == 0


async def test_the_factory_sweeps_expired_items_in_the_background(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    env = {
        "PGCHECKPOINT_DSN": db_dsn,
        "LANGGRAPH_STORE": store_block(ttl={"default_ttl": 60}),
        "PGCHECKPOINT_TTL_SWEEP_SECONDS": "0.2",
    }
    caplog.set_level("INFO", logger="pgcheckpoint")
    async with store(env) as memory:
        await memory.aput(("a",), "old", {"v": 1})
        await memory.aput(("a",), "new", {"v": 2})
        expire(db_dsn, "old")
        for _ in range(600):
            if stored_keys(db_dsn) == {"new"}:
                break
            await asyncio.sleep(0.05)
        assert stored_keys(db_dsn) == {"new"}
        tasks = [t for t in asyncio.all_tasks() if t.get_name() == "pgcheckpoint-store-ttl"]
        assert len(tasks) == 1
    assert tasks[0].done()
    said = [r.getMessage() for r in caplog.records]
    assert "store ttl sweeper: deleting expired items every 0.2 s" in said
    assert "pgcheckpoint store ready: a pool of 10, values not encrypted, TTL swept" in said
    assert said[-1] == "pgcheckpoint store closed its pool"


async def test_without_a_ttl_block_nothing_sweeps(db_dsn: str) -> None:
    env = {"PGCHECKPOINT_DSN": db_dsn, "PGCHECKPOINT_TTL_SWEEP_SECONDS": "0.1"}
    async with store(env) as memory:
        assert [t for t in asyncio.all_tasks() if t.get_name() == "pgcheckpoint-store-ttl"] == []
        assert memory.ttl_config is None


async def test_an_index_loads_its_embed_by_dotted_path_and_searches(vector_db_dsn: str) -> None:
    index = {"dims": 3, "embed": f"{__name__}.embed", "fields": ["text"]}
    env = {"PGCHECKPOINT_DSN": vector_db_dsn, "LANGGRAPH_STORE": store_block(index=index)}
    async with store(env) as memory:
        await memory.aput(("docs",), "a", {"text": "aaaa"})
        await memory.aput(("docs",), "b", {"text": "bbbb"})
        found = await memory.asearch(("docs",), query="aaa")
        assert [item.key for item in found][:1] == ["a"]


async def test_an_index_on_a_server_without_pgvector_asks_for_it(db_dsn: str) -> None:
    if pgvector_version(db_dsn) is not None:
        pytest.skip("the test server has pgvector: the search above covers the index")
    index = {"dims": 3, "embed": f"{__name__}.embed", "fields": ["text"]}
    env = {"PGCHECKPOINT_DSN": db_dsn, "LANGGRAPH_STORE": store_block(index=index)}
    with pytest.raises(PgvectorMissingError, match="apt-get install"):
        async with store(env):
            pass

"""The Agent Server factory on a real database, without the server: what it opens and refuses.

`pgcheckpoint.agent_server.checkpointer` is entered here as the server enters
it (with the environment as its only input), and its TTL sweep runs alone:
one worker at a time (the sweeper's lock), the idle threads only, beside
`pgcheckpoint prune` from cron. The server itself drives it in tests/agent_server.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from support.cli import run_cli

from pgcheckpoint import AsyncPostgresSaver, EncryptedSerde, SchemaOutOfDateError
from pgcheckpoint.agent_server import checkpointer
from pgcheckpoint.agent_server.factory import DatabaseUnreachableError
from pgcheckpoint.agent_server.settings import TTLPolicy
from pgcheckpoint.agent_server.ttl import sweep_once
from pgcheckpoint.core.locks import ttl_sweep_lock_key
from pgcheckpoint.schema import current, head

KEYS = "k1:" + base64.b64encode(bytes(range(32))).decode()
DELETE_AFTER_AN_HOUR = TTLPolicy("delete", timedelta(hours=1), timedelta(minutes=5))


async def chain(saver: AsyncPostgresSaver, n: int = 3) -> str:
    """A thread of `n` checkpoints; its id."""
    thread_id = f"t-{uuid.uuid4()}"
    config = generate_config(thread_id)
    for step in range(n):
        config = await saver.aput(config, generate_checkpoint(), generate_metadata(step=step), {})
    return thread_id


def age(dsn: str, thread_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgc_checkpoints SET created_at = now() - interval '2 hours'"
            " WHERE thread_id = %s",
            (thread_id,),
        )


def checkpoints(dsn: str, thread_id: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pgc_checkpoints WHERE thread_id = %s", (thread_id,)
        ).fetchone()
    return int(row[0]) if row else 0


async def test_the_factory_opens_a_pool_saver_and_closes_it(db_dsn: str) -> None:
    env = {"DATABASE_URI": ":memory:", "POSTGRES_URI": db_dsn, "PGCHECKPOINT_POOL_MAX_SIZE": "3"}
    async with checkpointer(env) as saver:
        assert isinstance(saver, AsyncPostgresSaver)
        assert saver.conn.max_size == 3  # type: ignore[union-attr]
        assert saver.serde.__class__.__name__ == "JsonPlusSerializer"
        thread_id = await chain(saver, 2)
        assert len([t async for t in saver.alist(generate_config(thread_id))]) == 2
        pool = saver.conn
    assert pool.closed  # type: ignore[union-attr]


async def test_with_a_key_set_the_saver_encrypts(db_dsn: str) -> None:
    async with checkpointer({"PGCHECKPOINT_DSN": db_dsn, "PGCHECKPOINT_AES_KEYS": KEYS}) as saver:
        assert isinstance(saver.serde, EncryptedSerde)
        thread_id = await chain(saver, 1)
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT type FROM pgc_checkpoints WHERE thread_id = %s", (thread_id,))
        assert row.fetchone() == ("msgpack+aesgcm2:k1",)


async def test_a_schema_never_migrated_stops_the_start_unless_auto_migrate_is_on(
    empty_db_dsn: str,
) -> None:
    with pytest.raises(SchemaOutOfDateError) as refused:
        async with checkpointer({"PGCHECKPOINT_DSN": empty_db_dsn}):
            pass
    message = str(refused.value)
    assert "`pgcheckpoint migrate`" in message and "PGCHECKPOINT_AUTO_MIGRATE=1" in message
    assert current(empty_db_dsn) is None
    env = {"PGCHECKPOINT_DSN": empty_db_dsn, "PGCHECKPOINT_AUTO_MIGRATE": "1"}
    async with checkpointer(env) as saver:
        await chain(saver, 1)
    assert current(empty_db_dsn) == head()


async def test_a_database_that_does_not_answer_fails_the_start_with_one_line() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"postgresql://postgres@127.0.0.1:{port}/app"
    with pytest.raises(DatabaseUnreachableError) as refused:
        async with checkpointer({"POSTGRES_URI": dsn}):
            pass
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"pgcheckpoint cannot connect to PostgreSQL at 127.0.0.1:{port}/app")
    assert "Connection refused" in message and "that POSTGRES_URI names it" in message
    assert isinstance(refused.value, psycopg.OperationalError)


async def test_a_sweep_takes_the_idle_threads_and_keeps_the_others(db_dsn: str) -> None:
    async with checkpointer({"PGCHECKPOINT_DSN": db_dsn}) as saver:
        idle, busy = await chain(saver), await chain(saver)
        age(db_dsn, idle)
        report = await sweep_once(saver, DELETE_AFTER_AN_HOUR)
        assert report is not None and report.threads == 1 and report.checkpoints == 3
        assert (checkpoints(db_dsn, idle), checkpoints(db_dsn, busy)) == (0, 3)

        trimmed = await chain(saver, 4)
        age(db_dsn, trimmed)
        keep = TTLPolicy("keep_latest", timedelta(hours=1), timedelta(minutes=5))
        report = await sweep_once(saver, keep)
        assert report is not None and report.threads == 1
        assert checkpoints(db_dsn, trimmed) == 1
        latest = await saver.aget_tuple(generate_config(trimmed))
        assert latest is not None and latest.metadata["step"] == 3


async def test_one_worker_sweeps_at_a_time_and_cron_prunes_beside_it(db_dsn: str) -> None:
    async with checkpointer({"PGCHECKPOINT_DSN": db_dsn}) as saver:
        first, second = await chain(saver), await chain(saver)
        age(db_dsn, first)
        age(db_dsn, second)
        with psycopg.connect(db_dsn, autocommit=True) as other_worker:
            # another worker's sweep holds the lock in its open transaction
            other_worker.execute("BEGIN")
            held = other_worker.execute(
                "SELECT pg_try_advisory_xact_lock(%s)", (ttl_sweep_lock_key("public"),)
            ).fetchone()
            assert held == (True,)
            assert await sweep_once(saver, DELETE_AFTER_AN_HOUR) is None
            assert checkpoints(db_dsn, first) == 3
            # the cron path takes no such lock
            pruned = run_cli("prune", "--older-than", "1h", "--dsn", db_dsn)
            assert pruned.returncode == 0, pruned.stderr
            assert checkpoints(db_dsn, first) == checkpoints(db_dsn, second) == 0
            other_worker.execute("ROLLBACK")
        third = await chain(saver)
        age(db_dsn, third)
        report = await sweep_once(saver, DELETE_AFTER_AN_HOUR)
        assert report is not None and report.threads == 1
        # the lock went with the sweep's transaction: the next one gets it again
        assert await sweep_once(saver, DELETE_AFTER_AN_HOUR) is not None


async def test_the_factory_sweeps_the_ttl_block_in_the_background(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    block = '{"path": "x.y", "ttl": {"strategy": "delete", "default_ttl": 60}}'
    env: dict[str, Any] = {
        "PGCHECKPOINT_DSN": db_dsn,
        "LANGGRAPH_CHECKPOINTER": block,
        "PGCHECKPOINT_TTL_SWEEP_SECONDS": "0.2",
    }
    caplog.set_level("INFO", logger="pgcheckpoint")
    async with checkpointer(env) as saver:
        idle, fresh = await chain(saver), await chain(saver)
        age(db_dsn, idle)

        def swept() -> bool:  # logged after the sweep's last transaction
            return any(r.getMessage().startswith("ttl sweep: deleted") for r in caplog.records)

        for _ in range(600):
            if swept():
                break
            await asyncio.sleep(0.05)
        assert checkpoints(db_dsn, idle) == 0
        assert checkpoints(db_dsn, fresh) == 3
        tasks = [t for t in asyncio.all_tasks() if t.get_name() == "pgcheckpoint-ttl"]
        assert len(tasks) == 1
    assert tasks[0].done()
    said = [r.getMessage() for r in caplog.records]
    assert "ttl sweeper: deleting threads idle for 60 min, every 0.2 s" in said
    assert any(m.startswith("ttl sweep: deleted 1 threads (3 checkpoints)") for m in said)

"""A pool with no free connection: a clear `PoolTimeoutError` after its timeout, not a hang."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from psycopg.conninfo import make_conninfo
from psycopg_pool import PoolTimeout
from support.rows import rows_of
from support.savers import open_saver

from pgcheckpoint import PgCheckpointError, PoolTimeoutError

# pytest-timeout fails the test instead of letting a hang eat the run
pytestmark = pytest.mark.timeout(120)


async def hold_all(pool: Any, count: int) -> list[Any]:
    held = []
    for _ in range(count):
        conn = pool.getconn()
        held.append(await conn if asyncio.iscoroutine(conn) else conn)
    return held


async def give_back(pool: Any, held: list[Any]) -> None:
    for conn in held:
        done = pool.putconn(conn)
        if asyncio.iscoroutine(done):
            await done


@pytest.mark.parametrize("kind", ["own-pool", "pool-checked"])
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_exhausted_pool_raises_pool_timeout_naming_its_size(
    db_dsn: str, driver: str, kind: str
) -> None:
    tid = f"exhausted-{uuid.uuid4()}"
    settings = {"min_size": 1, "max_size": 2, "timeout": 0.5}
    async with open_saver(driver, kind, db_dsn, pool=settings) as api:
        pool = api.saver.conn
        held = await hold_all(pool, 2)
        try:
            with pytest.raises(PoolTimeoutError) as exhausted:
                await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(), {})
            with pytest.raises(PoolTimeoutError):
                await api.get_tuple(generate_config(tid))
        finally:
            await give_back(pool, held)
        error = exhausted.value
        # what psycopg and psycopg_pool callers already catch, and the project's root
        assert isinstance(error, PoolTimeout)
        assert isinstance(error, psycopg.OperationalError)
        assert isinstance(error, PgCheckpointError)
        message = str(error)
        assert f"pool {pool.name!r}" in message
        assert "max_size=2" in message
        assert "raise max_size" in message  # what to do
        assert rows_of(db_dsn, tid)["pgc_checkpoints"] == 0
        # connections back, the saver works again
        stored = await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(), {})
        assert await api.get_tuple(stored) is not None


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_thread_lock_on_an_exhausted_pool_times_out_clearly(db_dsn: str, driver: str) -> None:
    settings = {"min_size": 1, "max_size": 2, "timeout": 0.5}
    async with open_saver(driver, "own-pool", db_dsn, pool=settings) as api:
        pool = api.saver.conn
        held = await hold_all(pool, 2)
        try:
            with pytest.raises(PoolTimeoutError, match="max_size=2"):
                if api.is_async:
                    async with api.saver.lock_thread("t"):  # type: ignore[union-attr]
                        pass
                else:
                    with api.saver.lock_thread("t"):  # type: ignore[union-attr]
                        pass
        finally:
            await give_back(pool, held)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("kind", ["own-pool", "pool-checked"])
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_a_pool_that_cannot_connect_says_why_not_its_size(
    db_dsn: str, driver: str, kind: str
) -> None:
    # nothing listens there: the server is down
    down = make_conninfo(db_dsn, host="127.0.0.1", port=_free_port())
    settings = {"min_size": 1, "max_size": 2, "timeout": 1.0}
    async with open_saver(driver, kind, down, pool=settings) as api:
        with pytest.raises(PoolTimeoutError) as refused:
            await api.get_tuple(generate_config("t1"))
    message = str(refused.value)
    assert "it cannot connect to the server (OperationalError: connection" in message
    assert "refused" in message.lower()
    assert "check that the server is up" in message
    assert "raise max_size" not in message
    assert isinstance(refused.value, PoolTimeout)

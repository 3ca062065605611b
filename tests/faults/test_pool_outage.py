"""A pool that cannot connect: the saver says why, and is back as soon as the server is.

psycopg_pool retries a failed connection after 1, 2, 4, 8... seconds. The
saver does not wait for that back-off: an operation that gets no connection
while the pool fails to connect connects on its own (`drivers.PoolOutage`).
Here the pool's database does not exist yet (every connection fails, as to a
server that is down), and psycopg_pool's back-off is made an hour long, so
only the saver's own connections can serve.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool.base import AttemptWithBackoff
from support.faults import WAIT
from support.savers import open_saver

from pgcheckpoint import PoolTimeoutError

from .private_pg import free_port

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hour_long_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 3600.0)


@pytest.fixture
def database_to_come(_databases: Any, template_db: str) -> Iterator[tuple[str, Any]]:
    """A DSN for a database not created yet, and the function that creates it migrated."""
    name = _databases.new_name()
    template = conninfo_to_dict(template_db)["dbname"]
    try:
        yield _databases.dsn(name), lambda: _databases.create(name, template)
    finally:
        _databases.drop(name)


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_a_pool_that_cannot_connect_says_why_not_that_it_is_too_small(
    pg_server: str, driver: str
) -> None:
    nowhere = make_conninfo(pg_server, host="127.0.0.1", port=free_port())
    settings = {"min_size": 1, "max_size": 4, "timeout": 1.0}
    async with open_saver(driver, "own-pool", nowhere, pool=settings) as api:
        with pytest.raises(PoolTimeoutError) as raised:
            await api.get_tuple(generate_config("t"))
    message = str(raised.value)
    assert "cannot connect to the server" in message, message
    assert "Connection refused" in message, message
    assert "max_size" not in message, message


@pytest.mark.parametrize("kind", ["own-pool", "pool", "pool-checked"])
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_the_saver_is_back_with_the_server_whatever_the_pools_backoff(
    database_to_come: tuple[str, Any], hour_long_backoff: None, driver: str, kind: str
) -> None:
    dsn, create = database_to_come
    settings = {"min_size": 1, "max_size": 2, "timeout": WAIT}
    async with open_saver(driver, kind, dsn, pool=settings) as api:
        # more reads than the pool's max_size, the most connections of the saver's own
        reads = asyncio.gather(*(api.get_tuple(generate_config(f"t{n}")) for n in range(3)))
        await asyncio.sleep(1.0)  # the pool failed, and the reads wait
        assert not reads.done()
        await asyncio.to_thread(create)
        assert await asyncio.wait_for(reads, WAIT) == [None, None, None]
        # the pool would try again in an hour: the saver goes on without it
        stored = await api.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
        tup = await api.get_tuple(stored)
        assert tup is not None and tup.config == stored

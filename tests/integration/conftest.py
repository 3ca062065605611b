"""The `saver` fixture: every integration test runs on both drivers and three kinds of connection.

Variants are `sync|async` x `conn|pool|pipeline`. The caller's resources are
deliberately unfriendly: connections keep psycopg's defaults (`autocommit=False`,
tuple rows), since the saver must set up transactions and row factories itself.
Pools are the test's own and must still be open when the test ends. A test
parametrizes `cache_bytes` to run the savers at another cache budget.

`api` drives either saver with the same awaitable calls (`support.savers.SaverApi`),
so a test is written once: `await api.put(...)` awaits `aput` on an
`AsyncPostgresSaver` and calls `put` on a `PostgresSaver`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from support.savers import VARIANTS, Saver, SaverApi, open_variant

from pgcheckpoint.core.caches import DEFAULT_CACHE_BYTES


@pytest.fixture
def cache_bytes() -> int:
    """The savers' cache budget; a test parametrizes `cache_bytes` to run at another."""
    return DEFAULT_CACHE_BYTES


@pytest.fixture(params=VARIANTS)
async def saver(
    request: pytest.FixtureRequest, db_dsn: str, cache_bytes: int
) -> AsyncIterator[Saver]:
    """A saver on this test's database, over one of the six driver/connection variants."""
    async with open_variant(request.param, db_dsn, cache_bytes=cache_bytes) as opened:
        yield opened


@pytest.fixture
def api(saver: Saver) -> SaverApi:
    return SaverApi(saver)

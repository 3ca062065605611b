"""The official saver behind LangGraph's Agent Server, as a user writes it by hand.

`make bench` names it in `langgraph.json` (`"path": "./official_factory.py:checkpointer"`)
to compare with pgcheckpoint's factory: langgraph-checkpoint-postgres's
`AsyncPostgresSaver` over a pool with the settings LangGraph's docs give
(autocommit, prepare_threshold=0, dict rows), `PGCHECKPOINT_DSN` the database.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncPostgresSaver]:
    size = int(os.environ.get("PGCHECKPOINT_POOL_MAX_SIZE", "8"))
    async with AsyncConnectionPool(
        os.environ["PGCHECKPOINT_DSN"],
        min_size=size,
        max_size=size,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=False,
    ) as pool:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        yield saver

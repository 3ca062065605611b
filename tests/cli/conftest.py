"""Fixtures of the command-line tests: data for the commands to work on."""

from __future__ import annotations

import psycopg
import pytest
from support.retention import write_threads
from support.savers import SaverApi

from pgcheckpoint import PostgresSaver


@pytest.fixture
async def threads(db_dsn: str) -> dict[str, str]:
    """The threads of `support.retention.AGES`, written by a sync saver: name -> thread id."""
    with psycopg.connect(db_dsn) as conn:
        return await write_threads(SaverApi(PostgresSaver(conn)), db_dsn)

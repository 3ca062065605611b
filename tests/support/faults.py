"""Sessions that get in an operation's way: a blocking transaction, a terminated backend."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import psycopg

WAIT = 60.0  # bounds a wait for something that takes well under a second


@contextlib.contextmanager
def blocker(dsn: str, *statements: str, params: Any = None) -> Iterator[psycopg.Connection[Any]]:
    """A session holding a transaction open after `statements`, until the server ends it."""
    conn = psycopg.connect(dsn)
    try:
        for statement in statements:
            conn.execute(statement, params)  # type: ignore[arg-type]
        yield conn
    finally:
        conn.close()


async def terminate_waiting(dsn: str, spared: set[int]) -> int:
    """Terminate the session that waits for a lock (not one in `spared`); its pid."""
    deadline = time.monotonic() + WAIT
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            pids = [
                pid
                for (pid,) in conn.execute(
                    "SELECT pid FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
                if pid not in spared
            ]
            if pids:
                conn.execute("SELECT pg_terminate_backend(%s)", [pids[0]])
                return int(pids[0])
            assert time.monotonic() < deadline, "the operation never reached the server"
            await asyncio.sleep(0.05)

"""Thread locks held by a saver: the lock on a reserved connection, and resume.

The lock's statements are `pgcheckpoint.core.locks` (`acquire_op`,
`release_op`); this module holds the lock on a connection the runner reserves
for the block (`AsyncRunner.reserved_connection`), so the block's own
statements go through the saver as usual.

Example:
    >>> async with hold_thread_lock(saver, "t1", timeout=5) as lock:  # doctest: +SKIP
    ...     await graph.ainvoke(Command(resume="yes"), config)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from psycopg import AsyncConnection, Error

from ..core.locks import (
    ThreadLock,
    acquire_op,
    holding,
    log_lost,
    log_not_held,
    not_held_error,
    release_op,
)
from ..errors import ThreadBusyError
from ..ops import Op
from ..validate import thread_of
from .runner_async import AsyncRunner
from .thread_locks import ResumableGraph, resume_command

__all__ = ["aresume_thread", "hold_thread_lock"]

T = TypeVar("T")


@asynccontextmanager
async def hold_thread_lock(
    runner: AsyncRunner, thread_id: str, timeout: float | None
) -> AsyncIterator[ThreadLock]:
    """Hold a thread's lock for the block (see `AsyncPostgresSaver.lock_thread`)."""
    async with runner.reserved_connection() as conn:
        op = acquire_op(
            thread_id, schema=runner.schema, timeout=timeout, client_pid=conn.info.backend_pid
        )
        lock = await _drive_lock(runner, conn, op, "lock_thread", thread_id)
        try:
            with holding(lock):
                yield lock
        except BaseException:
            if not await _unlock(runner, conn, lock):
                log_not_held(lock, thread_ids=runner.telemetry.thread_ids)
            raise
        if not await _unlock(runner, conn, lock):
            raise not_held_error(lock)


async def aresume_thread(
    runner: AsyncRunner,
    graph: ResumableGraph,
    config: RunnableConfig,
    value: Any,
    *,
    timeout: float | None,
    **invoke_kwargs: Any,
) -> Any:
    """`graph.ainvoke(Command(resume=value), config)` under the thread's lock."""
    command = resume_command(graph, runner, value)
    async with hold_thread_lock(runner, thread_of(config)[0], timeout):
        return await graph.ainvoke(command, config, **invoke_kwargs)


async def _drive_lock(
    runner: AsyncRunner, conn: AsyncConnection[Any], op: Op[T], name: str, thread_id: str
) -> T:
    try:
        return await runner.run_on_reserved(conn, op, name=name, thread_id=thread_id)
    except ThreadBusyError:
        raise  # not taken: the connection holds nothing
    except BaseException:
        await conn.close()  # it may hold the lock; ending the session frees it
        raise


async def _unlock(runner: AsyncRunner, conn: AsyncConnection[Any], lock: ThreadLock) -> bool:
    # False when the session no longer held the lock (then closed)
    try:
        released = await _drive_lock(
            runner, conn, release_op(lock), "unlock_thread", lock.thread_id
        )
    except Error as exc:
        log_lost(lock, exc, thread_ids=runner.telemetry.thread_ids)
        return True
    if not released:
        await conn.close()
    return released

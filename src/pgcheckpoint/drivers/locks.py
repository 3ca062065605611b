# Generated from locks_async.py by tools/async_to_sync.py: edit locks_async.py and
# run `make sync-twin`; a unit test checks that this file matches.
"""Thread locks held by a saver: the lock on a reserved connection, and resume.

The lock's statements are `pgcheckpoint.core.locks` (`acquire_op`,
`release_op`); this module holds the lock on a connection the runner reserves
for the block (`Runner.reserved_connection`), so the block's own
statements go through the saver as usual.

Example:
    >>> with hold_thread_lock(saver, "t1", timeout=5) as lock:  # doctest: +SKIP
    ...     graph.invoke(Command(resume="yes"), config)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from psycopg import Connection, Error

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
from .runner import Runner
from .thread_locks import ResumableGraph, resume_command

__all__ = ["hold_thread_lock", "resume_thread"]

T = TypeVar("T")


@contextmanager
def hold_thread_lock(runner: Runner, thread_id: str, timeout: float | None) -> Iterator[ThreadLock]:
    """Hold a thread's lock for the block (see `PostgresSaver.lock_thread`)."""
    with runner.reserved_connection() as conn:
        op = acquire_op(
            thread_id, schema=runner.schema, timeout=timeout, client_pid=conn.info.backend_pid
        )
        lock = _drive_lock(runner, conn, op, "lock_thread", thread_id)
        try:
            with holding(lock):
                yield lock
        except BaseException:
            if not _unlock(runner, conn, lock):
                log_not_held(lock, thread_ids=runner.telemetry.thread_ids)
            raise
        if not _unlock(runner, conn, lock):
            raise not_held_error(lock)


def resume_thread(
    runner: Runner,
    graph: ResumableGraph,
    config: RunnableConfig,
    value: Any,
    *,
    timeout: float | None,
    **invoke_kwargs: Any,
) -> Any:
    """`graph.invoke(Command(resume=value), config)` under the thread's lock."""
    command = resume_command(graph, runner, value)
    with hold_thread_lock(runner, thread_of(config)[0], timeout):
        return graph.invoke(command, config, **invoke_kwargs)


def _drive_lock(runner: Runner, conn: Connection[Any], op: Op[T], name: str, thread_id: str) -> T:
    try:
        return runner.run_on_reserved(conn, op, name=name, thread_id=thread_id)
    except ThreadBusyError:
        raise  # not taken: the connection holds nothing
    except BaseException:
        conn.close()  # it may hold the lock; ending the session frees it
        raise


def _unlock(runner: Runner, conn: Connection[Any], lock: ThreadLock) -> bool:
    # False when the session no longer held the lock (then closed)
    try:
        released = _drive_lock(runner, conn, release_op(lock), "unlock_thread", lock.thread_id)
    except Error as exc:
        log_lost(lock, exc, thread_ids=runner.telemetry.thread_ids)
        return True
    if not released:
        conn.close()
    return released

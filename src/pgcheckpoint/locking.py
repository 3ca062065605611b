"""Every advisory lock pgcheckpoint takes, and thread locks written once without I/O.

pgcheckpoint's advisory locks are two-key locks `(class, key)`; the classes
below keep its kinds of lock apart from each other, and two-key locks never
meet one-bigint advisory locks, so another application's locks only collide
with these if it also uses two-key locks with one of these first keys:

- `LOCK_CLASS_MIGRATE` ("pgcm"): session lock that serialises migrations of
  one schema (`migration_lock_key`);
- `LOCK_CLASS_MAINTENANCE` ("pgct"): transaction lock of one thread taken by
  prune, delete_for_runs and the retention sweeps;
- `LOCK_CLASS_THREAD` ("pgcl"): session lock of one thread held while a worker
  runs it (`lock_thread`, `resume`; `thread_lock_key`).

`sql/retention.sql` (the pg_cron procedure) spells the same numbers in SQL; a
test checks they agree.

A LangGraph thread is one chain of checkpoints. Two workers that resume it at
once both read the same checkpoint, both run the node, and fork the chain.
`PostgresSaver.lock_thread` and `AsyncPostgresSaver.lock_thread` hold a
PostgreSQL session advisory lock for the thread on a connection reserved for
the duration; this module derives the lock key, yields the statements to take,
check and release it, and turns their rows into results or errors.

The lock is the two-key advisory lock `(LOCK_CLASS_THREAD, key)`. The first
key, 0x7067636C ("pgcl" in ASCII), is pgcheckpoint's class for thread locks;
the second is the first four bytes of SHA-256 over the schema and the thread
id, so any thread id works, however long or exotic. Two-key locks never meet
one-bigint advisory locks, so another application's locks only collide with
these if it also uses two-key locks whose first key is 0x7067636C.

Example:
    >>> from pgcheckpoint.locking import thread_lock_key
    >>> thread_lock_key("thread-1") == thread_lock_key("thread-1", "public")
    True
    >>> thread_lock_key("thread-1") != thread_lock_key("thread-1", "tenant_b")
    True
"""

from __future__ import annotations

import hashlib
import math
import threading
import weakref
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from langchain_core.runnables import RunnableConfig
from psycopg import errors as pg_errors

from .errors import InvalidInputError, PgCheckpointError, ThreadBusyError
from .ops import Op, Stmt
from .telemetry import log_context, logger
from .validate import check_id

__all__ = [
    "LOCK_CLASS_MAINTENANCE",
    "LOCK_CLASS_MIGRATE",
    "LOCK_CLASS_THREAD",
    "ResumableGraph",
    "ThreadLock",
    "acquire_op",
    "check_timeout",
    "migration_lock_key",
    "release_op",
    "thread_lock_key",
]

LOCK_CLASS_MIGRATE = 0x7067636D
LOCK_CLASS_MAINTENANCE = 0x70676374
LOCK_CLASS_THREAD = 0x7067636C
# Thread and schema are separated by NUL, which neither can contain.
_KEY_DOMAIN = b"pgcheckpoint/thread-lock\x00"
# lock_timeout is an int of milliseconds; longer waits are waits without end.
_MAX_LOCK_TIMEOUT_MS = 2**31 - 1

S = TypeVar("S")


def thread_lock_key(thread_id: str, schema: str = "public") -> int:
    """The second key of a thread's advisory lock (a signed 32-bit int).

    The first four bytes of SHA-256 over a fixed prefix, the schema and the
    thread id (UTF-8, NUL-separated). The schema is part of it because the same
    thread id in two schemas is two different threads, which must not wait for
    each other. The key space has 2**32 values: two different thread ids share
    a key with odds of one in four billion, and then only wait for each other
    (a spurious `ThreadBusyError`); one thread never gets two runners.

    In SQL (to find who holds a thread's lock from psql):
    `('x' || left(encode(sha256('pgcheckpoint/thread-lock'::bytea || '\\x00'::bytea
    || convert_to(schema, 'UTF8') || '\\x00'::bytea || convert_to(thread_id, 'UTF8')),
    'hex'), 8))::bit(32)::int4`.

    Example:
        >>> -(2**31) <= thread_lock_key("42") < 2**31
        True
    """
    data = _KEY_DOMAIN + schema.encode("utf-8") + b"\x00" + thread_id.encode("utf-8")
    return int.from_bytes(hashlib.sha256(data).digest()[:4], "big", signed=True)


def migration_lock_key(schema: str) -> int:
    """The second key of the lock that serialises migrations of `schema` (a CRC-32).

    Example:
        >>> migration_lock_key("public") == migration_lock_key("public")
        True
    """
    value = zlib.crc32(f"migrate:{schema}".encode())
    return value - (1 << 32) if value >= 1 << 31 else value


def check_timeout(timeout: float | None) -> float | None:
    """Validate a lock timeout: 0 tries once, seconds wait, None waits without end.

    Example:
        >>> check_timeout(2), check_timeout(None), check_timeout(float("inf"))
        (2.0, None, None)
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or math.isnan(timeout):
        raise InvalidInputError(
            f"timeout must be a number of seconds or None, not {timeout!r}; "
            "0 tries once, None waits until the thread is free"
        )
    if timeout < 0:
        raise InvalidInputError(f"timeout must not be negative, not {timeout!r}; 0 tries once")
    return None if math.isinf(timeout) else float(timeout)


@dataclass(frozen=True, slots=True)
class ThreadLock:
    """A thread lock that is held, as `lock_thread` yields it.

    Attributes:
        thread_id: The thread the lock guards.
        schema: The schema of the saver that took it.
        key: The second key of the advisory lock (`LOCK_CLASS_THREAD` is the first).
        backend_pid: The PostgreSQL backend (`pg_backend_pid()`) that holds it.

    Example:
        >>> with saver.lock_thread("t1") as lock:  # doctest: +SKIP
        ...     print(lock.backend_pid)
    """

    thread_id: str
    schema: str
    key: int
    backend_pid: int


def acquire_op(thread_id: str, *, schema: str, timeout: float | None) -> Op[ThreadLock]:
    """Take a thread's lock on a reserved autocommit connection.

    It first tries once. If that fails and `timeout` is not 0, it waits in the
    server's own lock queue, so waiters are served in turn and one takes the
    lock the moment it is released; `lock_timeout` bounds the wait. Raises
    `ThreadBusyError` when the lock stays taken, or when the session holding it
    is one this run (this context) holds it on, which would wait for itself;
    the connection then holds nothing. Any other error leaves it in doubt, and
    the driver closes it (which frees a session's locks).
    """
    thread_id = check_id("thread_id", thread_id)
    timeout = check_timeout(timeout)
    key = thread_lock_key(thread_id, schema)
    params = {"lock_class": LOCK_CLASS_THREAD, "key": key}
    row = (yield Stmt("try_thread_lock", params, fetch=True))[0]
    if row["already_held"]:
        raise PgCheckpointError(
            f"server session {row['backend_pid']} already held the lock of thread "
            f"{thread_id!r} before this connection took it, so it is shared with another "
            f"client: {_POOLER}"
        )
    if not row["locked"]:
        holder = row["holder_pid"]
        if holder is not None and holder in _held_here(key):
            raise ThreadBusyError(
                thread_id,
                holder_pid=holder,
                message=(
                    f"thread {thread_id!r} is already locked by this run (server session "
                    f"{holder}): locking it again inside the block, or a node, that holds its "
                    "lock would wait for itself; call the inner code without lock_thread or resume"
                ),
            )
        if timeout == 0:
            raise ThreadBusyError(thread_id, holder_pid=holder)
        ms = 0 if timeout is None else min(max(math.ceil(timeout * 1000), 1), _MAX_LOCK_TIMEOUT_MS)
        wait = Stmt("wait_thread_lock", {**params, "lock_timeout": str(ms)}, fetch=True)
        try:
            row = (yield wait)[0]
        except pg_errors.LockNotAvailable:
            holders = yield Stmt("thread_lock_holder", params, fetch=True)
            holder = holders[0]["holder_pid"] if holders else None
            raise ThreadBusyError(
                thread_id,
                holder_pid=holder,
                message=(
                    f"thread {thread_id!r} is still locked by another worker"
                    f"{_held_by(holder)} after waiting {timeout:g}s; retry later, "
                    "or pass a longer timeout (None waits until it is free)"
                ),
            ) from None
    lock = ThreadLock(thread_id, schema, key, row["backend_pid"])
    # Behind a pooler in transaction mode, the next statement may run on another
    # server session, or the lock may not be this session's: say so, loudly.
    check = (yield Stmt("thread_lock_check", params, fetch=True))[0]
    if check["backend_pid"] != lock.backend_pid or not check["held"]:
        moved = check["backend_pid"] != lock.backend_pid
        raise PgCheckpointError(
            f"the lock of thread {thread_id!r} was taken by server session "
            f"{lock.backend_pid}, but "
            + (
                f"the next statement ran on session {check['backend_pid']}"
                if moved
                else "that session no longer held it a statement later"
            )
            + f": {_POOLER}"
        )
    return lock


def release_op(lock: ThreadLock) -> Op[bool]:
    """Release a thread's lock; False when the session no longer held it."""
    params = {"lock_class": LOCK_CLASS_THREAD, "key": lock.key, "backend_pid": lock.backend_pid}
    row = (yield Stmt("unlock_thread", params, fetch=True))[0]
    return row["unlocked"] is True


def not_held_error(lock: ThreadLock) -> PgCheckpointError:
    """The error for a lock found not held when it was released."""
    return PgCheckpointError(
        f"the lock of thread {lock.thread_id!r} was no longer held by server session "
        f"{lock.backend_pid} when released, so other workers may have run the thread at "
        f"the same time (or something ran pg_advisory_unlock_all() on it): {_POOLER}"
    )


def log_not_held(lock: ThreadLock) -> None:
    """Log a lock found not held on release, while another error propagates."""
    logger.warning("%s", not_held_error(lock), extra=log_context("lock_thread", "unlock_thread"))


def log_lost(lock: ThreadLock, exc: BaseException) -> None:
    """Log a lock whose connection broke while it was held."""
    logger.warning(
        "the connection holding the lock of thread %r (server session %s) broke: %s; "
        "PostgreSQL freed the lock when the session ended, so another worker may have "
        "run the thread meanwhile",
        lock.thread_id,
        lock.backend_pid,
        exc,
        extra=log_context("lock_thread", "unlock_thread"),
    )


_POOLER = (
    "the connection goes through a pooler in transaction or statement mode (such as "
    "pgbouncer pool_mode=transaction), where session locks cannot work; give the saver a "
    "direct connection to PostgreSQL, or a session-mode pool"
)


def _held_by(pid: int | None) -> str:
    return f" (held by backend pid {pid})" if pid else ""


# -- nesting ------------------------------------------------------------------------

# The locks held by the run in this context. LangGraph runs nodes in copies of
# the caller's context, so a node that locks its own thread is recognised: the
# session holding the lock is one of these. Waiting would wait for itself,
# forever with timeout=None.
_HELD: ContextVar[tuple[_Held, ...]] = ContextVar("pgcheckpoint_thread_locks", default=())


@dataclass(slots=True)
class _Held:
    key: int
    backend_pid: int
    active: bool = True


def _held_here(key: int) -> set[int]:
    return {h.backend_pid for h in _HELD.get() if h.active and h.key == key}


@contextmanager
def holding(lock: ThreadLock) -> Iterator[ThreadLock]:
    """Mark `lock` as held by the code in this context (and in copies of it).

    Example:
        >>> with holding(ThreadLock("t1", "public", 7, backend_pid=42)) as lock:
        ...     lock.backend_pid
        42
    """
    mark = _Held(lock.key, lock.backend_pid)
    token = _HELD.set((*_HELD.get(), mark))
    try:
        yield lock
    finally:
        # a copied context (a task that outlives the block) sees it released
        mark.active = False
        try:
            _HELD.reset(token)
        except ValueError:  # left in another context than the one it was entered in
            _HELD.set(tuple(h for h in _HELD.get() if h is not mark))


# -- sharing a pool -----------------------------------------------------------------

# Per pool, how many more guarded runs may take a connection for their lock.
_SLOTS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_SLOTS_MUTEX = threading.Lock()


def pool_lock_slots(pool: Any, make: Callable[[int], S]) -> S:
    """The semaphore that keeps one connection of `pool` free of thread locks.

    A guarded run holds a connection for its lock and needs another to save
    checkpoints; were every connection holding a lock, every run would wait for
    one to save and time out. So at most `max_size - 1` locks share a pool.

    Example:
        >>> import threading
        >>> pool_lock_slots(pool, threading.BoundedSemaphore)  # doctest: +SKIP
    """
    if pool.max_size < 2:
        raise InvalidInputError(
            f"pool {pool.name!r} has max_size={pool.max_size}: a run that holds a thread "
            "lock keeps one connection for the lock and needs another to save checkpoints; "
            "use max_size >= 2"
        )
    with _SLOTS_MUTEX:
        slots = _SLOTS.get(pool)
        if slots is None:
            slots = _SLOTS[pool] = make(pool.max_size - 1)
        return slots  # type: ignore[no-any-return]


def slots_timeout_message(pool: Any) -> str:
    """What to say when no connection of `pool` may take another thread lock."""
    return (
        f"{pool.max_size - 1} runs hold thread locks on {pool.max_size - 1} of the "
        f"{pool.max_size} connections of pool {pool.name!r} (one stays free to save "
        f"checkpoints) and none ended within {pool.timeout:.1f}s: raise max_size, or run "
        "fewer guarded runs at once"
    )


# -- resume -------------------------------------------------------------------------


class ResumableGraph(Protocol):
    """A compiled LangGraph graph (`StateGraph.compile()`), as `resume` uses it."""

    checkpointer: Any

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any: ...

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any: ...


def resume_command(graph: Any, saver: Any, value: Any) -> Any:
    """`Command(resume=value)`, after checking that `graph` saves through `saver`.

    Example:
        >>> resume_command(graph, saver, "yes")  # doctest: +SKIP
        Command(resume='yes')
    """
    if getattr(graph, "checkpointer", None) is not saver:
        raise InvalidInputError(
            "resume() locks the thread in this saver's database, but the graph was compiled "
            "with another checkpointer; compile it with checkpointer=saver, or wrap your own "
            "invoke in `with saver.lock_thread(thread_id):`"
        )
    try:
        from langgraph.types import Command
    except ImportError:  # pragma: no cover - resume is only useful with langgraph
        raise PgCheckpointError(
            "resume() needs langgraph; install it (pip install langgraph)"
        ) from None
    return Command(resume=value)

"""Every advisory lock pgcheckpoint takes, and thread locks written once without I/O.

A thread's locks are one-bigint advisory locks whose 64-bit key is the first
eight bytes of SHA-256 over a class prefix, the schema and the thread id
(UTF-8, NUL-separated, as `lock_key` computes). The prefix folds the kind of
lock into the key, so keys of two kinds are as unlikely to meet as keys of
two threads: one in 2**64 per pair. Two-key advisory locks never meet
one-bigint ones, and another application's bigint locks (job ids, hashes)
meet these with the same odds.

- `MAINTENANCE_LOCK_CLASS` ("pgcheckpoint/maintenance-lock"): a transaction
  lock of one thread (`maintenance_lock_key`). Deleting its rows (delete_thread,
  prune, delete_for_runs, the retention sweeps) takes it exclusively; saving
  (put, put_writes, copy_thread) takes it shared for one statement, so a
  delete never runs while a save is in flight, and waits for it instead.
- `THREAD_LOCK_CLASS` ("pgcheckpoint/thread-lock"): the lock held while a worker
  runs a thread (`lock_thread`, `resume`; `thread_lock_key`).
- `TTL_SWEEP_LOCK_CLASS` ("pgcheckpoint/ttl-sweep"): the lock of one schema
  (`ttl_sweep_lock_key`) that the Agent Server factory's TTL sweeper holds
  for a sweep, so one worker at a time sweeps (`try_ttl_sweep_lock_op`); a
  transaction lock, in a transaction kept open for the sweep.
- `STORE_TTL_SWEEP_LOCK_CLASS` ("pgcheckpoint/store-ttl-sweep"): the same for
  the Agent Server store factory's sweep of expired store items
  (`store_ttl_sweep_lock_key`), so it never waits for a thread sweep.
- `LOCK_CLASS_MIGRATE` ("pgcm"): the two-key session lock `(LOCK_CLASS_MIGRATE,
  migration_lock_key(schema))` that serialises migrations of one schema.

`sql/retention.sql` (the pg_cron procedure) spells the same classes in SQL; a
test checks they agree.

A LangGraph thread is one chain of checkpoints. Two workers that resume it at
once both read the same checkpoint, both run the node, and fork the chain.
`PostgresSaver.lock_thread` and `AsyncPostgresSaver.lock_thread` hold the
thread's lock on a connection reserved for the duration: a session lock on a
direct connection, or, behind a pooler (the server session is not the one the
connection announced), a transaction lock inside a transaction kept open for
the block, which pins the server session in every pooler mode and ends, lock
included, with the ROLLBACK that releases it. This module derives the keys,
yields the statements to take, check and release the lock, and turns their
rows into results or errors.

Example:
    >>> from pgcheckpoint.core.locks import thread_lock_key
    >>> thread_lock_key("thread-1") == thread_lock_key("thread-1", "public")
    True
    >>> thread_lock_key("thread-1") != thread_lock_key("thread-1", "tenant_b")
    True
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from psycopg import errors as pg_errors

from ..errors import InvalidInputError, PgCheckpointError, ThreadBusyError
from ..ops import Op, Stmt
from ..telemetry.activity import Plain, log_context, logger
from ..validate import check_id

__all__ = [
    "LOCK_CLASS_MIGRATE",
    "MAINTENANCE_LOCK_CLASS",
    "STORE_TTL_SWEEP_LOCK_CLASS",
    "THREAD_LOCK_CLASS",
    "TTL_SWEEP_LOCK_CLASS",
    "ThreadLock",
    "acquire_op",
    "check_timeout",
    "holding",
    "lock_key",
    "log_lost",
    "log_not_held",
    "maintenance_lock_key",
    "migration_lock_key",
    "not_held_error",
    "release_op",
    "release_ttl_sweep_lock_op",
    "store_ttl_sweep_lock_key",
    "thread_lock_key",
    "try_ttl_sweep_lock_op",
    "ttl_sweep_lock_key",
]

LOCK_CLASS_MIGRATE = 0x7067636D
MAINTENANCE_LOCK_CLASS = "pgcheckpoint/maintenance-lock"
THREAD_LOCK_CLASS = "pgcheckpoint/thread-lock"
TTL_SWEEP_LOCK_CLASS = "pgcheckpoint/ttl-sweep"
STORE_TTL_SWEEP_LOCK_CLASS = "pgcheckpoint/store-ttl-sweep"
# lock_timeout is an int of milliseconds; longer waits are waits without end.
_MAX_LOCK_TIMEOUT_MS = 2**31 - 1


def lock_key(lock_class: str, thread_id: str, schema: str = "public") -> int:
    """The key of a thread's advisory lock of one class (a signed 64-bit int).

    The first eight bytes of SHA-256 over the class, the schema and the thread
    id, UTF-8 and separated by NUL, which none of them can contain. The schema
    is part of it because the same thread id in two schemas is two threads. In
    SQL (psql, the pg_cron procedure):
    `('x' || left(encode(sha256(convert_to(class, 'UTF8') || '\\x00'::bytea
    || convert_to(schema, 'UTF8') || '\\x00'::bytea || convert_to(thread_id, 'UTF8')),
    'hex'), 16))::bit(64)::int8`.

    Example:
        >>> -(2**63) <= lock_key(THREAD_LOCK_CLASS, "42") < 2**63
        True
    """
    data = b"\x00".join(part.encode("utf-8") for part in (lock_class, schema, thread_id))
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big", signed=True)


def thread_lock_key(thread_id: str, schema: str = "public") -> int:
    """The key of the lock a worker holds while it runs a thread (`lock_thread`).

    Example:
        >>> thread_lock_key("t1") == lock_key(THREAD_LOCK_CLASS, "t1", "public")
        True
    """
    return lock_key(THREAD_LOCK_CLASS, thread_id, schema)


def maintenance_lock_key(thread_id: str, schema: str = "public") -> int:
    """The key of the lock that keeps a thread's deletes and saves apart.

    Example:
        >>> maintenance_lock_key("t1") != thread_lock_key("t1")
        True
    """
    return lock_key(MAINTENANCE_LOCK_CLASS, thread_id, schema)


def ttl_sweep_lock_key(schema: str = "public") -> int:
    """The key of the lock a worker holds while it sweeps the thread TTL of `schema`.

    A lock of the whole schema: `lock_key` with no thread id.

    Example:
        >>> ttl_sweep_lock_key("public") == lock_key(TTL_SWEEP_LOCK_CLASS, "", "public")
        True
    """
    return lock_key(TTL_SWEEP_LOCK_CLASS, "", schema)


def store_ttl_sweep_lock_key(schema: str = "public") -> int:
    """The key of the lock a worker holds while it sweeps the expired store items of `schema`.

    Example:
        >>> store_ttl_sweep_lock_key() == lock_key(STORE_TTL_SWEEP_LOCK_CLASS, "", "public")
        True
    """
    return lock_key(STORE_TTL_SWEEP_LOCK_CLASS, "", schema)


def try_ttl_sweep_lock_op(schema: str, *, store: bool = False) -> Op[bool]:
    """Try once, on a reserved autocommit connection, to become the one TTL sweeper of `schema`.

    `store`: the sweeper of the store's expired items (`store_ttl_sweep_lock_key`)
    rather than of idle threads (`ttl_sweep_lock_key`).

    True when this connection now holds the lock, in a transaction left open
    until `release_ttl_sweep_lock_op` (a transaction lock pins one server
    session behind a pooler too, and dies with the session); False when
    another worker sweeps, and the connection holds nothing.

    Example:
        >>> next(try_ttl_sweep_lock_op("public")).name
        'begin_ttl_sweep'
    """
    yield Stmt("begin_ttl_sweep")
    key = store_ttl_sweep_lock_key(schema) if store else ttl_sweep_lock_key(schema)
    rows = yield Stmt("try_ttl_sweep_lock", {"key": key}, fetch=True)
    if rows and rows[0]["locked"]:
        return True
    yield Stmt("end_ttl_sweep")
    return False


def release_ttl_sweep_lock_op() -> Op[None]:
    """End the transaction `try_ttl_sweep_lock_op` left open, and with it the lock.

    Example:
        >>> next(release_ttl_sweep_lock_op()).name
        'end_ttl_sweep'
    """
    yield Stmt("end_ttl_sweep")


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
        key: The key of the advisory lock (`thread_lock_key`).
        backend_pid: The PostgreSQL backend (`pg_backend_pid()`) that holds it.
        in_transaction: Held as a transaction lock in a transaction kept open
            for the block (behind a pooler), rather than as a session lock.

    Example:
        >>> with saver.lock_thread("t1") as lock:  # doctest: +SKIP
        ...     print(lock.backend_pid)
    """

    thread_id: str
    schema: str
    key: int
    backend_pid: int
    in_transaction: bool = False


def acquire_op(
    thread_id: str, *, schema: str, timeout: float | None, client_pid: int | None = None
) -> Op[ThreadLock]:
    """Take a thread's lock on a reserved autocommit connection.

    `client_pid` is the backend pid the connection announced when it opened
    (`conn.info.backend_pid`). A server session with another pid is behind a
    pooler, which may give the next statement (the unlock, say) to another
    session: the lock is then taken inside a transaction kept open until
    `release_op`, which pins one server session in any pooler mode.

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
    params: dict[str, Any] = {"key": key, "client_pid": client_pid, "in_transaction": False}
    row = (yield Stmt("try_thread_lock", params, fetch=True))[0]
    if row["pooled"]:
        yield Stmt("begin_thread_lock_transaction")
        params = {**params, "client_pid": None, "in_transaction": True}
        row = (yield Stmt("try_thread_lock", params, fetch=True))[0]
    in_transaction = bool(params["in_transaction"])
    if row["already_held"]:
        yield from _end_transaction(in_transaction)
        raise PgCheckpointError(
            f"server session {row['backend_pid']} already held the lock of thread "
            f"{thread_id!r} before this connection took it, so it is shared with another "
            f"client: {_POOLER}"
        )
    if not row["locked"]:
        holder = row["holder_pid"]
        if holder is not None and holder in _held_here(key):
            yield from _end_transaction(in_transaction)
            raise ThreadBusyError(thread_id, holder_pid=holder, message=_nested(thread_id, key))
        if timeout == 0:
            yield from _end_transaction(in_transaction)
            raise ThreadBusyError(thread_id, holder_pid=holder)
        ms = 0 if timeout is None else min(max(math.ceil(timeout * 1000), 1), _MAX_LOCK_TIMEOUT_MS)
        wait = Stmt("wait_thread_lock", {**params, "lock_timeout": str(ms)}, fetch=True)
        try:
            row = (yield wait)[0]
        except pg_errors.LockNotAvailable:
            yield from _end_transaction(in_transaction)
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
    lock = ThreadLock(thread_id, schema, key, row["backend_pid"], in_transaction)
    # A pooler may run the next statement on another server session, or the
    # lock may not be this session's: say so, loudly.
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
    if lock.in_transaction:
        # the transaction pins the session: the check and the ROLLBACK that
        # ends the lock both reach the one that took it
        params = {"key": lock.key}
        check = (yield Stmt("thread_lock_check", params, fetch=True))[0]
        yield Stmt("end_thread_lock_transaction")
        return bool(check["held"]) and check["backend_pid"] == lock.backend_pid
    params = {"key": lock.key, "backend_pid": lock.backend_pid}
    row = (yield Stmt("unlock_thread", params, fetch=True))[0]
    return row["unlocked"] is True


def _end_transaction(in_transaction: bool) -> Op[None]:
    if in_transaction:
        yield Stmt("end_thread_lock_transaction")


def not_held_error(lock: ThreadLock) -> PgCheckpointError:
    """The error for a lock found not held when it was released."""
    return PgCheckpointError(_NOT_HELD % (lock.thread_id, lock.backend_pid, _POOLER))


def log_not_held(lock: ThreadLock, *, thread_ids: bool = False) -> None:
    """Log a lock found not held on release, while another error propagates.

    `thread_ids`: the saver's `Telemetry(thread_ids=True)`, which lets the
    record show the thread (else withheld, `pgcheckpoint.telemetry.activity`).
    """
    logger.warning(
        _NOT_HELD,
        lock.thread_id,
        lock.backend_pid,
        Plain(_POOLER),
        extra=log_context("lock_thread", "unlock_thread", thread_ids=thread_ids),
    )


def log_lost(lock: ThreadLock, exc: BaseException, *, thread_ids: bool = False) -> None:
    """Log a lock whose connection broke while it was held (`thread_ids` as `log_not_held`)."""
    logger.warning(
        "the connection holding the lock of thread %r (server session %s) broke: %s; "
        "PostgreSQL freed the lock when the session ended, so another worker may have "
        "run the thread meanwhile",
        lock.thread_id,
        lock.backend_pid,
        exc,
        extra=log_context("lock_thread", "unlock_thread", thread_ids=thread_ids),
    )


_NOT_HELD = (
    "the lock of thread %r was no longer held by server session %s when released, so "
    "other workers may have run the thread at the same time (or something ran "
    "pg_advisory_unlock_all() on it): %s"
)


_POOLER = (
    "the connection goes through a pooler that shares server sessions between clients "
    "(such as pgbouncer pool_mode=statement, or one that hides that it is a pooler), "
    "where the lock cannot work; give the saver a direct connection to PostgreSQL, or a "
    "session- or transaction-mode pool"
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
    thread_id: str
    active: bool = True


def _held_here(key: int) -> set[int]:
    return {h.backend_pid for h in _HELD.get() if h.active and h.key == key}


def _nested(thread_id: str, key: int) -> str:
    """Why a lock this run holds refuses `thread_id`: its own, or one sharing its key."""
    others = sorted({h.thread_id for h in _HELD.get() if h.active and h.key == key} - {thread_id})
    if others:
        return (
            f"thread {thread_id!r} shares its lock key with thread {others[0]!r}, whose lock "
            "this run holds; waiting would wait for itself, so run them one after another"
        )
    return (
        f"thread {thread_id!r} is already locked by this run: locking it again inside the "
        "block, or a node, that holds its lock would wait for itself; call the inner code "
        "without lock_thread or resume"
    )


@contextmanager
def holding(lock: ThreadLock) -> Iterator[ThreadLock]:
    """Mark `lock` as held by the code in this context (and in copies of it).

    Example:
        >>> with holding(ThreadLock("t1", "public", 7, backend_pid=42)) as lock:
        ...     lock.backend_pid
        42
    """
    mark = _Held(lock.key, lock.backend_pid, lock.thread_id)
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

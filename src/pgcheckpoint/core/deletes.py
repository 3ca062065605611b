"""Deleting from a thread's history: delete_thread, prune, delete_for_runs.

Deletes follow the protocol of the retention sweeps. In one READ COMMITTED
transaction a delete takes each thread's maintenance lock, waiting for the
saves in flight (a put or put_writes holds it shared for its one statement)
and making later ones wait until it commits; it reads what to delete under the
lock, deletes it, and for threads deleted whole checks in a new snapshot that
no row is left. A save that waited then finds its checkpoint gone: a put's
parent (`MissingParentError`), or the checkpoint of put_writes
(`MissingCheckpointError`). A delete that still conflicts (two deletes of
several threads each waiting for each other, a writer that takes no lock)
rolls back and runs again (`conflict_retries`), then raises
`ThreadConflictError`.

Example:
    >>> from pgcheckpoint.core.deletes import delete_thread_op
    >>> from pgcheckpoint.core.state import SaverState
    >>> op = delete_thread_op(SaverState(), "t1")
    >>> next(op).name, op.send([]).name
    ('read_committed', 'lock_threads_for_maintenance')
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from psycopg.errors import DeadlockDetected, ForeignKeyViolation, LockNotAvailable

from ..errors import InvalidInputError, ThreadConflictError
from ..ops import Op, Row, Stmt, Sweep
from ..telemetry.activity import logger
from ..validate import check_id, check_id_list
from .locks import maintenance_lock_key
from .rows import checkpoint_keys, row_key
from .state import SaverState

__all__ = [
    "CONFLICTS",
    "PRUNE_STRATEGIES",
    "check_prune_strategy",
    "conflict_retries",
    "delete_for_runs_op",
    "delete_for_runs_sweep",
    "delete_thread_op",
    "delete_thread_sweep",
    "delete_whole_op",
    "lock_for_delete_op",
    "needed_for_op",
    "prune_op",
    "prune_sweep",
    "with_hanging_op",
]

T = TypeVar("T")

# Errors of a delete that concurrent work causes; the delete rolls back and runs again.
CONFLICTS = (DeadlockDetected, ForeignKeyViolation, LockNotAvailable)
_ATTEMPTS = 3
# Rounds of delete-and-check for threads deleted whole, within one transaction.
_ROUNDS = 3

PRUNE_STRATEGIES = ("keep_latest", "delete")


def check_prune_strategy(strategy: object, what: str) -> None:
    """`InvalidInputError` unless `strategy` is one of `PRUNE_STRATEGIES`.

    `what` names the operation in the message ("prune", "retention").

    Example:
        >>> check_prune_strategy("delete", "prune")
    """
    if strategy not in PRUNE_STRATEGIES:
        raise InvalidInputError(
            f"unknown {what} strategy {strategy!r}; use one of {PRUNE_STRATEGIES!r}"
        )


def delete_thread_sweep(saver: SaverState, thread_id: str) -> Sweep[None]:
    """`delete_thread_op` in a transaction, run again when it conflicts (`conflict_retries`).

    Example:
        >>> saver.run_each(saver.delete_thread_sweep("t1"))  # doctest: +SKIP
    """
    thread_id = check_id("thread_id", thread_id)
    yield from conflict_retries(
        lambda: delete_thread_op(saver, thread_id), "delete_thread", [thread_id]
    )


def prune_sweep(
    saver: SaverState, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
) -> Sweep[None]:
    """`prune_op` in a transaction, run again when it conflicts (`conflict_retries`).

    Example:
        >>> saver.run_each(saver.prune_sweep(["t1"]))  # doctest: +SKIP
    """
    ids = check_id_list("thread_ids", thread_ids)
    yield from conflict_retries(lambda: prune_op(saver, ids, strategy=strategy), "prune", ids)


def delete_for_runs_sweep(saver: SaverState, run_ids: Sequence[str]) -> Sweep[None]:
    """`delete_for_runs_op` in a transaction, run again when it conflicts (`conflict_retries`).

    Example:
        >>> saver.run_each(saver.delete_for_runs_sweep(["run-1"]))  # doctest: +SKIP
    """
    ids = check_id_list("run_ids", run_ids, kind="run_id")
    yield from conflict_retries(lambda: delete_for_runs_op(saver, ids), "delete_for_runs")


def delete_thread_op(saver: SaverState, thread_id: str) -> Op[None]:
    """Delete every checkpoint, blob and write of a thread; the caller runs it in one
    transaction (`conflict_retries`)."""
    thread_id = check_id("thread_id", thread_id)
    yield from lock_for_delete_op(saver, [thread_id])
    yield from delete_whole_op(saver, [thread_id])
    saver.append_cache.forget_thread(thread_id)


def prune_op(
    saver: SaverState, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
) -> Op[None]:
    """Prune threads in one transaction; the caller runs it in one (`conflict_retries`).

    `keep_latest` keeps the newest checkpoint of every namespace, plus the
    ancestors and writes it needs to be rebuilt (a `DeltaChannel` between
    snapshots), and deletes the rest, with the subgraph namespaces that
    ran from what it deletes.
    """
    ids = check_id_list("thread_ids", thread_ids)
    check_prune_strategy(strategy, "prune")
    if not ids:
        return
    yield from lock_for_delete_op(saver, ids)
    if strategy == "delete":
        yield from delete_whole_op(saver, ids)
        for thread_id in ids:
            saver.append_cache.forget_thread(thread_id)
        return
    heads = yield Stmt("thread_heads", {"thread_ids": ids}, fetch=True)
    keep = yield from needed_for_op(saver, heads)
    rows = yield Stmt("thread_checkpoint_ids", {"thread_ids": ids}, fetch=True)
    newest = {(h["thread_id"], h["checkpoint_ns"]): h["checkpoint_id"] for h in heads}
    doomed = [
        r
        for r in rows
        if row_key(r) not in keep
        and r["checkpoint_id"] < newest.get((r["thread_id"], r["checkpoint_ns"]), "")
    ]
    doomed = yield from with_hanging_op(saver, ids, doomed)
    yield from _delete_checkpoints_op(saver, doomed)


def delete_for_runs_op(saver: SaverState, run_ids: Sequence[str]) -> Op[None]:
    """Delete the checkpoints (and their writes) that the given runs created.

    Checkpoints of other runs that still need a deleted one to be rebuilt
    (their `DeltaChannel` history runs through it) keep it; subgraph
    namespaces that ran from a deleted one go with it.
    """
    ids = check_id_list("run_ids", run_ids, kind="run_id")
    if not ids:
        return
    yield Stmt("read_committed")
    rows = yield Stmt("run_checkpoints", {"run_ids": ids}, fetch=True)
    locked: set[str] = set()
    while True:
        # Under the locks, read again: a run may have saved to another thread meanwhile.
        threads = {r["thread_id"] for r in rows}
        if threads <= locked:
            break
        yield from _lock_threads_op(saver, sorted(threads - locked))
        locked |= threads
        rows = yield Stmt("run_checkpoints", {"run_ids": ids}, fetch=True)
    if not rows:
        return
    thread_ids = sorted({r["thread_id"] for r in rows})
    doomed_keys = {row_key(r) for r in rows}
    every = yield Stmt("thread_checkpoint_ids", {"thread_ids": thread_ids}, fetch=True)
    survivors = [r for r in every if row_key(r) not in doomed_keys]
    needed = yield from needed_for_op(saver, survivors)
    doomed = [r for r in rows if row_key(r) not in needed]
    doomed = yield from with_hanging_op(saver, thread_ids, doomed)
    yield from _delete_checkpoints_op(saver, doomed)


def lock_for_delete_op(saver: SaverState, thread_ids: Sequence[str]) -> Op[None]:
    """Start a delete's transaction: READ COMMITTED, then the threads' maintenance locks."""
    yield Stmt("read_committed")
    yield from _lock_threads_op(saver, thread_ids)


def delete_whole_op(saver: SaverState, thread_ids: Sequence[str]) -> Op[None]:
    """Delete threads whole, under their locks, until a new snapshot shows nothing left."""
    left = list(thread_ids)
    for _ in range(_ROUNDS):
        yield Stmt("delete_threads", {"thread_ids": left})
        rows = yield Stmt("thread_rows_left", {"thread_ids": left}, fetch=True)
        left = [r["thread_id"] for r in rows]
        if not left:
            return
    raise ThreadConflictError(
        left,
        f"threads {left!r} were written to again each of the {_ROUNDS} times they were "
        "deleted, by a writer that does not wait for the delete (an older pgcheckpoint, "
        "or SQL of your own); nothing was deleted: stop that writer, then retry",
    )


def _lock_threads_op(saver: SaverState, thread_ids: Sequence[str]) -> Op[None]:
    keys = [maintenance_lock_key(t, saver.schema) for t in thread_ids]
    yield Stmt("lock_threads_for_maintenance", {"keys": keys}, fetch=True)


def with_hanging_op(
    saver: SaverState, thread_ids: Sequence[str], doomed: Sequence[Row]
) -> Op[list[Row]]:
    """`doomed`, and the checkpoints of the subgraph namespaces that hang off it.

    See `hanging_namespaces` in `sql/queries/_fragments.sql`.
    """
    params = {**checkpoint_keys(doomed), "scope_ids": list(thread_ids)}
    hanging = yield Stmt("hanging_checkpoints", params, fetch=True)
    everything = {row_key(r): r for r in doomed}
    for row in hanging:
        everything.setdefault(row_key(row), row)
    return list(everything.values())


def needed_for_op(saver: SaverState, kept: Iterable[Row]) -> Op[set[tuple[str, str, str]]]:
    kept = list(kept)
    if not kept:
        return set()
    rows = yield Stmt("rebuild_dependencies", checkpoint_keys(kept), fetch=True)
    return {row_key(r) for r in rows}


def _delete_checkpoints_op(saver: SaverState, doomed: Sequence[Row]) -> Op[None]:
    if not doomed:
        return
    yield Stmt("delete_checkpoints", checkpoint_keys(doomed))


def conflict_retries(
    make: Callable[[], Op[T]], what: str, thread_ids: Sequence[str] = ()
) -> Sweep[T]:
    """Run the delete `make()` returns, in a transaction; again when it conflicts.

    A deadlock with another delete, or a foreign-key violation or lock timeout
    caused by a writer that takes no lock, rolls the transaction back; the
    delete runs again, up to three times, then raises `ThreadConflictError`.

    Example:
        >>> prune = lambda: prune_op(saver, ["t1"])  # doctest: +SKIP
        >>> saver.run_each(conflict_retries(prune, "prune", ["t1"]))  # doctest: +SKIP
    """
    attempt = 1
    while True:
        try:
            result: T = yield make()
            return result
        except CONFLICTS as exc:
            reason = f"{type(exc).__name__}: {str(exc).strip()}"
            if attempt >= _ATTEMPTS:
                raise ThreadConflictError(
                    list(thread_ids),
                    f"{what} conflicted with concurrent work on its threads {_ATTEMPTS} "
                    f"times ({reason}); nothing was deleted: retry later",
                ) from exc
            logger.info("%s conflicted with concurrent work (%s); running it again", what, reason)
            attempt += 1

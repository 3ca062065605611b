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

What a kept checkpoint needs (the one rule of every delete that keeps some:
`prune_op`, the retention sweeps, `delete_for_runs_op`; the pg_cron
procedure of `sql/retention.sql` leaves the threads it cannot apply it to):
- its DeltaChannels' history: for each channel of its namespace's
  DeltaChannels it has a version of, its parent chain from its parent down
  to the nearest checkpoint that stores a value of the channel (a
  `_DeltaSnapshot`, a value from before the channel was a DeltaChannel, one
  stored as a delta of an older value), or the whole chain when none does.
  LangGraph rebuilds the channel from it when the checkpoint stores none;
  `get_delta_channel_history` walks it even when it does (`needed_for_op`).
- the values it reads and the bases of those stored as deltas
  (`blobs_to_drop` in `sql/queries/_fragments.sql`).
- the latest checkpoint of each `checkpointer=True` subgraph's namespace (one
  without a task id), which the subgraph's next call goes on from, wherever
  its last call started: such a namespace never hangs (`hanging_namespaces`);
  a subgraph call's namespace goes with the checkpoint it ran from.
- its parent, when that holds the sends of its step: a checkpoint older than
  LangGraph's format v4 has them as writes of its parent (to `__pregel_tasks`,
  of which it has no version), which a read moves into it
  (`pgcheckpoint.core.sends`). One that has a version of that channel needs
  no parent: `import-langgraph` of pgcheckpoint 0.1 moved the sends into the
  rows it copied.

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
from ..statements.arrays import TextArray
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
    "delta_history_keys",
    "lock_for_delete_op",
    "needed_for_op",
    "prune_op",
    "prune_sweep",
    "with_bounded_plan_op",
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
    doomed = yield from with_hanging_op(saver, ids, rows, doomed)
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
    doomed = yield from with_hanging_op(saver, thread_ids, every, doomed)
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
    saver: SaverState, thread_ids: Sequence[str], rows: Sequence[Row], doomed: Sequence[Row]
) -> Op[list[Row]]:
    """`doomed`, and the checkpoints of the subgraph namespaces that hang off it.

    `rows` are every checkpoint of the threads, read under their locks: they
    give each subgraph call's newest checkpoint and the checkpoints of its
    parent namespace, what `hanging_namespaces` (`sql/queries/_fragments.sql`)
    reads besides the metadata of the newest; the namespaces it answers are
    deleted whole.
    """
    going = {row_key(r) for r in doomed}
    # str order is code point order, the order of COLLATE "C"
    newest: dict[tuple[str, str], str] = {}
    for row in rows:
        where, checkpoint_id = (row["thread_id"], row["checkpoint_ns"]), row["checkpoint_id"]
        if ":" in where[1] and (where not in newest or checkpoint_id > newest[where]):
            newest[where] = checkpoint_id
    everything = {row_key(r): r for r in doomed}
    if not newest:
        return list(everything.values())
    parents = {(t, ns.rsplit("|", 1)[0] if "|" in ns else "") for t, ns in newest}
    parent_rows = [r for r in rows if (r["thread_id"], r["checkpoint_ns"]) in parents]
    params = {
        "heads_thread_ids": TextArray([t for t, _ in newest]),
        "heads_nss": TextArray([ns for _, ns in newest]),
        "heads_ids": TextArray(newest.values()),
        "parent_thread_ids": TextArray([r["thread_id"] for r in parent_rows]),
        "parent_nss": TextArray([r["checkpoint_ns"] for r in parent_rows]),
        "parent_ids": TextArray([r["checkpoint_id"] for r in parent_rows]),
        "parent_doomed": [row_key(r) in going for r in parent_rows],
        "scope_ids": list(thread_ids),
    }
    hanging = yield from with_bounded_plan_op(Stmt("hanging_calls", params, fetch=True))
    cut = {(r["thread_id"], r["checkpoint_ns"]) for r in hanging}
    for row in rows:
        if (row["thread_id"], row["checkpoint_ns"]) in cut:
            everything.setdefault(row_key(row), row)
    return list(everything.values())


def needed_for_op(saver: SaverState, kept: Iterable[Row]) -> Op[set[tuple[str, str, str]]]:
    """The keys of the kept checkpoints and of every checkpoint they need: those their
    DeltaChannels' history runs through, and parents holding their sends (see the
    module's rule), from one statement (`delta_links`).

    Example:
        >>> op = needed_for_op(SaverState(), [{"thread_id": "t", "checkpoint_ns": "",
        ...                                    "checkpoint_id": "c2"}])
        >>> next(op).name, op.send([{"enable_nestloop": "on", "jit": "on"}]).name
        ('bounded_plans', 'delta_links')
    """
    kept = list(kept)
    if not kept:
        return set()
    thread_ids = TextArray(sorted({r["thread_id"] for r in kept}))
    links = yield from with_bounded_plan_op(
        Stmt("delta_links", {"thread_ids": thread_ids}, fetch=True)
    )
    needed = {row_key(r) for r in kept} | delta_history_keys(kept, links)
    holding_sends = {row_key(r): _parent_key(r) for r in links if r["sends_parent"]}
    for row in kept:
        parent = holding_sends.get(row_key(row))
        if parent is not None:
            needed.add(parent)
    return needed


def delta_history_keys(kept: Iterable[Row], links: Iterable[Row]) -> set[tuple[str, str, str]]:
    """The checkpoints the DeltaChannel history of the kept ones runs through.

    `links` are the rows of `delta_links`: the checkpoints of the namespaces
    with DeltaChannels (or sends). Each channel of a kept checkpoint is walked as
    `get_delta_channel_history` walks it, from the parent down to the first
    checkpoint that stores the channel; a checkpoint reached again for the
    same channel is not walked twice, so the walks of many kept checkpoints
    of one chain cost what one does.

    Example:
        >>> link = lambda c, p, stored=(): {"thread_id": "t", "checkpoint_ns": "",
        ...     "checkpoint_id": c, "parent_checkpoint_id": p, "delta": ["m"],
        ...     "stored": list(stored)}
        >>> links = [link("c1", None, ["m"]), link("c2", "c1"), link("c3", "c2", ["m"])]
        >>> sorted(delta_history_keys([links[2]], links))
        [('t', '', 'c1'), ('t', '', 'c2')]
    """
    by_key = {row_key(r): r for r in links}
    needed: set[tuple[str, str, str]] = set()
    walked: set[tuple[tuple[str, str, str], str]] = set()
    for row in kept:
        start = by_key.get(row_key(row))
        if start is None:
            continue
        for channel in start["delta"]:
            at = _parent_key(start)
            while at is not None and at in by_key and (at, channel) not in walked:
                walked.add((at, channel))
                needed.add(at)
                here = by_key[at]
                if channel in here["stored"]:
                    break
                at = _parent_key(here)
    return needed


def _parent_key(row: Row) -> tuple[str, str, str] | None:
    parent = row["parent_checkpoint_id"]
    return None if parent is None else (row["thread_id"], row["checkpoint_ns"], parent)


def _delete_checkpoints_op(saver: SaverState, doomed: Sequence[Row]) -> Op[None]:
    if not doomed:
        return
    yield from with_bounded_plan_op(Stmt("delete_checkpoints", checkpoint_keys(doomed)))


def with_bounded_plan_op(stmt: Stmt) -> Op[list[Row]]:
    """Run a maintenance statement planned with hash joins only and no JIT.

    `delta_links`, `hanging_calls`, `delete_checkpoints` and
    `measure_checkpoints` read a thread's rows through lookups by key, and
    pair a thread's rows with sets derived from them; see `bounded_plans` in
    `sql/queries/maintenance.sql`.

    Example:
        >>> op = with_bounded_plan_op(Stmt("measure_checkpoints", {}, fetch=True))
        >>> next(op).name, op.send([{"enable_nestloop": "on", "jit": "on"}]).name
        ('bounded_plans', 'measure_checkpoints')
    """
    before = yield Stmt("bounded_plans", fetch=True)
    rows = yield stmt
    settings = {"enable_nestloop": before[0]["enable_nestloop"], "jit": before[0]["jit"]}
    yield Stmt("planner_settings", settings, fetch=True)
    return rows


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

"""Retention: delete idle threads or trim history, safely while the application runs.

A sweep is written once, without I/O, as a generator of operations: each one
it yields is an `Op` (see `pgcheckpoint.ops`) that the saver runs in a
transaction of its own, sending back its result, or throwing in its error.
`PostgresSaver.prune_older_than` and `AsyncPostgresSaver.aprune_older_than`
(and `prune_keep_last`) only run them.

A sweep walks the threads in thread_id order, a batch at a time. Each batch is
one short transaction, so an interrupted sweep leaves every thread whole or
gone, never half deleted:

1. It tries each thread's maintenance lock (the advisory lock every delete
   takes, and saves take shared: `pgcheckpoint.maintenance_lock_key`)
   and its run lock (`lock_thread`), without waiting: a thread another sweep,
   a delete, a save in flight or a guarded run holds is skipped and reported,
   so two sweeps at once neither wait for each other nor deadlock, and no
   save runs while the batch deletes.
2. Under the locks, it reads the threads again: one that received a new
   checkpoint since the sweep listed it is no longer idle and is kept.
3. It deletes, checkpoints first. A put locks its parent checkpoint (FOR KEY
   SHARE) and stores nothing if the parent is gone, so a put racing the sweep
   either commits before the delete reaches its parent (the delete waits for
   it) or finds its parent deleted and fails with `MissingParentError`.
4. In a new snapshot it checks that nothing was written meanwhile (a put that
   committed while the delete waited for it): if so, the batch rolls back and
   runs again without those threads, which are reported as skipped.

Keeping the newest checkpoints (`keep_latest`, `keep_last`) also keeps what
they need to be rebuilt: a `DeltaChannel`'s history back to its snapshot
(`rebuild_dependencies`) and the bases of values stored as deltas; the subgraph
namespaces that ran from a deleted checkpoint go with it. A batch that
hits a foreign-key violation (a concurrent put stored a delta on a value being
deleted) or a deadlock rolls back and runs again one thread at a time; a thread
that fails alone is reported and left for the next sweep.

With `sweep_store`, the sweep then deletes the store's expired items
(`pgc_store`, `PostgresStore`'s TTLs) with the statement the store's own
`sweep_ttl()` runs (`pgcheckpoint.store.batch.sweep_page_op`), a page of
them per transaction, skipping items a writer holds (a put renewing one).

Example:
    >>> from datetime import timedelta
    >>> report = saver.prune_older_than(timedelta(days=30))  # doctest: +SKIP
    >>> report.threads, report.bytes  # doctest: +SKIP
    (12, 1048576)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg import DataError
from psycopg.errors import DeadlockDetected, ForeignKeyViolation, LockNotAvailable

from ..core.deletes import (
    check_prune_strategy,
    needed_for_op,
    with_bounded_plan_op,
    with_hanging_op,
)
from ..core.locks import maintenance_lock_key, thread_lock_key
from ..core.rows import checkpoint_keys, row_key
from ..core.state import SaverState
from ..errors import InvalidInputError
from ..ops import Op, Row, Stmt, Sweep
from ..store.batch import SWEEP_BATCH, count_op, sweep_page_op
from ..telemetry.activity import logger
from ..validate import check_count

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "PruneReport",
    "SweepLimits",
    "keep_last_sweep",
    "older_than_sweep",
]

DEFAULT_BATCH_SIZE = 100
# How long a batch waits for a row lock (a put holds its parent's for one
# statement) before it rolls back and retries its threads one by one.
LOCK_TIMEOUT = "10s"
# Errors of a batch that racing writers cause: retried a thread at a time.
_RACES = (ForeignKeyViolation, DeadlockDetected, LockNotAvailable)


@dataclass
class PruneReport:
    """What a sweep deleted (or, on a dry run, would delete).

    Attributes:
        threads: Threads deleted (`delete`) or trimmed (`keep_latest`, `keep_last`).
        checkpoints: Checkpoints deleted.
        writes: Pending writes deleted.
        blobs: Stored channel values deleted.
        bytes: Stored size of the deleted values (checkpoints, metadata,
            channel values, writes), without row overhead and indexes.
        examined: Threads the sweep looked at.
        skipped: Threads left alone this time because another sweep, a prune,
            a `delete_for_runs` or a guarded run held them, or because they were
            written to while the sweep deleted them. A later sweep retries them.
        failed: Threads whose deletion kept conflicting with a concurrent
            writer (a put that stored a delta on a value being deleted, or a
            lock it held); left whole for the next sweep.
        total: Threads the sweep expected to look at, when it counted them
            first (for progress), else None.
        dry_run: Nothing was deleted; the counts are what would have gone.
        complete: False when `max_threads` or `max_seconds` stopped the sweep
            before the last thread, or `max_seconds` before the last expired
            store item; run it again to go on.
        store_items: With `sweep_store`, the store's expired items deleted
            (on a dry run, those that would go); None when the store was left
            alone.

    Example:
        >>> PruneReport(threads=2, checkpoints=10).checkpoints
        10
    """

    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0
    bytes: int = 0
    examined: int = 0
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    total: int | None = None
    dry_run: bool = False
    complete: bool = True
    store_items: int | None = None

    def add(self, counts: Row) -> None:
        """Add one batch's counts (threads, checkpoints, writes, blobs, bytes)."""
        for name in ("threads", "checkpoints", "writes", "blobs", "bytes"):
            setattr(self, name, getattr(self, name) + int(counts.get(name) or 0))

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data.

        Example:
            >>> PruneReport().as_dict()["threads"]
            0
        """
        return asdict(self)


Progress = Callable[[PruneReport], None]


class _Changed(Exception):
    """Threads were written to while a batch deleted them: roll the batch back."""

    def __init__(self, thread_ids: Sequence[str]) -> None:
        super().__init__(f"threads written to during the sweep: {list(thread_ids)!r}")
        self.thread_ids = list(thread_ids)


@dataclass(frozen=True)
class SweepLimits:
    """How a retention sweep goes: its batches, where it stops, and what it reports.

    Attributes:
        batch_size: Threads per transaction.
        max_threads: Stop after looking at this many threads.
        max_seconds: Start no new batch after this many seconds.
        dry_run: Count what would go; change nothing.
        progress: Called with the report so far after each batch (and once
            before the first, with `total` counted).
        sweep_store: Then delete the store's expired items too (a page of
            them per transaction; `max_seconds` stops it as well).

    Example:
        >>> SweepLimits(batch_size=50).batch_size
        50
    """

    batch_size: int = DEFAULT_BATCH_SIZE
    max_threads: int | None = None
    max_seconds: float | None = None
    dry_run: bool = False
    progress: Progress | None = None
    sweep_store: bool = False

    def __post_init__(self) -> None:
        batch_size, max_threads, max_seconds = self.batch_size, self.max_threads, self.max_seconds
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive int, not {batch_size!r}")
        check_count("batch_size", batch_size, minimum=1)
        if max_threads is not None and (
            isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1
        ):
            raise InvalidInputError(
                f"max_threads must be a positive int or None, not {max_threads!r}"
            )
        if max_threads is not None:
            check_count("max_threads", max_threads, minimum=1)
        if max_seconds is not None and (
            isinstance(max_seconds, bool)
            or not isinstance(max_seconds, int | float)
            or not max_seconds > 0  # NaN too
        ):
            raise InvalidInputError(
                f"max_seconds must be a positive number or None, not {max_seconds!r}"
            )
        if not isinstance(self.sweep_store, bool):
            raise InvalidInputError(f"sweep_store must be True or False, not {self.sweep_store!r}")


def older_than_sweep(
    core: SaverState,
    older_than: timedelta,
    *,
    strategy: str = "delete",
    limits: SweepLimits | None = None,
) -> Sweep[PruneReport]:
    """Sweep the threads whose newest checkpoint (any namespace) is older than `older_than`.

    `delete` deletes them whole; `keep_latest` keeps each one's newest
    checkpoint per namespace, and what it needs to be rebuilt.

    Example:
        >>> sweep = older_than_sweep(SaverState(), timedelta(days=30))
        >>> next(sweep).send(None).name
        'retention_cutoff'
    """
    if not isinstance(older_than, timedelta) or older_than <= timedelta(0):
        raise InvalidInputError(f"older_than must be a positive timedelta, not {older_than!r}")
    check_prune_strategy(strategy, "retention")
    keep = None if strategy == "delete" else 1
    return _sweep(core, older_than=older_than, keep=keep, limits=limits or SweepLimits())


def keep_last_sweep(
    core: SaverState, keep: int, *, limits: SweepLimits | None = None
) -> Sweep[PruneReport]:
    """Sweep every thread: keep its newest `keep` checkpoints per namespace, whatever their age.

    Older checkpoints that a kept one needs to be rebuilt (`DeltaChannel`
    history) stay too.

    Example:
        >>> sweep = keep_last_sweep(SaverState(), 10)
        >>> next(sweep).send(None).name
        'retention_candidates'
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise InvalidInputError(f"keep must be a positive int, not {keep!r}")
    check_count("keep", keep, minimum=1)
    return _sweep(core, older_than=None, keep=keep, limits=limits or SweepLimits())


def _sweep(
    core: SaverState,
    *,
    older_than: timedelta | None,
    keep: int | None,
    limits: SweepLimits,
    clock: Callable[[], float] = time.monotonic,
) -> Sweep[PruneReport]:
    schema, dry_run, progress = core.schema, limits.dry_run, limits.progress
    started = clock()
    report = PruneReport(dry_run=dry_run)
    cutoff: datetime | None = None
    if older_than is not None:
        try:
            rows = yield _fetch(Stmt("retention_cutoff", {"older_than": older_than}, fetch=True))
        except DataError:
            raise InvalidInputError(
                f"older_than {older_than} reaches back past the oldest time PostgreSQL "
                "stores (4713 BC); give a shorter age"
            ) from None
        cutoff = rows[0]["cutoff"]
    # Only threads with something to trim: more than `keep` checkpoints somewhere.
    select = {"cutoff": cutoff, "keep_last": keep}
    if progress is not None:
        rows = yield _fetch(Stmt("retention_count_candidates", select, fetch=True))
        report.total = int(rows[0]["threads"])
        if limits.max_threads is not None:
            report.total = min(report.total, limits.max_threads)
        progress(report)
    start, exclusive = "", False
    while True:
        limit = limits.batch_size
        if limits.max_threads is not None:
            limit = min(limit, limits.max_threads - report.examined)
        # The first batch always runs, so a short limit still makes progress.
        out_of_time = (
            limits.max_seconds is not None
            and report.examined > 0
            and clock() - started >= limits.max_seconds
        )
        if limit <= 0 or out_of_time:
            # Stopped by a limit: say so only if a thread is left to do.
            rows = yield _fetch(_candidates(select, start, exclusive, 1))
            report.complete = not rows
            break
        rows = yield _fetch(_candidates(select, start, exclusive, limit))
        if not rows:
            break
        thread_ids = [r["thread_id"] for r in rows]
        start, exclusive = thread_ids[-1], True

        def batch(ids: list[str]) -> Op[Row]:
            if keep is None:
                return _delete_batch_op(ids, cutoff, schema, dry_run)
            return _trim_batch_op(core, ids, cutoff, keep, schema, dry_run)

        yield from _run_batch(batch, thread_ids, report)
        report.examined += len(thread_ids)
        if progress is not None:
            progress(report)
    if limits.sweep_store:
        yield from _sweep_store(report, limits, lambda: clock() - started)
    return report


def _sweep_store(
    report: PruneReport, limits: SweepLimits, elapsed: Callable[[], float]
) -> Generator[Op[Any], Any, None]:
    """Delete the store's expired items, a page per transaction (a dry run counts them)."""
    if limits.dry_run:
        counts = yield count_op(())
        report.store_items = counts["expired"]
        return
    report.store_items = 0
    while True:
        # the first page always runs, as the first batch of threads does
        swept = yield sweep_page_op(SWEEP_BATCH)
        report.store_items += swept
        if swept < SWEEP_BATCH:
            return
        if limits.max_seconds is not None and elapsed() >= limits.max_seconds:
            report.complete = False
            return


def _run_batch(
    batch: Callable[[list[str]], Op[Row]], thread_ids: list[str], report: PruneReport
) -> Generator[Op[Any], Any, None]:
    pending = list(thread_ids)
    while pending:
        try:
            counts = yield batch(pending)
        except _Changed as changed:
            # rolled back: the others go again, the changed ones wait for a later sweep
            logger.info("retention: %s; left for a later sweep", changed)
            report.skipped.extend(changed.thread_ids)
            gone = set(changed.thread_ids)
            pending = [t for t in pending if t not in gone]
            continue
        except _RACES as exc:
            if len(pending) == 1:
                logger.warning(
                    "retention: thread %r conflicted with a concurrent writer (%s: %s); "
                    "left whole for the next sweep",
                    pending[0],
                    type(exc).__name__,
                    str(exc).strip(),
                )
                report.failed.append(pending[0])
                return
            logger.info(
                "retention: a batch of %d threads conflicted with a concurrent writer "
                "(%s); retrying them one at a time",
                len(pending),
                type(exc).__name__,
            )
            for thread_id in pending:
                yield from _run_batch(batch, [thread_id], report)
            return
        report.add(counts)
        report.skipped.extend(counts["skipped"])
        return


def _candidates(select: dict[str, Any], start: str, exclusive: bool, limit: int) -> Stmt:
    params = {**select, "start": start, "exclusive": exclusive, "limit": limit}
    return Stmt("retention_candidates", params, fetch=True)


def _fetch(stmt: Stmt) -> Op[list[Row]]:
    rows = yield stmt
    return rows


def _lock_op(thread_ids: Sequence[str], schema: str) -> Op[list[str]]:
    """Take what locks can be had, in READ COMMITTED; the threads now held."""
    yield Stmt("read_committed")
    rows = yield Stmt(
        "retention_lock_threads",
        {
            "thread_ids": list(thread_ids),
            "lock_keys": [maintenance_lock_key(t, schema) for t in thread_ids],
            "run_lock_keys": [thread_lock_key(t, schema) for t in thread_ids],
            "lock_timeout": LOCK_TIMEOUT,
        },
        fetch=True,
    )
    return [r["thread_id"] for r in rows]


def _held_op(thread_ids: list[str], schema: str, dry_run: bool) -> Op[tuple[list[str], list[str]]]:
    """The threads of a batch this sweep locked, and those another holds (skipped)."""
    if dry_run:
        return thread_ids, []
    held = yield from _lock_op(thread_ids, schema)
    locked = set(held)
    return held, [t for t in thread_ids if t not in locked]


def _delete_batch_op(
    thread_ids: list[str], cutoff: datetime | None, schema: str, dry_run: bool
) -> Op[Row]:
    """Delete (or measure) the idle threads of a batch whole."""
    held, skipped = yield from _held_op(thread_ids, schema, dry_run)
    if not held:
        return {"skipped": skipped}
    name = "retention_measure_threads" if dry_run else "retention_delete_threads"
    rows = yield Stmt(name, {"thread_ids": held, "cutoff": cutoff}, fetch=True)
    gone = [r for r in rows if r["checkpoints"]]
    if gone and not dry_run:
        changed = yield Stmt(
            "retention_changed_threads",
            {
                "thread_ids": [r["thread_id"] for r in gone],
                "checkpoints": [0] * len(gone),
                "whole": True,
            },
            fetch=True,
        )
        if changed:
            raise _Changed([r["thread_id"] for r in changed])
    counts: Row = {"threads": len(gone), "skipped": skipped}
    for name in ("checkpoints", "writes", "blobs", "bytes"):
        counts[name] = sum(int(r[name]) for r in gone)
    return counts


def _trim_batch_op(
    core: SaverState,
    thread_ids: list[str],
    cutoff: datetime | None,
    keep: int,
    schema: str,
    dry_run: bool,
) -> Op[Row]:
    """Keep each namespace's newest `keep` checkpoints (and what they need) of a batch."""
    held, skipped = yield from _held_op(thread_ids, schema, dry_run)
    if not held:
        return {"skipped": skipped}
    rows = yield Stmt(
        "retention_ranked_checkpoints", {"thread_ids": held, "cutoff": cutoff}, fetch=True
    )
    needed = yield from needed_for_op(core, [r for r in rows if r["rank"] <= keep])
    doomed = [r for r in rows if r["rank"] > keep and row_key(r) not in needed]
    scope = sorted({r["thread_id"] for r in rows})
    doomed = yield from with_hanging_op(core, scope, rows, doomed)
    if not doomed:
        return {"skipped": skipped}
    measured = yield from with_bounded_plan_op(
        Stmt(
            "measure_checkpoints" if dry_run else "delete_checkpoints",
            checkpoint_keys(doomed),
            fetch=True,
        )
    )
    trimmed = sorted({r["thread_id"] for r in doomed})
    if not dry_run:
        left: dict[str, int] = dict.fromkeys(trimmed, 0)
        for row in rows:
            if row["thread_id"] in left:
                left[row["thread_id"]] += 1
        for row in doomed:
            left[row["thread_id"]] -= 1
        changed = yield Stmt(
            "retention_changed_threads",
            {"thread_ids": list(left), "checkpoints": list(left.values()), "whole": False},
            fetch=True,
        )
        if changed:
            raise _Changed([r["thread_id"] for r in changed])
    return {**measured[0], "threads": len(trimmed), "skipped": skipped}


def _key(row: Row) -> tuple[str, str, str]:
    return (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])

"""The TTL sweepers of the Agent Server factories: background tasks, one worker at a time.

The server's in-memory runtime accepts a `ttl` block and never sweeps; the
factory runs `ttl_sweeper` beside the saver instead. Every `interval` it tries,
without waiting, the schema's sweeper lock (`core.locks.ttl_sweep_lock_key`)
on a reserved connection; the worker that gets it runs the retention sweep
(`maintenance.retention.older_than_sweep`) through the saver, the others skip
this turn. A sweep never holds up a run: batches are small (a run's next save
on a thread of the batch waits for one short transaction at most), threads a
run or a save holds are skipped, and a sweep stops starting batches after
`MAX_SWEEP_SECONDS` (the next one goes on). `pgcheckpoint prune` from cron
works beside it: two sweeps at once skip each other's threads. The store
factory's `store_ttl_sweeper` deletes expired store items the same way, under
a lock of its own (`core.locks.store_ttl_sweep_lock_key`).

Example:
    >>> policy = TTLPolicy("delete", timedelta(days=7), timedelta(minutes=5))
    >>> task = asyncio.create_task(ttl_sweeper(saver, policy))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from typing import Any

from psycopg import Error

from ..core.locks import release_ttl_sweep_lock_op, try_ttl_sweep_lock_op
from ..drivers.runner_async import AsyncRunner
from ..drivers.saver_async import AsyncPostgresSaver
from ..drivers.store_async import AsyncPostgresStore
from ..maintenance.retention import PruneReport, SweepLimits, older_than_sweep
from ..telemetry.activity import logger
from .settings import TTLPolicy

__all__ = [
    "BATCH_SIZE",
    "MAX_SWEEP_SECONDS",
    "store_ttl_sweeper",
    "sweep_once",
    "sweep_store_once",
    "ttl_sweeper",
]

# Threads per transaction: a save on one of them waits for the batch at most.
BATCH_SIZE = 10
# A sweep starts no new batch after this long; the next sweep goes on.
MAX_SWEEP_SECONDS = 20.0
# What a sweep did, by strategy and whether it finished, in constant text and
# numbers: a record of the library's logger names no thread unless ids are on
_REPORTS = {
    ("delete", True): "ttl sweep: deleted %d threads (%d checkpoints); %d skipped, %d failed",
    ("delete", False): "ttl sweep: deleted %d threads (%d checkpoints); %d skipped, %d failed;"
    " the next sweep goes on",
    ("keep_latest", True): "ttl sweep: trimmed %d threads (%d checkpoints); %d skipped, %d failed",
    ("keep_latest", False): "ttl sweep: trimmed %d threads (%d checkpoints); %d skipped, "
    "%d failed; the next sweep goes on",
}


@asynccontextmanager
async def in_background(job: Coroutine[Any, Any, None] | None, name: str) -> AsyncIterator[bool]:
    """Run `job` (a sweeper) as a task for the block, cancelled and awaited at its end.

    Yields whether a job runs (`None`: none to run).
    """
    if job is None:
        yield False
        return
    task = asyncio.create_task(job, name=name)
    try:
        yield True
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


@asynccontextmanager
async def _sweep_lock(runner: AsyncRunner, *, store: bool) -> AsyncIterator[bool]:
    """Whether this worker holds the schema's sweeper lock (threads or store) for the block."""
    async with runner.reserved_connection() as conn:
        lock = try_ttl_sweep_lock_op(runner.schema, store=store)
        held = await runner.run_on_reserved(conn, lock, name="ttl_sweep_lock")
        if not held:
            yield False
            return
        try:
            yield True
        finally:
            # a broken connection freed the lock with its session
            with suppress(Error):
                await runner.run_on_reserved(
                    conn, release_ttl_sweep_lock_op(), name="ttl_sweep_unlock"
                )


async def sweep_once(saver: AsyncPostgresSaver, policy: TTLPolicy) -> PruneReport | None:
    """One TTL sweep, if no other worker is sweeping the saver's schema; None if one is.

    Example:
        >>> report = await sweep_once(saver, policy)  # doctest: +SKIP
        >>> report.threads if report else "another worker swept"  # doctest: +SKIP
        3
    """
    async with _sweep_lock(saver, store=False) as held:
        if not held:
            return None
        limits = SweepLimits(
            batch_size=BATCH_SIZE,
            max_threads=policy.sweep_limit,
            max_seconds=MAX_SWEEP_SECONDS,
        )
        sweep = older_than_sweep(saver, policy.ttl, strategy=policy.strategy, limits=limits)
        return await saver.run_each(sweep, name="ttl_sweep")


async def sweep_store_once(store: AsyncPostgresStore) -> int | None:
    """Delete the store's expired items, if no other worker is sweeping them; None if one is.

    Example:
        >>> await sweep_store_once(store)  # doctest: +SKIP
        2
    """
    async with _sweep_lock(store, store=True) as held:
        if not held:
            return None
        return await store.sweep_ttl()


async def store_ttl_sweeper(store: AsyncPostgresStore, interval: timedelta) -> None:
    """Sweep the store's expired items every `interval` until cancelled; failures are logged.

    The server starts no sweeper of its own for a custom store.

    Example:
        >>> every = timedelta(minutes=5)
        >>> task = asyncio.create_task(store_ttl_sweeper(store, every))  # doctest: +SKIP
    """
    every = interval.total_seconds()
    logger.info("store ttl sweeper: deleting expired items every %g s", every)
    while True:
        await asyncio.sleep(every)
        try:
            swept = await sweep_store_once(store)
        except Exception as exc:  # the next sweep may find the database back
            logger.warning("store ttl sweep failed (%s); trying again in %g s", exc, every)
            continue
        if swept is None:
            logger.debug("store ttl sweep: another worker is sweeping this schema")
        elif swept:
            logger.info("store ttl sweep: deleted %d expired items", swept)


async def ttl_sweeper(saver: AsyncPostgresSaver, policy: TTLPolicy) -> None:
    """Sweep every `policy.interval` until cancelled; a failed sweep is logged, not fatal.

    Example:
        >>> task = asyncio.create_task(ttl_sweeper(saver, policy))  # doctest: +SKIP
        >>> task.cancel()  # doctest: +SKIP
    """
    deleting = policy.strategy == "delete"
    minutes, every = policy.ttl.total_seconds() / 60, policy.interval.total_seconds()
    if deleting:
        logger.info("ttl sweeper: deleting threads idle for %g min, every %g s", minutes, every)
    else:
        logger.info(
            "ttl sweeper: trimming threads idle for %g min to their latest checkpoint, every %g s",
            minutes,
            every,
        )
    while True:
        await asyncio.sleep(every)
        try:
            report = await sweep_once(saver, policy)
        except Exception as exc:  # the next sweep may find the database back
            logger.warning("ttl sweep failed (%s); trying again in %g s", exc, every)
            continue
        if report is None:
            logger.debug("ttl sweep: another worker is sweeping this schema")
        elif report.threads or report.skipped or report.failed:
            logger.info(
                _REPORTS[policy.strategy, report.complete],
                report.threads,
                report.checkpoints,
                len(report.skipped),
                len(report.failed),
            )

"""The thread TTL sweeper of the Agent Server factory: a background task, one worker at a time.

The server's in-memory runtime accepts a `ttl` block and never sweeps; the
factory runs `ttl_sweeper` beside the saver instead. Every `interval` it tries,
without waiting, the schema's sweeper lock (`core.locks.ttl_sweep_lock_key`)
on a reserved connection; the worker that gets it runs the retention sweep
(`maintenance.retention.older_than_sweep`) through the saver, the others skip
this turn. A sweep never holds up a run: batches are small (a run's next save
on a thread of the batch waits for one short transaction at most), threads a
run or a save holds are skipped, and a sweep stops starting batches after
`MAX_SWEEP_SECONDS` (the next one goes on). `pgcheckpoint prune` from cron
works beside it: two sweeps at once skip each other's threads.

Example:
    >>> policy = TTLPolicy("delete", timedelta(days=7), timedelta(minutes=5))
    >>> task = asyncio.create_task(ttl_sweeper(saver, policy))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from datetime import timedelta

from psycopg import Error

from ..core.locks import release_ttl_sweep_lock_op, try_ttl_sweep_lock_op
from ..drivers.saver_async import AsyncPostgresSaver
from ..maintenance.retention import PruneReport, SweepLimits, older_than_sweep
from ..telemetry.activity import logger
from .settings import TTLPolicy

__all__ = ["BATCH_SIZE", "MAX_SWEEP_SECONDS", "sweep_once", "ttl_sweeper"]

# Threads per transaction: a save on one of them waits for the batch at most.
BATCH_SIZE = 10
# A sweep starts no new batch after this long; the next sweep goes on.
MAX_SWEEP_SECONDS = 20.0


async def sweep_once(saver: AsyncPostgresSaver, policy: TTLPolicy) -> PruneReport | None:
    """One TTL sweep, if no other worker is sweeping the saver's schema; None if one is.

    Example:
        >>> report = await sweep_once(saver, policy)  # doctest: +SKIP
        >>> report.threads if report else "another worker swept"  # doctest: +SKIP
        3
    """
    async with saver.reserved_connection() as conn:
        held = await saver.run_on_reserved(
            conn, try_ttl_sweep_lock_op(saver.schema), name="ttl_sweep_lock"
        )
        if not held:
            return None
        try:
            limits = SweepLimits(
                batch_size=BATCH_SIZE,
                max_threads=policy.sweep_limit,
                max_seconds=MAX_SWEEP_SECONDS,
            )
            sweep = older_than_sweep(saver, policy.ttl, strategy=policy.strategy, limits=limits)
            return await saver.run_each(sweep, name="ttl_sweep")
        finally:
            # a broken connection freed the lock with its session
            with suppress(Error):
                await saver.run_on_reserved(
                    conn, release_ttl_sweep_lock_op(), name="ttl_sweep_unlock"
                )


async def ttl_sweeper(saver: AsyncPostgresSaver, policy: TTLPolicy) -> None:
    """Sweep every `policy.interval` until cancelled; a failed sweep is logged, not fatal.

    Example:
        >>> task = asyncio.create_task(ttl_sweeper(saver, policy))  # doctest: +SKIP
        >>> task.cancel()  # doctest: +SKIP
    """
    idle = _span(policy.ttl)
    logger.info(
        "ttl sweeper: %s, every %s",
        f"deleting threads idle for {idle}"
        if policy.strategy == "delete"
        else f"trimming threads idle for {idle} to their latest checkpoint",
        _span(policy.interval),
    )
    while True:
        await asyncio.sleep(policy.interval.total_seconds())
        try:
            report = await sweep_once(saver, policy)
        except Exception as exc:  # the next sweep may find the database back
            logger.warning(
                "ttl sweep failed (%s: %s); trying again in %s",
                type(exc).__name__,
                str(exc).strip(),
                _span(policy.interval),
            )
            continue
        if report is None:
            logger.debug("ttl sweep: another worker is sweeping schema %r", saver.schema)
        elif report.threads or report.skipped or report.failed:
            logger.info(
                "ttl sweep: %s %d threads (%d checkpoints); %d skipped, %d failed%s",
                "deleted" if policy.strategy == "delete" else "trimmed",
                report.threads,
                report.checkpoints,
                len(report.skipped),
                len(report.failed),
                "" if report.complete else "; the next sweep goes on",
            )


def _span(span: timedelta) -> str:
    seconds = span.total_seconds()
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g}s"

"""How much each workload runs (`Plan`), what it collects (`Results`), and the timing.

Samples alternate between the two savers in small blocks, so a busy machine
slows both alike.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench_db import BARE_POOL, NOTHING_CACHED
from bench_report import Row, Stat
from psycopg import AsyncConnection, AsyncCursor, Connection, Cursor

# How a row measured on pgcheckpoint with nothing cached says so.
ZERO_NOTE = "cache_bytes=0"
BARE_NOTE = "bare pool: psycopg defaults"


@dataclass(frozen=True)
class Plan:
    """How much of each workload to run."""

    samples: int = 90  # per operation and saver, after warm-up (30 left 0.3 of noise on 1 ms calls)
    warmup: int = 3
    block: int = 4  # samples in a row on one saver before switching
    ops_turns: tuple[int, ...] = (10, 200)
    agent_turns: int = 100
    workers: int = 16
    concurrent_turns: int = 3  # per worker and round
    concurrent_rounds: int = 4  # interleaved between the savers; the median counts
    concurrent_history: int = 50  # turns already in each worker's thread (seeded case)
    chat_turns: int = 500  # storage and DeltaChannel get_state
    get_state_samples: int = 20
    wire_calls: int = 3
    memory_threads: int = 3000  # served by each worker process of the memory section
    memory_step: int = 500  # RSS read after every this many threads


QUICK = Plan(
    samples=12,
    warmup=2,
    agent_turns=30,
    concurrent_turns=2,
    concurrent_rounds=2,
    concurrent_history=10,
    chat_turns=200,
    get_state_samples=8,
    wire_calls=2,
    memory_threads=1000,
    memory_step=250,
)


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    wire: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add_wire(self, op: str, kind: str, value: dict[str, float]) -> None:
        self.wire.setdefault(op, {})[kind] = value


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ms(seconds: Sequence[float]) -> list[float]:
    return [s * 1000 for s in seconds]


class Clock:
    """Seconds spent in `execute` on the connections it was installed on (`configure`).

    That is sending, the server's planning and execution, and the network; the
    rest of a call is client CPU. A saver that pipelines (the official `put`)
    is not timed there.
    """

    def __init__(self) -> None:
        self.seconds = 0.0

    def configure(self, conn: Connection[Any]) -> None:
        clock = self

        class TimedCursor(Cursor[Any]):
            def execute(self, *args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return super().execute(*args, **kwargs)
                finally:
                    clock.seconds += time.perf_counter() - t0

        conn.cursor_factory = TimedCursor

    async def aconfigure(self, conn: AsyncConnection[Any]) -> None:
        clock = self

        class TimedCursor(AsyncCursor[Any]):
            async def execute(self, *args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return await super().execute(*args, **kwargs)
                finally:
                    clock.seconds += time.perf_counter() - t0

        conn.cursor_factory = TimedCursor


# -- timing --------------------------------------------------------------------------


def _orders(kinds: Sequence[str], n: int, warmup: int, block: int) -> list[tuple[str, range]]:
    """Which saver runs which samples, in blocks that alternate the saver order."""
    plan: list[tuple[str, range]] = [(k, range(warmup)) for k in kinds]
    start, round_ = warmup, 0
    while start < warmup + n:
        stop = min(start + block, warmup + n)
        order = kinds if round_ % 2 == 0 else list(reversed(kinds))
        plan += [(k, range(start, stop)) for k in order]
        start, round_ = stop, round_ + 1
    return plan


def timed(
    kinds: Sequence[str], n: int, warmup: int, block: int, call: Callable[[str, int], object]
) -> dict[str, list[float]]:
    """Run `call(kind, i)` for samples i, interleaved; seconds per sample after warm-up."""
    times: dict[str, list[float]] = {k: [] for k in kinds}
    gc.collect()
    for kind, samples in _orders(kinds, n, warmup, block):
        for i in samples:
            t0 = time.perf_counter()
            call(kind, i)
            if i >= warmup:
                times[kind].append(time.perf_counter() - t0)
    return times


async def atimed(
    kinds: Sequence[str],
    n: int,
    warmup: int,
    block: int,
    call: Callable[[str, int], Awaitable[object]],
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in kinds}
    gc.collect()
    for kind, samples in _orders(kinds, n, warmup, block):
        for i in samples:
            t0 = time.perf_counter()
            await call(kind, i)
            if i >= warmup:
                times[kind].append(time.perf_counter() - t0)
    return times


def row(
    section: str,
    name: str,
    mode: str,
    times: dict[str, list[float]],
    *,
    target: float | None = None,
    note: str = "",
) -> list[Row]:
    """The row of a timed workload, and its twin with nothing cached when that was timed."""
    rows = [
        Row(
            section,
            name,
            mode,
            "ms",
            Stat.of(ms(times["ours"])),
            Stat.of(ms(times["official"])),
            target=target,
            note=note,
        )
    ]
    for kind, kind_note in ((NOTHING_CACHED, ZERO_NOTE), (BARE_POOL, BARE_NOTE)):
        if kind in times:
            rows.append(
                Row(
                    section,
                    name,
                    mode,
                    "ms",
                    Stat.of(ms(times[kind])),
                    Stat.of(ms(times["official"])),
                    target=target,
                    note=", ".join(filter(None, [note, kind_note])),
                )
            )
    return rows

"""The ops workload: `put`, `put_writes`, `get_tuple` and `list` at turn N of a chat."""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench_db import POOL_SIZE, SAVERS, Databases, async_saver, sync_saver
from bench_graphs import Put, PutWrites, Recording, config, replay
from bench_timing import Clock, Plan, Results, atimed, log, row, timed
from bench_wire import WireTrace
from langgraph.checkpoint.base.id import uuid6


@dataclass
class OpsData:
    """What the ops workload needs at one turn, the same for both savers."""

    turn: int
    head_id: str
    puts: list[tuple[dict[str, Any], Any, Any, Any]]  # config, checkpoint, metadata, versions
    writes: list[tuple[dict[str, Any], Any, str, str]]  # config, writes, task_id, task_path


def _bump(version: Any, by: int, rng: random.Random) -> str:
    number = int(str(version).split(".", 1)[0]) + by
    return f"{number:032}.{rng.random():016}"


def ops_data(recording: Recording, turn: int, mode: str, count: int) -> OpsData:
    """`count` fresh puts and writes shaped like the ones of `turn`, on side threads."""
    calls = recording.upto(turn)
    head = next(c for c in reversed(calls) if isinstance(c, Put))
    task = next(c for c in reversed(calls) if isinstance(c, PutWrites) and c.turn == turn)
    rng = random.Random(turn)
    puts = []
    parent: str | None = None
    put_thread = f"put{turn}-{mode}"
    for k in range(count):
        versions = {ch: _bump(v, k + 1, rng) for ch, v in head.new_versions.items()}
        checkpoint = {
            **head.checkpoint,
            "id": str(uuid6(clock_seq=k)),
            "channel_versions": {**head.checkpoint["channel_versions"], **versions},
        }
        puts.append((config(put_thread, parent), checkpoint, head.metadata, versions))
        parent = checkpoint["id"]
    writes_conf = config(f"writes{turn}-{mode}", head.checkpoint["id"])
    writes = [
        (writes_conf, task.writes, f"00000000-0000-4000-8000-{k:012d}", task.task_path)
        for k in range(count)
    ]
    return OpsData(turn, head.checkpoint["id"], puts, writes)


# Postgres plans a prepared statement afresh at each of its first five
# executions on a connection, then may settle on a generic plan. The pool hands
# its connections out in turn: past STEADY_WARMUP calls every one is past them
# (the steady state); the first FRESH_CALLS calls of a fresh pool are each
# connection's first two (what a new worker process pays).
STEADY_WARMUP = 6 * POOL_SIZE
FRESH_CALLS = 2 * POOL_SIZE
FRESH_ROUNDS = 2
# where both savers run `execute` (the official saver pipelines its writes)
READS = ("get_tuple latest", "get_tuple by id", "list(limit=10)")

Times = dict[str, list[float]]


def run_ops(
    dbs: Databases,
    plan: Plan,
    modes: Sequence[str],
    recording: Recording,
    results: Results,
    kinds: Sequence[str] = SAVERS,
) -> None:
    dsns = {kind: dbs.fresh(kind, "ops") for kind in kinds}
    for kind in kinds:
        with sync_saver(kind, dsns[kind]) as saver:
            for turn in plan.ops_turns:
                replay(saver, recording.upto(turn), f"chat{turn}")
        dbs.analyze(dsns[kind])
    log("ops: chats replayed at turns " + ", ".join(map(str, plan.ops_turns)))
    count = plan.samples + STEADY_WARMUP + FRESH_CALLS * FRESH_ROUNDS
    for mode in modes:
        data = {
            t: ops_data(recording, t, mode, count + plan.wire_calls + 1) for t in plan.ops_turns
        }
        if mode == "sync":
            _ops_sync(dsns, plan, data, results)
        else:
            asyncio.run(_ops_async(dsns, plan, data, results))
        log(f"ops: {mode} done")
    _ops_wire(dsns, plan, data, results)
    for dsn in dsns.values():
        dbs.drop(dsn)


def _ops_rows(
    results: Results,
    mode: str,
    turn: int,
    measured: dict[str, tuple[Times, Times]],
    fresh: dict[str, tuple[Times, Times]],
) -> None:
    # issue 19: no workload slower than the official's; put and list at turn 200
    # keep the stricter targets of issue 9
    targets = {("put", 200): 0.4, ("list(limit=10)", 200): 0.3}
    for op, (t, execs) in measured.items():
        results.rows += row(
            "ops",
            f"{op} @ turn {turn}",
            mode,
            t,
            target=targets.get((op, turn), 1.0),
            note=_execute_note(op, execs),
        )
    for op, (t, execs) in fresh.items():
        results.rows += row(
            "ops", f"{op} @ turn {turn}, fresh pool", mode, t, note=_execute_note(op, execs)
        )


def _execute_note(op: str, execs: Times) -> str:
    if op not in READS:
        return ""
    p50 = {k: statistics.median(v) * 1000 for k, v in execs.items() if v}
    return "in execute p50: " + ", ".join(
        f"{'pgcheckpoint' if k == 'ours' else k} {v:.2f} ms" for k, v in p50.items()
    )


def _sync_calls(saver: Any, d: OpsData) -> dict[str, Callable[[int], object]]:
    latest, by_id = config(f"chat{d.turn}"), config(f"chat{d.turn}", d.head_id)
    return {
        "get_tuple latest": lambda i: saver.get_tuple(latest),
        "get_tuple by id": lambda i: saver.get_tuple(by_id),
        "list(limit=10)": lambda i: list(saver.list(latest, limit=10)),
        "put_writes": lambda i: saver.put_writes(*d.writes[i]),
        "put": lambda i: saver.put(*d.puts[i]),
    }


def _async_calls(saver: Any, d: OpsData) -> dict[str, Callable[[int], Awaitable[object]]]:
    latest, by_id = config(f"chat{d.turn}"), config(f"chat{d.turn}", d.head_id)

    async def alist(i: int) -> list[Any]:
        return [t async for t in saver.alist(latest, limit=10)]

    return {
        "get_tuple latest": lambda i: saver.aget_tuple(latest),
        "get_tuple by id": lambda i: saver.aget_tuple(by_id),
        "list(limit=10)": alist,
        "put_writes": lambda i: saver.aput_writes(*d.writes[i]),
        "put": lambda i: saver.aput(*d.puts[i]),
    }


def _ops_sync(dsns: dict[str, str], plan: Plan, data: dict[int, OpsData], results: Results) -> None:
    clocks = {k: Clock() for k in dsns}
    with contextlib.ExitStack() as stack:
        savers = {
            k: stack.enter_context(sync_saver(k, dsns[k], configure=clocks[k].configure))
            for k in dsns
        }
        measured = {}
        for d in data.values():
            calls = {k: _sync_calls(savers[k], d) for k in savers}
            measured[d.turn] = {}
            for op in calls["ours"]:
                execs: Times = {k: [] for k in savers}

                def call(
                    k: str, i: int, op: str = op, execs: Times = execs, calls: Any = calls
                ) -> None:
                    before = clocks[k].seconds
                    calls[k][op](i)
                    if i >= STEADY_WARMUP:
                        execs[k].append(clocks[k].seconds - before)

                times = timed(tuple(savers), plan.samples, STEADY_WARMUP, plan.block, call)
                measured[d.turn][op] = (times, execs)
    for d in data.values():
        fresh = _fresh_sync(dsns, plan, d)
        _ops_rows(results, "sync", d.turn, measured[d.turn], fresh)


def _fresh_sync(dsns: dict[str, str], plan: Plan, d: OpsData) -> dict[str, tuple[Times, Times]]:
    """Each op's first FRESH_CALLS calls on fresh pools, FRESH_ROUNDS pools per saver."""
    out: dict[str, tuple[Times, Times]] = {}
    start = plan.samples + STEADY_WARMUP
    for r in range(FRESH_ROUNDS):
        order = list(dsns) if r % 2 == 0 else list(reversed(list(dsns)))
        for kind in order:
            clock = Clock()
            with sync_saver(kind, dsns[kind], configure=clock.configure) as saver:
                for op, fn in _sync_calls(saver, d).items():
                    times, execs = out.setdefault(
                        op, ({k: [] for k in dsns}, {k: [] for k in dsns})
                    )
                    for j in range(FRESH_CALLS):
                        before = clock.seconds
                        t0 = time.perf_counter()
                        fn(start + r * FRESH_CALLS + j)
                        times[kind].append(time.perf_counter() - t0)
                        execs[kind].append(clock.seconds - before)
    return out


async def _ops_async(
    dsns: dict[str, str], plan: Plan, data: dict[int, OpsData], results: Results
) -> None:
    clocks = {k: Clock() for k in dsns}
    async with contextlib.AsyncExitStack() as stack:
        savers = {
            k: await stack.enter_async_context(
                async_saver(k, dsns[k], configure=clocks[k].aconfigure)
            )
            for k in dsns
        }
        measured = {}
        for d in data.values():
            calls = {k: _async_calls(savers[k], d) for k in savers}
            measured[d.turn] = {}
            for op in calls["ours"]:
                execs: Times = {k: [] for k in savers}

                async def call(
                    k: str, i: int, op: str = op, execs: Times = execs, calls: Any = calls
                ) -> None:
                    before = clocks[k].seconds
                    await calls[k][op](i)
                    if i >= STEADY_WARMUP:
                        execs[k].append(clocks[k].seconds - before)

                times = await atimed(tuple(savers), plan.samples, STEADY_WARMUP, plan.block, call)
                measured[d.turn][op] = (times, execs)
    for d in data.values():
        fresh = await _fresh_async(dsns, plan, d)
        _ops_rows(results, "async", d.turn, measured[d.turn], fresh)


async def _fresh_async(
    dsns: dict[str, str], plan: Plan, d: OpsData
) -> dict[str, tuple[Times, Times]]:
    out: dict[str, tuple[Times, Times]] = {}
    start = plan.samples + STEADY_WARMUP
    for r in range(FRESH_ROUNDS):
        order = list(dsns) if r % 2 == 0 else list(reversed(list(dsns)))
        for kind in order:
            clock = Clock()
            async with async_saver(kind, dsns[kind], configure=clock.aconfigure) as saver:
                for op, fn in _async_calls(saver, d).items():
                    times, execs = out.setdefault(
                        op, ({k: [] for k in dsns}, {k: [] for k in dsns})
                    )
                    for j in range(FRESH_CALLS):
                        before = clock.seconds
                        t0 = time.perf_counter()
                        await fn(start + r * FRESH_CALLS + j)
                        times[kind].append(time.perf_counter() - t0)
                        execs[kind].append(clock.seconds - before)
    return out


def _ops_wire(dsns: dict[str, str], plan: Plan, data: dict[int, OpsData], results: Results) -> None:
    for kind in SAVERS:
        trace = WireTrace()
        try:
            with sync_saver(kind, dsns[kind], size=1, configure=trace.configure) as saver:
                for d in data.values():
                    for op, (warm, fn) in _wire_work(saver, d, plan.wire_calls).items():
                        warm()  # statements prepared on this connection, as in the timed pass
                        with trace.measure(calls=plan.wire_calls) as count:
                            fn()
                        results.add_wire(f"{op} @ turn {d.turn}", kind, count.per_call())
        finally:
            trace.close()


def _wire_work(
    saver: Any, d: OpsData, n: int
) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """The ops again (a warm-up call, then n calls), on samples the timed pass left unused."""
    latest = config(f"chat{d.turn}")
    warm, spare = len(d.puts) - n - 1, range(len(d.puts) - n, len(d.puts))

    def get() -> object:
        return saver.get_tuple(latest)

    def list10() -> object:
        return list(saver.list(latest, limit=10))

    return {
        "put": (lambda: saver.put(*d.puts[warm]), lambda: [saver.put(*d.puts[i]) for i in spare]),
        "put_writes": (
            lambda: saver.put_writes(*d.writes[warm]),
            lambda: [saver.put_writes(*d.writes[i]) for i in spare],
        ),
        "get_tuple latest": (get, lambda: [get() for _ in spare]),
        "list(limit=10)": (list10, lambda: [list10() for _ in spare]),
    }

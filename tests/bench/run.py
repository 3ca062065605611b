"""`make bench`: pgcheckpoint against langgraph-checkpoint-postgres, side by side.

Runs the same workloads on both savers in the same run, sync and async, each in
fresh databases it creates and drops, and prints a table of medians, p95 and the
ratio pgcheckpoint / official, with the targets of issue 9. It writes the table
to `.bench/results.md` and every number to `.bench/results.json`. It never fails
on a number; it exits 1 only when a workload raised.

    .venv/bin/python tests/bench/run.py            # 2 to 5 minutes on 2 busy cores
    .venv/bin/python tests/bench/run.py --quick    # about 1 minute, fewer samples
    .venv/bin/python tests/bench/run.py --only ops,storage --modes sync

The server: `PGCHECKPOINT_BENCH_DSN`, else `PGCHECKPOINT_TEST_DSN`, else the
embedded one (`pgcheckpoint.embedded`). Both savers get a pool of 8 connections
with the settings LangGraph's docs give (autocommit, prepare_threshold=0).

Workloads:
- ops: `put`, `put_writes`, `get_tuple` (latest, by id), `list(limit=10)` at
  turn 10 and 200 of a chat (2 messages of ~500 bytes a turn). Both savers get
  the same recorded checkpoints; reads and writes alternate between the savers
  in small blocks so a busy machine slows both alike.
- agent: a 100-turn agent loop (human, agent, tools, agent: 5 checkpoints a
  turn), a compiled graph with a fake LLM and tool, timed per super-step (turn
  time / checkpoints per turn) on each saver and on `InMemorySaver`; the
  persistence cost is the per-turn difference to `InMemorySaver`.
- concurrency: 16 workers (threads, or asyncio tasks) sharing one saver, each
  running 3 turns of the agent loop per round: on new threads, and on threads
  that already hold 50 turns (seeded from one replayed thread, copied in SQL).
- storage: pg_total_relation_size of each saver's tables after a 500-turn chat,
  with a plain `add_messages` channel and with `DeltaChannel`; then `get_state`
  of the DeltaChannel chat at its last snapshot (best case) and just before it
  (worst case of the snapshot cycle).
- wire: round trips and bytes per call, from libpq's trace in a separate pass.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import json
import os
import platform
import random
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_db import POOL_SIZE, ROOT, SAVERS, Databases, async_saver, server_dsn, sync_saver
from bench_graphs import (
    Call,
    Put,
    PutWrites,
    Recording,
    agent_graph,
    chat_graph,
    config,
    record_agent,
    record_chat,
    replay,
    snapshot_cycle,
    turn_input,
)
from bench_report import Row, Stat, markdown_table, wire_table
from bench_wire import WireTrace

SECTIONS = ("ops", "agent", "concurrency", "storage")
MODES = ("sync", "async")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Plan:
    """How much of each workload to run."""

    samples: int = 30  # per operation and saver, after warm-up
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
)


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    wire: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add_wire(self, op: str, kind: str, value: dict[str, float]) -> None:
        self.wire.setdefault(op, {})[kind] = value


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ms(seconds: Sequence[float]) -> list[float]:
    return [s * 1000 for s in seconds]


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
) -> Row:
    return Row(
        section,
        name,
        mode,
        "ms",
        Stat.of(ms(times["ours"])),
        Stat.of(ms(times["official"])),
        target=target,
        note=note,
    )


# -- ops: put, put_writes, get_tuple, list at turn N ---------------------------------


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


def run_ops(
    dbs: Databases, plan: Plan, modes: Sequence[str], recording: Recording, results: Results
) -> None:
    dsns = {kind: dbs.fresh(kind, "ops") for kind in SAVERS}
    for kind in SAVERS:
        with sync_saver(kind, dsns[kind]) as saver:
            for turn in plan.ops_turns:
                replay(saver, recording.upto(turn), f"chat{turn}")
        dbs.analyze(dsns[kind])
    log("ops: chats replayed at turns " + ", ".join(map(str, plan.ops_turns)))
    count = plan.samples + plan.warmup
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
    results: Results, mode: str, turn: int, times: dict[str, dict[str, list[float]]]
) -> None:
    targets = {("put", 200): 0.4, ("list(limit=10)", 200): 0.3}
    for op, t in times.items():
        results.rows.append(
            row("ops", f"{op} @ turn {turn}", mode, t, target=targets.get((op, turn)))
        )


def _ops_sync(dsns: dict[str, str], plan: Plan, data: dict[int, OpsData], results: Results) -> None:
    with contextlib.ExitStack() as stack:
        savers = {k: stack.enter_context(sync_saver(k, dsns[k])) for k in SAVERS}
        for d in data.values():
            _ops_rows(results, "sync", d.turn, _ops_sync_turn(savers, plan, d))


def _ops_sync_turn(
    savers: dict[str, Any], plan: Plan, d: OpsData
) -> dict[str, dict[str, list[float]]]:
    latest, by_id = config(f"chat{d.turn}"), config(f"chat{d.turn}", d.head_id)
    args = (SAVERS, plan.samples, plan.warmup, plan.block)
    return {
        "get_tuple latest": timed(*args, lambda k, i: savers[k].get_tuple(latest)),
        "get_tuple by id": timed(*args, lambda k, i: savers[k].get_tuple(by_id)),
        "list(limit=10)": timed(*args, lambda k, i: list(savers[k].list(latest, limit=10))),
        "put_writes": timed(*args, lambda k, i: savers[k].put_writes(*d.writes[i])),
        "put": timed(*args, lambda k, i: savers[k].put(*d.puts[i])),
    }


async def _ops_async(
    dsns: dict[str, str], plan: Plan, data: dict[int, OpsData], results: Results
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        savers = {k: await stack.enter_async_context(async_saver(k, dsns[k])) for k in SAVERS}
        for d in data.values():
            _ops_rows(results, "async", d.turn, await _ops_async_turn(savers, plan, d))


async def _ops_async_turn(
    savers: dict[str, Any], plan: Plan, d: OpsData
) -> dict[str, dict[str, list[float]]]:
    latest, by_id = config(f"chat{d.turn}"), config(f"chat{d.turn}", d.head_id)
    args = (SAVERS, plan.samples, plan.warmup, plan.block)

    async def alist(kind: str) -> list[Any]:
        return [t async for t in savers[kind].alist(latest, limit=10)]

    return {
        "get_tuple latest": await atimed(*args, lambda k, i: savers[k].aget_tuple(latest)),
        "get_tuple by id": await atimed(*args, lambda k, i: savers[k].aget_tuple(by_id)),
        "list(limit=10)": await atimed(*args, lambda k, i: alist(k)),
        "put_writes": await atimed(*args, lambda k, i: savers[k].aput_writes(*d.writes[i])),
        "put": await atimed(*args, lambda k, i: savers[k].aput(*d.puts[i])),
    }


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


# -- agent loop ------------------------------------------------------------------------


def run_agent(dbs: Databases, plan: Plan, modes: Sequence[str], results: Results) -> None:
    dsns = {kind: dbs.fresh(kind, "agent") for kind in SAVERS}
    kinds = (*SAVERS, "memory")
    for mode in modes:
        if mode == "sync":
            times, steps = _agent_sync(dsns, plan)
        else:
            times, steps = asyncio.run(_agent_async(dsns, plan))
        _agent_rows(results, mode, times, steps, kinds)
        log(f"agent: {mode} done ({plan.agent_turns} turns, {steps:g} checkpoints a turn)")
    _agent_wire(dsns, results)
    for dsn in dsns.values():
        dbs.drop(dsn)


def _agent_rows(
    results: Results, mode: str, times: dict[str, list[float]], steps: float, kinds: Sequence[str]
) -> None:
    per_step = {k: [t * 1000 / steps for t in times[k]] for k in kinds}
    cost = {
        k: [a - b for a, b in zip(per_step[k], per_step["memory"], strict=True)] for k in SAVERS
    }
    floor = Stat.of(per_step["memory"])
    results.rows.append(
        Row(
            "agent",
            "agent loop, per super-step",
            mode,
            "ms",
            Stat.of(per_step["ours"]),
            Stat.of(per_step["official"]),
            extra={"inmemory": floor.__dict__},
        )
    )
    results.rows.append(
        Row(
            "agent",
            "persistence cost per super-step",
            mode,
            "ms",
            Stat.of(cost["ours"]),
            Stat.of(cost["official"]),
            target=0.4,
            note="saver - InMemorySaver",
            extra={"inmemory": floor.__dict__},
        )
    )
    results.notes.append(
        f"InMemorySaver floor of the agent loop ({mode}): {floor.p50:.2f} ms per super-step "
        f"p50, {floor.p95:.2f} p95."
    )


def _agent_sync(dsns: dict[str, str], plan: Plan) -> tuple[dict[str, list[float]], float]:
    with contextlib.ExitStack() as stack:
        savers: dict[str, Any] = {k: stack.enter_context(sync_saver(k, dsns[k])) for k in SAVERS}
        savers["memory"] = InMemorySaver()
        graphs = {k: agent_graph(s) for k, s in savers.items()}
        kinds = list(graphs)
        for k in kinds:  # warm-up: compile caches, prepared statements
            graphs[k].invoke(turn_input(1), config("agent-warmup-sync"))
        times: dict[str, list[float]] = {k: [] for k in kinds}
        gc.collect()
        for turn in range(1, plan.agent_turns + 1):
            shift = turn % len(kinds)
            for k in kinds[shift:] + kinds[:shift]:
                t0 = time.perf_counter()
                graphs[k].invoke(turn_input(turn), config("agent-sync"))
                times[k].append(time.perf_counter() - t0)
        steps = len(list(savers["memory"].list(config("agent-sync")))) / plan.agent_turns
        return times, steps


async def _agent_async(dsns: dict[str, str], plan: Plan) -> tuple[dict[str, list[float]], float]:
    async with contextlib.AsyncExitStack() as stack:
        savers: dict[str, Any] = {
            k: await stack.enter_async_context(async_saver(k, dsns[k])) for k in SAVERS
        }
        savers["memory"] = InMemorySaver()
        graphs = {k: agent_graph(s) for k, s in savers.items()}
        kinds = list(graphs)
        for k in kinds:
            await graphs[k].ainvoke(turn_input(1), config("agent-warmup-async"))
        times: dict[str, list[float]] = {k: [] for k in kinds}
        gc.collect()
        for turn in range(1, plan.agent_turns + 1):
            shift = turn % len(kinds)
            for k in kinds[shift:] + kinds[:shift]:
                t0 = time.perf_counter()
                await graphs[k].ainvoke(turn_input(turn), config("agent-async"))
                times[k].append(time.perf_counter() - t0)
        history = [t async for t in savers["memory"].alist(config("agent-async"))]
        return times, len(history) / plan.agent_turns


def _agent_wire(dsns: dict[str, str], results: Results) -> None:
    turns = 2
    for kind in SAVERS:
        trace = WireTrace()
        try:
            with sync_saver(kind, dsns[kind], size=1, configure=trace.configure) as saver:
                graph = agent_graph(saver)
                graph.invoke(turn_input(1), config("agent-wire"))
                with trace.measure(calls=turns) as count:
                    for turn in range(2, 2 + turns):
                        graph.invoke(turn_input(turn), config("agent-wire"))
                results.add_wire("agent loop, one turn (5 super-steps)", kind, count.per_call())
        finally:
            trace.close()


# -- concurrency -------------------------------------------------------------------------


def run_concurrency(dbs: Databases, plan: Plan, modes: Sequence[str], results: Results) -> None:
    """16 workers on one saver, on new threads and on threads with a history.

    The seeded threads hold `concurrent_history` turns of the agent loop: the
    middle of the 100-turn loop the issue measured the official saver on (92.6
    super-steps/s there).
    """
    history = record_agent(plan.concurrent_history)
    dsns = {kind: dbs.fresh(kind, "conc") for kind in SAVERS}
    long_threads = [_long_thread(mode, w) for mode in modes for w in range(plan.workers)]
    for kind in SAVERS:
        with sync_saver(kind, dsns[kind], size=1) as saver:
            replay(saver, history, "seed")
        dbs.clone_thread(dsns[kind], kind, "seed", long_threads)
        dbs.analyze(dsns[kind])
    cases = (("new threads", 0), (f"threads at turn {plan.concurrent_history}", len(history)))
    for mode in modes:
        what = "threads" if mode == "sync" else "tasks"
        for case, seeded in cases:
            past = history if seeded else []
            if mode == "sync":
                rate, latency = _concurrency_sync(dsns, plan, past)
            else:
                rate, latency = asyncio.run(_concurrency_async(dsns, plan, past))
            results.rows.append(
                Row(
                    "concurrency",
                    f"{plan.workers} workers, one saver, pool of {POOL_SIZE}, {case}",
                    mode,
                    "super-steps/s",
                    Stat(_median(rate["ours"]), None, len(rate["ours"])),
                    Stat(_median(rate["official"]), None, len(rate["official"])),
                    higher_is_better=True,
                    target=1.6 if seeded else None,
                    note=f"{what}, throughput",
                    extra={"inmemory_rate": rate["memory"], "rounds": rate},
                )
            )
            results.rows.append(
                Row(
                    "concurrency",
                    f"{plan.workers} workers, latency per super-step, {case}",
                    mode,
                    "ms",
                    Stat.of(latency["ours"]),
                    Stat.of(latency["official"]),
                    note=what,
                )
            )
            results.notes.append(
                f"InMemorySaver with {plan.workers} {what}, {case}: "
                f"{_median(rate['memory']):.0f} super-steps/s (the ceiling of this machine "
                "for the graph alone)."
            )
        log(f"concurrency: {mode} done")
    for dsn in dsns.values():
        dbs.drop(dsn)


def _median(values: Sequence[float]) -> float:
    return Stat.of(values).p50


def _long_thread(mode: str, worker: int) -> str:
    return f"{mode}-long-{worker}"


class _Turns:
    """Which thread and turns a worker runs in a round.

    New threads start at turn 1 each round; seeded threads go on where the
    previous round stopped.
    """

    def __init__(self, mode: str, history: Sequence[Call]) -> None:
        self.mode = mode
        self.seeded = bool(history)
        self.first = (max(c.turn for c in history) + 1) if history else 1
        self.done: dict[tuple[str, int], int] = {}

    def of(self, kind: str, worker: int, round_: int, turns: int) -> tuple[str, range]:
        if not self.seeded:
            return f"{self.mode}-c{round_}-{worker}", range(1, turns + 1)
        start = self.first + self.done.get((kind, worker), 0)
        self.done[(kind, worker)] = self.done.get((kind, worker), 0) + turns
        return _long_thread(self.mode, worker), range(start, start + turns)


def _memory_saver(mode: str, plan: Plan, history: Sequence[Call]) -> InMemorySaver:
    saver = InMemorySaver()
    if history:
        for w in range(plan.workers):
            replay(saver, history, _long_thread(mode, w))
    return saver


def _concurrency_sync(
    dsns: dict[str, str], plan: Plan, history: Sequence[Call]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    kinds = [*SAVERS, "memory"]
    rate: dict[str, list[float]] = {k: [] for k in kinds}
    latency: dict[str, list[float]] = {k: [] for k in kinds}
    plan_turns = _Turns("sync", history)
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(plan.workers) as pool:
        savers: dict[str, Any] = {k: stack.enter_context(sync_saver(k, dsns[k])) for k in SAVERS}
        savers["memory"] = _memory_saver("sync", plan, history)
        graphs = {k: agent_graph(s) for k, s in savers.items()}
        lock = threading.Lock()

        def worker(kind: str, thread: str, turns: range) -> None:
            for turn in turns:
                t0 = time.perf_counter()
                graphs[kind].invoke(turn_input(turn), config(thread))
                with lock:
                    latency[kind].append((time.perf_counter() - t0) * 1000 / 5)

        for round_ in range(plan.concurrent_rounds + 1):  # round 0 warms up
            order = kinds if round_ % 2 else list(reversed(kinds))
            for kind in order:
                turns = 1 if round_ == 0 else plan.concurrent_turns
                work = [plan_turns.of(kind, w, round_, turns) for w in range(plan.workers)]
                gc.collect()
                t0 = time.perf_counter()
                futures = [pool.submit(worker, kind, thread, span) for thread, span in work]
                for f in futures:
                    f.result()
                wall = time.perf_counter() - t0
                if round_ == 0:
                    latency[kind].clear()
                    continue
                rate[kind].append(plan.workers * turns * 5 / wall)
    return rate, latency


async def _concurrency_async(
    dsns: dict[str, str], plan: Plan, history: Sequence[Call]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    kinds = [*SAVERS, "memory"]
    rate: dict[str, list[float]] = {k: [] for k in kinds}
    latency: dict[str, list[float]] = {k: [] for k in kinds}
    plan_turns = _Turns("async", history)
    async with contextlib.AsyncExitStack() as stack:
        savers: dict[str, Any] = {
            k: await stack.enter_async_context(async_saver(k, dsns[k])) for k in SAVERS
        }
        savers["memory"] = _memory_saver("async", plan, history)
        graphs = {k: agent_graph(s) for k, s in savers.items()}

        async def worker(kind: str, thread: str, turns: range) -> None:
            for turn in turns:
                t0 = time.perf_counter()
                await graphs[kind].ainvoke(turn_input(turn), config(thread))
                latency[kind].append((time.perf_counter() - t0) * 1000 / 5)

        for round_ in range(plan.concurrent_rounds + 1):
            order = kinds if round_ % 2 else list(reversed(kinds))
            for kind in order:
                turns = 1 if round_ == 0 else plan.concurrent_turns
                work = [plan_turns.of(kind, w, round_, turns) for w in range(plan.workers)]
                gc.collect()
                t0 = time.perf_counter()
                await asyncio.gather(*(worker(kind, thread, span) for thread, span in work))
                wall = time.perf_counter() - t0
                if round_ == 0:
                    latency[kind].clear()
                    continue
                rate[kind].append(plan.workers * turns * 5 / wall)
    return rate, latency


# -- storage and DeltaChannel get_state ------------------------------------------------------


def run_storage(
    dbs: Databases,
    plan: Plan,
    modes: Sequence[str],
    recordings: dict[bool, Recording],
    results: Results,
) -> None:
    delta_dsns: dict[str, str] = {}
    for delta, recording in recordings.items():
        label = "DeltaChannel" if delta else "plain add_messages"
        sizes: dict[str, dict[str, int]] = {}
        replay_s: dict[str, float] = {}
        for kind in SAVERS:
            dsn = dbs.fresh(kind, "delta" if delta else "plain")
            with sync_saver(kind, dsn) as saver:
                t0 = time.perf_counter()
                replay(saver, recording.calls, "chat")
                replay_s[kind] = time.perf_counter() - t0
                _check_state(saver, recording, kind)
            sizes[kind] = dbs.storage_bytes(dsn, kind)
            dbs.analyze(dsn)
            if delta:
                delta_dsns[kind] = dsn
            else:
                dbs.drop(dsn)
        total = {k: sum(v.values()) / MIB for k, v in sizes.items()}
        results.rows.append(
            Row(
                "storage",
                f"storage after a {recording.turns}-turn chat, {label}",
                "-",
                "MiB",
                Stat(total["ours"]),
                Stat(total["official"]),
                target=None if delta else 0.5,
                extra={"tables_bytes": sizes, "replay_seconds": replay_s},
            )
        )
        log(
            f"storage: {label} replayed ({replay_s['ours']:.1f} s ours, "
            f"{replay_s['official']:.1f} s official)"
        )
    if True in recordings:
        _delta_get_state(dbs, plan, modes, recordings[True], delta_dsns, results)
    for dsn in delta_dsns.values():
        dbs.drop(dsn)


def _check_state(saver: Any, recording: Recording, kind: str) -> None:
    """The replayed thread reads back as the recorded run ended; a bench of wrong answers
    would mean nothing."""
    graph = chat_graph(saver, delta=recording.delta)
    got = graph.get_state(config("chat")).values["messages"]
    want = recording.final_messages
    if [(m.id, m.content) for m in got] != [(m.id, m.content) for m in want]:
        raise RuntimeError(f"{kind} saver read back a different chat than was recorded")


def _delta_get_state(
    dbs: Databases,
    plan: Plan,
    modes: Sequence[str],
    recording: Recording,
    dsns: dict[str, str],
    results: Results,
) -> None:
    best, worst = snapshot_cycle(recording)
    cases = {"best case": best, "worst case": worst}
    for mode in modes:
        if mode == "sync":
            times = _get_state_sync(dsns, plan, cases)
        else:
            times = asyncio.run(_get_state_async(dsns, plan, cases))
        for case, t in times.items():
            _delta_row(results, recording, mode, case, t)
        log(f"DeltaChannel get_state: {mode} done")
    for kind in SAVERS:
        trace = WireTrace()
        try:
            with sync_saver(kind, dsns[kind], size=1, configure=trace.configure) as saver:
                graph = chat_graph(saver, delta=True)
                with trace.measure() as count:
                    graph.get_state(config("chat", worst))
                results.add_wire("DeltaChannel get_state, worst case", kind, count.per_call())
        finally:
            trace.close()


def _get_state_sync(
    dsns: dict[str, str], plan: Plan, cases: dict[str, str]
) -> dict[str, dict[str, list[float]]]:
    with contextlib.ExitStack() as stack:
        graphs = {
            k: chat_graph(stack.enter_context(sync_saver(k, dsns[k])), delta=True) for k in SAVERS
        }
        out = {}
        for case, cid in cases.items():
            conf = config("chat", cid)
            states = [
                [(m.id, m.content) for m in graphs[k].get_state(conf).values["messages"]]
                for k in SAVERS
            ]
            if states[0] != states[1]:
                raise RuntimeError(f"the savers disagree on get_state in the {case}")
            out[case] = timed(
                SAVERS,
                plan.get_state_samples,
                plan.warmup,
                2,
                lambda k, i, c=conf: graphs[k].get_state(c),
            )
        return out


async def _get_state_async(
    dsns: dict[str, str], plan: Plan, cases: dict[str, str]
) -> dict[str, dict[str, list[float]]]:
    async with contextlib.AsyncExitStack() as stack:
        graphs = {
            k: chat_graph(await stack.enter_async_context(async_saver(k, dsns[k])), delta=True)
            for k in SAVERS
        }
        out = {}
        for case, cid in cases.items():
            conf = config("chat", cid)
            out[case] = await atimed(
                SAVERS,
                plan.get_state_samples,
                plan.warmup,
                2,
                lambda k, i, c=conf: graphs[k].aget_state(c),
            )
        return out


def _delta_row(
    results: Results, recording: Recording, mode: str, case: str, times: dict[str, list[float]]
) -> None:
    results.rows.append(
        row(
            "delta",
            f"get_state @ turn {recording.turns}, DeltaChannel, {case}",
            mode,
            times,
            target=0.5 if case == "worst case" else None,
        )
    )


# -- the run -----------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in (
        "pgcheckpoint",
        "langgraph-checkpoint-postgres",
        "langgraph",
        "langgraph-checkpoint",
        "psycopg",
    ):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "?"
    import pgcheckpoint

    out["pgcheckpoint imported from"] = str(Path(pgcheckpoint.__file__).parent)
    return out


def render(results: Results, meta: dict[str, Any]) -> str:
    lines = [
        "# pgcheckpoint vs langgraph-checkpoint-postgres",
        "",
        f"`{meta['command']}` on {meta['date']}, {meta['duration_s']:.0f} s; "
        f"PostgreSQL {meta['server_version']} ({meta['server']}), {meta['cpus']} CPUs, "
        f"pgcheckpoint {meta['versions']['pgcheckpoint']}, "
        f"langgraph-checkpoint-postgres {meta['versions']['langgraph-checkpoint-postgres']}, "
        f"langgraph {meta['versions']['langgraph']}, pool of {POOL_SIZE} for both savers.",
        "",
        "Ratio = pgcheckpoint / official on the p50 (lower is better, except throughput). "
        "A super-step is one checkpoint: a turn of the agent loop writes 5.",
        "",
        markdown_table(results.rows),
    ]
    if results.wire:
        lines += [
            "",
            "Per call, from libpq's protocol trace (untimed pass):",
            "",
            wire_table(results.wire),
        ]
    if results.notes:
        lines += ["", *[f"- {n}" for n in results.notes]]
    if results.errors:
        lines += ["", "Workloads that failed:", "", *[f"- {e}" for e in results.errors]]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and turns (~1 min)")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated workloads, of {', '.join(SECTIONS)}",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="sync, async or both")
    parser.add_argument("--out", type=Path, default=ROOT / ".bench", help="output directory")
    args = parser.parse_args(argv)
    sections = [s for s in args.only.split(",") if s]
    modes = [m for m in args.modes.split(",") if m]
    unknown = (set(sections) - set(SECTIONS)) | (set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown workload or mode: {', '.join(sorted(unknown))}")
    plan = QUICK if args.quick else Plan()

    started = time.perf_counter()
    results = Results()
    server, source = server_dsn()
    log(
        f"server from {source}; sections {sections}, modes {modes}, "
        f"{'quick' if args.quick else 'full'} plan"
    )
    recordings: dict[bool, Recording] = {}
    plain_turns = max(
        [plan.chat_turns] * ("storage" in sections) + [max(plan.ops_turns)] * ("ops" in sections),
        default=0,
    )
    if plain_turns:
        t0 = time.perf_counter()
        recordings[False] = record_chat(plain_turns, delta=False)
        if "storage" in sections:
            recordings[True] = record_chat(plan.chat_turns, delta=True)
        log(f"chats recorded in {time.perf_counter() - t0:.1f} s")

    with Databases(server) as dbs:
        server_version = dbs.server_version()
        work: dict[str, Callable[[], None]] = {
            "ops": lambda: run_ops(dbs, plan, modes, recordings[False], results),
            "agent": lambda: run_agent(dbs, plan, modes, results),
            "concurrency": lambda: run_concurrency(dbs, plan, modes, results),
            "storage": lambda: run_storage(dbs, plan, modes, recordings, results),
        }
        for section in sections:
            t0 = time.perf_counter()
            try:
                work[section]()
            except Exception as exc:
                traceback.print_exc()
                results.errors.append(f"{section}: {type(exc).__name__}: {exc}")
            log(f"{section}: {time.perf_counter() - t0:.1f} s")

    command = "python tests/bench/run.py" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")
    meta = {
        "command": command,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "duration_s": time.perf_counter() - started,
        "server": source,
        "server_version": server_version,
        "cpus": os.cpu_count(),
        "plan": plan.__dict__,
        "versions": _versions(),
    }
    text = render(results, meta)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text, encoding="utf-8")
    payload = {
        "meta": meta,
        "rows": [r.as_json() for r in results.rows],
        "wire": results.wire,
        "notes": results.notes,
        "errors": results.errors,
    }
    (args.out / "results.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(text)
    log(f"wrote {args.out / 'results.md'} and results.json")
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())

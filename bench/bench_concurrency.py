"""The concurrency workload: 16 workers sharing one saver, on new and long threads."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench_db import POOL_SIZE, SAVERS, Databases, async_saver, sync_saver
from bench_graphs import Call, agent_graph, config, record_agent, replay, turn_input
from bench_report import Row, Stat
from bench_timing import Plan, Results, log
from langgraph.checkpoint.memory import InMemorySaver


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
                    target=1.6 if seeded else 1.3,
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

"""The agent workload: a 100-turn agent loop per super-step, against `InMemorySaver`."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Sequence
from typing import Any

from bench_db import NOTHING_CACHED, SAVERS, Databases, async_saver, sync_saver
from bench_graphs import agent_graph, config, turn_input
from bench_report import Row, Stat
from bench_timing import ZERO_NOTE, Plan, Results, log
from bench_wire import WireTrace
from langgraph.checkpoint.memory import InMemorySaver


def run_agent(
    dbs: Databases,
    plan: Plan,
    modes: Sequence[str],
    results: Results,
    savers: Sequence[str] = SAVERS,
) -> None:
    dsns = {kind: dbs.fresh(kind, "agent") for kind in savers}
    kinds = (*savers, "memory")
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
        k: [a - b for a, b in zip(per_step[k], per_step["memory"], strict=True)]
        for k in kinds
        if k != "memory"
    }
    floor = Stat.of(per_step["memory"])
    for ours in [k for k in ("ours", NOTHING_CACHED) if k in kinds]:
        zero = [ZERO_NOTE] if ours == NOTHING_CACHED else []
        results.rows.append(
            Row(
                "agent",
                "agent loop, per super-step",
                mode,
                "ms",
                Stat.of(per_step[ours]),
                Stat.of(per_step["official"]),
                note=", ".join(zero),
                extra={"inmemory": floor.__dict__},
            )
        )
        results.rows.append(
            Row(
                "agent",
                "persistence cost per super-step",
                mode,
                "ms",
                Stat.of(cost[ours]),
                Stat.of(cost["official"]),
                target=0.3,
                note=", ".join(["saver - InMemorySaver", *zero]),
                extra={"inmemory": floor.__dict__},
            )
        )
    results.notes.append(
        f"InMemorySaver floor of the agent loop ({mode}): {floor.p50:.2f} ms per super-step "
        f"p50, {floor.p95:.2f} p95."
    )


def _agent_sync(dsns: dict[str, str], plan: Plan) -> tuple[dict[str, list[float]], float]:
    with contextlib.ExitStack() as stack:
        savers: dict[str, Any] = {k: stack.enter_context(sync_saver(k, dsns[k])) for k in dsns}
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
            k: await stack.enter_async_context(async_saver(k, dsns[k])) for k in dsns
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

"""The ops workload: `put`, `put_writes`, `get_tuple` and `list` at turn N of a chat."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench_db import SAVERS, Databases, async_saver, sync_saver
from bench_graphs import Put, PutWrites, Recording, config, replay
from bench_timing import Plan, Results, atimed, log, row, timed
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
        results.rows += row("ops", f"{op} @ turn {turn}", mode, t, target=targets.get((op, turn)))


def _ops_sync(dsns: dict[str, str], plan: Plan, data: dict[int, OpsData], results: Results) -> None:
    with contextlib.ExitStack() as stack:
        savers = {k: stack.enter_context(sync_saver(k, dsns[k])) for k in dsns}
        for d in data.values():
            _ops_rows(results, "sync", d.turn, _ops_sync_turn(savers, plan, d))


def _ops_sync_turn(
    savers: dict[str, Any], plan: Plan, d: OpsData
) -> dict[str, dict[str, list[float]]]:
    latest, by_id = config(f"chat{d.turn}"), config(f"chat{d.turn}", d.head_id)
    args = (tuple(savers), plan.samples, plan.warmup, plan.block)
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
        savers = {k: await stack.enter_async_context(async_saver(k, dsns[k])) for k in dsns}
        for d in data.values():
            _ops_rows(results, "async", d.turn, await _ops_async_turn(savers, plan, d))


async def _ops_async_turn(
    savers: dict[str, Any], plan: Plan, d: OpsData
) -> dict[str, dict[str, list[float]]]:
    latest, by_id = config(f"chat{d.turn}"), config(f"chat{d.turn}", d.head_id)
    args = (tuple(savers), plan.samples, plan.warmup, plan.block)

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

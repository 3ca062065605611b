"""The server workload: a short run through LangGraph's Agent Server, on each saver's factory.

Two `langgraph dev` servers run at once (tests/support/agent_server.py starts
them, offline), each on a fresh database: one names pgcheckpoint's factory
(`pgcheckpoint.agent_server.checkpointer`), the other a factory of a few
lines around the official `AsyncPostgresSaver` (bench/official_factory.py),
both with a pool of 8. The graph is examples/agent-server's refund below the
approval limit: the review subgraph, then pay, 8 checkpoints and no
interrupt; its `store` block is left out, so both servers record the
decision in the server's in-memory store and only the savers differ. Timed
through the SDK, one run at a time, the two servers alternating in blocks:
- as a client waits: `threads.create` and `runs.wait`, about half a second of
  which is the in-memory runtime's queue polling for the run;
- inside the server: from the run's first checkpoint to its last (their
  `created_at`), the graph and the saver alone;
- throughput: 8 clients at once, each running refunds on new threads one
  after another (the servers run 8 jobs at a time), in rounds that alternate
  the servers; runs per second of each round, the median counts.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench_db import POOL_SIZE, ROOT, SAVERS, Databases
from bench_report import Row, Stat
from bench_timing import Plan, Results, log, ms

sys.path.insert(0, str(ROOT / "tests"))

# the tests' helper that starts a server, shared rather than copied
from support.agent_server import (
    EXAMPLE,
    AgentServer,
    langgraph_command,
    missing_server_packages,
    server_env,
    server_folder,
)

CLIENTS = 8
FACTORIES = {
    "ours": "pgcheckpoint.agent_server.checkpointer",
    "official": "./official_factory.py:checkpointer",
}
REFUND = {"amount": 20}  # below the limit: no interrupt


def run_server(dbs: Databases, plan: Plan, results: Results) -> None:
    """Both servers up, then latency and throughput, interleaved."""
    missing = missing_server_packages()
    if missing:
        results.notes.append(f"server: skipped, {missing}")
        log(f"server: skipped ({missing})")
        return
    with tempfile.TemporaryDirectory(prefix="pgc_bench_server_") as tmp:
        servers: dict[str, AgentServer] = {}
        try:
            for kind in SAVERS:
                dsn = dbs.fresh(kind, "server")
                config = json.loads((EXAMPLE / "langgraph.json").read_text())
                del config["store"]
                config["checkpointer"] = {"path": FACTORIES[kind]}
                folder = server_folder(Path(tmp) / kind, config=config)
                shutil.copy(Path(__file__).parent / "official_factory.py", folder)
                env = server_env(dsn, PGCHECKPOINT_POOL_MAX_SIZE=str(POOL_SIZE))
                command = [langgraph_command(), "dev", "--no-browser", "--no-reload"]
                command += ["--n-jobs-per-worker", str(CLIENTS)]
                servers[kind] = AgentServer(folder, env, command=command)
                servers[kind].start()
            log("server: both servers up")
            asyncio.run(_measure(servers, plan, results))
        finally:
            for server in servers.values():
                server.stop()


async def _measure(servers: dict[str, AgentServer], plan: Plan, results: Results) -> None:
    from langgraph_sdk import get_client

    clients = {kind: get_client(url=server.url) for kind, server in servers.items()}
    waited: dict[str, list[float]] = {kind: [] for kind in SAVERS}
    inside: dict[str, list[float]] = {kind: [] for kind in SAVERS}

    async def one_run(kind: str) -> str:
        client = clients[kind]
        thread_id = str((await client.threads.create())["thread_id"])
        await client.runs.wait(thread_id, "refunds", input=REFUND)
        return thread_id

    async def timed_run(kind: str, i: int) -> None:
        t0 = time.perf_counter()
        thread_id = await one_run(kind)
        elapsed = time.perf_counter() - t0
        if i < plan.warmup:
            return
        waited[kind].append(elapsed)
        # the run's own span, from its first checkpoint to its last (untimed)
        history = await clients[kind].threads.get_history(thread_id)
        stamps = [datetime.fromisoformat(h["created_at"]) for h in history]
        inside[kind].append((max(stamps) - min(stamps)).total_seconds())

    try:
        # a run waits ~0.5 s for the in-memory runtime's queue: fewer samples than the rest
        total = plan.warmup + min(plan.samples, 40)
        for block, first in enumerate(range(0, total, plan.block)):
            for kind in SAVERS if block % 2 == 0 else tuple(reversed(SAVERS)):
                for i in range(first, min(first + plan.block, total)):
                    await timed_run(kind, i)
        for name, times, note in (
            (
                "a short run through langgraph dev (new thread, runs.wait)",
                waited,
                "as a client waits",
            ),
            (
                "the same run inside the server (first to last checkpoint)",
                inside,
                "graph and saver",
            ),
        ):
            results.rows.append(
                Row(
                    "server",
                    name,
                    "async",
                    "ms",
                    Stat.of(ms(times["ours"])),
                    Stat.of(ms(times["official"])),
                    note=note,
                )
            )
        log("server: latency done")
        rates: dict[str, list[float]] = {kind: [] for kind in SAVERS}
        runs_each = max(2, plan.concurrent_turns * 2)
        for round_ in range(plan.concurrent_rounds + 1):  # round 0 warms up
            for kind in SAVERS if round_ % 2 else tuple(reversed(SAVERS)):

                async def client_runs(kind: str = kind) -> None:
                    for _ in range(runs_each):
                        await one_run(kind)

                t0 = time.perf_counter()
                await asyncio.gather(*(client_runs() for _ in range(CLIENTS)))
                if round_:
                    rates[kind].append(CLIENTS * runs_each / (time.perf_counter() - t0))
        results.rows.append(
            Row(
                "server",
                f"{CLIENTS} clients at once through langgraph dev",
                "async",
                "runs/s",
                Stat(Stat.of(rates["ours"]).p50, None, len(rates["ours"])),
                Stat(Stat.of(rates["official"]).p50, None, len(rates["official"])),
                higher_is_better=True,
                note="throughput, runs on new threads",
                extra={"rounds": rates},
            )
        )
        log("server: throughput done")
    finally:
        for client in clients.values():
            await client.aclose()

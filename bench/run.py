"""`make bench`: pgcheckpoint against langgraph-checkpoint-postgres, side by side.

Runs the same workloads on both savers in the same run, sync and async, each in
fresh databases it creates and drops, and prints a table of medians, p95 and the
ratio pgcheckpoint / official, with the targets of issues 9 and 19. It writes the table
to `.bench/results.md` and every number to `.bench/results.json`. It never fails
on a number; it exits 1 only when a workload raised.

    .venv/bin/python bench/run.py            # 6 to 10 minutes on 2 busy cores
    .venv/bin/python bench/run.py --quick    # about 1 minute, fewer samples
    .venv/bin/python bench/run.py --only ops,storage --modes sync

The server: `PGCHECKPOINT_BENCH_DSN`, else `PGCHECKPOINT_TEST_DSN`, else the
embedded one (`pgcheckpoint.contrib.embedded`). Both savers get a pool of 8 connections
with the settings LangGraph's docs give (autocommit, prepare_threshold=0); the ops
workload times pgcheckpoint once more over a bare pool, with psycopg's defaults
(rows noted "bare pool"), against the official saver with the docs' settings.

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
  (worst case of the snapshot cycle), on tables ANALYZE has seen.
- live: the DeltaChannel chat (2 messages of ~330 characters a turn) run turn by
  turn through a compiled graph on each saver, sync, nothing replayed and no
  ANALYZE: the cost per turn, then `get_state` and `get_delta_channel_history`
  at the worst case of the snapshot cycle, on a fresh pool and in the steady
  state, with the time spent in psycopg's `execute` (bench_live.py).
- wire: round trips and bytes per call, from libpq's trace in a separate pass.
- telemetry: the calls of the ops workload on pgcheckpoint alone, as without
  opentelemetry, with its API and no SDK, and with the SDK and an in-memory
  exporter (`bench_telemetry`): what spans and metrics cost.
- server: a short run (examples/agent-server's refund) through two `langgraph
  dev` servers at once, one on pgcheckpoint's factory, one on a factory around
  the official AsyncPostgresSaver (bench/official_factory.py): the p50 of one
  run, and runs per second with 8 clients (bench_server.py; skipped without
  the `server` extra).
- store: the store (`PostgresStore`) against the official one at 10k and 100k
  items: put, get, search with a filter and with a query, list_namespaces,
  batches of 1/10/100 puts (bench_store.py).
- memory: peak and steady RSS of a worker process serving thousands of threads
  (bench_memory.py, each worker a memory_worker.py), one process per saver, and
  pgcheckpoint with nothing cached; the peak against the official saver's plus
  `cache_bytes` plus 10 MiB, and split into imports, caches, zstd and the rest.

ops, agent and storage also time pgcheckpoint with `cache_bytes=0` (rows noted
so), next to the default budget in the same interleaved run, unless
`--skip-zero-budget`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent import run_agent
from bench_concurrency import run_concurrency
from bench_db import BARE_POOL, NOTHING_CACHED, POOL_SIZE, ROOT, SAVERS, Databases, server_dsn
from bench_graphs import Recording, record_chat
from bench_live import run_live
from bench_memory import run_memory
from bench_ops import run_ops
from bench_report import markdown_table, telemetry_table, wire_table
from bench_server import run_server
from bench_storage import run_storage
from bench_store import run_store
from bench_telemetry import run_telemetry
from bench_timing import QUICK, Plan, Results, log

SECTIONS = (
    "ops",
    "agent",
    "concurrency",
    "storage",
    "live",
    "server",
    "memory",
    "telemetry",
    "store",
)
MODES = ("sync", "async")


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
    if results.telemetry:
        lines += [
            "",
            "What telemetry costs, p50 in ms (ratio to without opentelemetry):",
            "",
            telemetry_table(results.telemetry),
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
    parser.add_argument(
        "--skip-zero-budget",
        action="store_true",
        help="do not time pgcheckpoint with cache_bytes=0 next to the default",
    )
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
        [plan.chat_turns] * ("storage" in sections)
        + [max(plan.ops_turns)] * bool({"ops", "telemetry"} & set(sections)),
        default=0,
    )
    if plain_turns:
        t0 = time.perf_counter()
        recordings[False] = record_chat(plain_turns, delta=False)
        if "storage" in sections:
            recordings[True] = record_chat(plan.chat_turns, delta=True)
        log(f"chats recorded in {time.perf_counter() - t0:.1f} s")

    kinds = SAVERS if args.skip_zero_budget else (*SAVERS, NOTHING_CACHED)
    with Databases(server) as dbs:
        server_version = dbs.server_version()
        work: dict[str, Callable[[], None]] = {
            "ops": lambda: run_ops(
                dbs, plan, modes, recordings[False], results, (*kinds, BARE_POOL)
            ),
            "agent": lambda: run_agent(dbs, plan, modes, results, kinds),
            "concurrency": lambda: run_concurrency(dbs, plan, modes, results),
            "storage": lambda: run_storage(dbs, plan, modes, recordings, results, kinds),
            "live": lambda: run_live(dbs, plan, modes, results),
            "server": lambda: run_server(dbs, plan, results),
            "memory": lambda: run_memory(dbs, plan, results),
            "telemetry": lambda: run_telemetry(dbs, plan, modes, recordings[False], results),
            "store": lambda: run_store(dbs, plan, modes, results),
        }
        for section in sections:
            t0 = time.perf_counter()
            try:
                work[section]()
            except Exception as exc:
                traceback.print_exc()
                results.errors.append(f"{section}: {type(exc).__name__}: {exc}")
            log(f"{section}: {time.perf_counter() - t0:.1f} s")

    command = "python bench/run.py" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")
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
        "extra": results.extra,
        "wire": results.wire,
        "telemetry": results.telemetry,
        "notes": results.notes,
        "errors": results.errors,
    }
    (args.out / "results.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(text)
    log(f"wrote {args.out / 'results.md'} and results.json")
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())

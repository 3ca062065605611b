"""The memory workload: RSS of a worker serving thousands of threads, one process per saver.

A worker process opens a pool of 4 and one saver, and serves threads of 8
turns (half a plain `add_messages` chat, half `DeltaChannel`, messages of
about 2 KB) from 4 Python threads, as a LangGraph worker serving requests
does. After each batch of threads it reports its RSS (and, for pgcheckpoint,
what the saver's caches hold by their own accounting); at the end its peak
RSS (VmHWM). Each saver runs in a process of its own, started from nothing,
so each RSS is that saver's alone.

    .venv/bin/python bench/bench_memory.py ours DSN 2000 250 --cache-bytes 0
    .venv/bin/python bench/bench_memory.py ours DSN 2000 250 --trace-at 1000,2000

`--trace-at` diffs tracemalloc snapshots taken after those thread counts and
prints the lines that grew most to stderr (slow: for finding a leak, not for
the table).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_db import CONNECTION_KWARGS, Databases
from bench_graphs import chat_graph, config, human
from bench_report import Row, Stat
from bench_timing import Plan, Results, log

MIB = 1024 * 1024
POOL = 4
TURNS = 8
MESSAGE_BYTES = 2000
# (saver, cache_bytes) run by `make bench`; None is the saver's default budget
WORKERS: tuple[tuple[str, int | None], ...] = (("official", None), ("ours", None), ("ours", 0))


def _status(field: str) -> float:
    """A field of /proc/self/status (VmRSS, VmHWM), in MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _saver(kind: str, pool: Any, cache_bytes: int | None) -> Any:
    if kind == "official":
        from langgraph.checkpoint.postgres import PostgresSaver as Official

        return Official(pool)
    from pgcheckpoint import PostgresSaver

    return (
        PostgresSaver(pool) if cache_bytes is None else PostgresSaver(pool, cache_bytes=cache_bytes)
    )


def _held(saver: Any) -> int | None:
    kept = getattr(saver, "caches", None)
    return None if kept is None else int(kept.used_bytes)


def worker(
    kind: str, dsn: str, threads: int, step: int, cache_bytes: int | None, trace_at: Sequence[int]
) -> None:
    """Serve `threads` threads, printing a JSON line after every `step`."""
    from psycopg_pool import ConnectionPool

    if trace_at:
        tracemalloc.start(12)
    snapshots: dict[int, tracemalloc.Snapshot] = {}
    with ConnectionPool(
        dsn, min_size=POOL, max_size=POOL, kwargs=dict(CONNECTION_KWARGS), open=True
    ) as pool:
        pool.wait()
        saver = _saver(kind, pool, cache_bytes)
        graphs = [chat_graph(saver, message_bytes=MESSAGE_BYTES, delta=d) for d in (False, True)]

        def serve(n: int) -> None:
            conf = config(f"mem-{n}")
            for turn in range(1, TURNS + 1):
                graphs[n % 2].invoke({"messages": [human(turn, MESSAGE_BYTES)]}, conf)

        started = time.perf_counter()
        with ThreadPoolExecutor(POOL) as executor:
            for done in range(step, threads + 1, step):
                list(executor.map(serve, range(done - step, done)))
                report = {
                    "threads": done,
                    "rss": _status("VmRSS"),
                    "held": _held(saver),
                    "seconds": time.perf_counter() - started,
                }
                print(json.dumps(report), flush=True)
                if done in trace_at:
                    gc.collect()
                    snapshots[done] = tracemalloc.take_snapshot()
    print(json.dumps({"peak": _status("VmHWM")}), flush=True)
    if len(snapshots) >= 2:
        first, last = sorted(snapshots)[0], sorted(snapshots)[-1]
        diff = snapshots[last].compare_to(snapshots[first], "traceback")
        print(f"tracemalloc, {first} -> {last} threads, largest growth:", file=sys.stderr)
        for stat in diff[:15]:
            print(f"{stat.size_diff / 1024:+.0f} KiB, {stat.count_diff:+d} blocks", file=sys.stderr)
            for line in stat.traceback.format()[-8:]:
                print("   ", line, file=sys.stderr)


def _command(dsn: str, kind: str, cache_bytes: int | None, threads: int, step: int) -> list[str]:
    command = [sys.executable, __file__, kind, dsn, str(threads), str(step)]
    return command if cache_bytes is None else [*command, "--cache-bytes", str(cache_bytes)]


def _reports(out: str) -> dict[str, Any]:
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {
        "by_threads": {r["threads"]: r for r in lines if "threads" in r},
        "peak": next(r["peak"] for r in lines if "peak" in r),
    }


def run_memory(dbs: Databases, plan: Plan, results: Results) -> None:
    """RSS rows: both savers, and pgcheckpoint with nothing cached, each its own process.

    The three processes run at once (RSS does not depend on speed), each on a
    database of its own.
    """
    from pgcheckpoint.core.caches import DEFAULT_CACHE_BYTES

    budget = DEFAULT_CACHE_BYTES / MIB
    procs: dict[str, tuple[str, subprocess.Popen[str]]] = {}
    t0 = time.perf_counter()
    for kind, cache_bytes in WORKERS:
        label = kind if cache_bytes is None else f"{kind}@{cache_bytes}"
        dsn = dbs.fresh(kind, f"mem{len(procs)}")
        command = _command(dsn, kind, cache_bytes, plan.memory_threads, plan.memory_step)
        procs[label] = (dsn, subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
    runs: dict[str, dict[str, Any]] = {}
    for label, (dsn, proc) in procs.items():
        out, _ = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"the memory worker of {label} exited with {proc.returncode}")
        runs[label] = _reports(out)
        dbs.drop(dsn)
    log(f"memory: {plan.memory_threads} threads served in {time.perf_counter() - t0:.0f} s")
    results.extra["memory"] = runs
    _memory_rows(runs, budget, results)


def _memory_rows(runs: dict[str, dict[str, Any]], budget: float, results: Results) -> None:
    ours, official, zero = runs["ours"], runs["official"], runs["ours@0"]
    marks = sorted(official["by_threads"])
    for n in [m for m in marks if m % 1000 == 0] or marks[-1:]:
        mine, theirs = ours["by_threads"][n]["rss"], official["by_threads"][n]["rss"]
        results.rows.append(
            Row(
                "memory",
                f"RSS after {n} threads",
                "sync",
                "MiB",
                Stat(mine),
                Stat(theirs),
                # at most the official saver's plus the budget plus 10 MiB
                target=(theirs + budget + 10) / theirs if n == 2000 else None,
                note=f"cache_bytes=0: {zero['by_threads'][n]['rss']:.1f} MiB",
            )
        )
    results.rows.append(
        Row(
            "memory",
            f"peak RSS, {marks[-1]} threads",
            "sync",
            "MiB",
            Stat(ours["peak"]),
            Stat(official["peak"]),
            note=f"cache_bytes=0: {zero['peak']:.1f} MiB",
        )
    )
    since = 2000 if marks[-1] > 2000 else marks[len(marks) // 2]
    growth = {
        label: (run["by_threads"][marks[-1]]["rss"] - run["by_threads"][since]["rss"])
        * 1000
        / (marks[-1] - since)
        for label, run in runs.items()
    }
    results.rows.append(
        Row(
            "memory",
            f"RSS growth per 1000 threads, {since} to {marks[-1]}",
            "sync",
            "MiB",
            Stat(growth["ours"]),
            Stat(growth["official"]),
            limit=2.0,
            note=f"cache_bytes=0: {growth['ours@0']:+.1f} MiB",
        )
    )
    held = ", ".join(
        f"{n}: {ours['by_threads'][n]['held'] / MIB:.1f}"
        for n in marks
        if ours["by_threads"][n]["held"] is not None
    )
    results.notes.append(
        f"Memory: one process per saver, a pool of {POOL}, {POOL} Python threads serving "
        f"threads of {TURNS} turns ({MESSAGE_BYTES}-byte messages, half plain add_messages, "
        f"half DeltaChannel); RSS read after every batch. What pgcheckpoint's caches hold by "
        f"their own accounting (MiB, budget {budget:.0f}) after N threads: {held}."
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("ours", "official"))
    parser.add_argument("dsn")
    parser.add_argument("threads", type=int)
    parser.add_argument("step", type=int)
    parser.add_argument("--cache-bytes", type=int)
    parser.add_argument("--trace-at", default="")
    args = parser.parse_args(argv)
    trace_at = [int(n) for n in args.trace_at.split(",") if n]
    worker(args.kind, args.dsn, args.threads, args.step, args.cache_bytes, trace_at)


if __name__ == "__main__":
    main()

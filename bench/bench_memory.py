"""The memory section of `make bench`: RSS of a worker serving thousands of threads.

Each saver runs in a process of its own (`memory_worker.py`), started from
nothing, on a database of its own: the official saver, pgcheckpoint with its
default budget, and pgcheckpoint with nothing cached. Besides RSS after each
batch and at the peak, the rows split the peak into what the interpreter and
the imports both savers need take, the saver's own imports, pgcheckpoint's
caches by their own count (`CacheBudget.used_bytes`), its zstd contexts,
and the rest; and check the peak against the official saver's plus
`cache_bytes` plus 10 MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_db import CONNECTION_KWARGS, Databases
from bench_report import Row, Stat
from bench_timing import Plan, Results, log
from memory_worker import MESSAGE_BYTES, POOL, TURNS

MIB = 1024 * 1024
WORKER = Path(__file__).resolve().parent / "memory_worker.py"
# (saver, cache_bytes) run by `make bench`; None is the saver's default budget
WORKERS: tuple[tuple[str, int | None], ...] = (("official", None), ("ours", None), ("ours", 0))
# What the peak may exceed the official saver's by, besides the cache budget.
SLACK_MIB = 10


def _command(dsn: str, kind: str, cache_bytes: int | None, threads: int, step: int) -> list[str]:
    command = [sys.executable, str(WORKER), kind, dsn, str(threads), str(step)]
    command += ["--connection", json.dumps(CONNECTION_KWARGS)]
    return command if cache_bytes is None else [*command, "--cache-bytes", str(cache_bytes)]


def _reports(out: str) -> dict[str, Any]:
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {
        "phases": {r["phase"]: r["rss"] for r in lines if "phase" in r},
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
    for run in runs.values():
        run["breakdown"] = breakdown(run)
    results.extra["memory"] = runs
    _memory_rows(runs, budget, results)


def breakdown(run: dict[str, Any]) -> dict[str, float]:
    """A worker's peak RSS in parts (MiB): what each part adds, the rest last.

    The caches and the zstd contexts are read after the last batch, when the
    budget has long been full.
    """
    phases = run["phases"]
    last = run["by_threads"][max(run["by_threads"])]
    caches = (last.get("held") or 0) / MIB
    zstd = (last.get("zstd") or 0) / MIB
    return {
        "common": phases["common"],
        "imports": phases["imports"] - phases["common"],
        "caches": caches,
        "zstd": zstd,
        "rest": run["peak"] - phases["imports"] - caches - zstd,
    }


_PARTS = (
    ("common", "interpreter, LangGraph, psycopg (both need them)"),
    ("imports", "the saver's own modules"),
    ("caches", "caches, by their own count"),
    ("zstd", "zstd contexts"),
    ("rest", "the rest: allocators' slack beyond that count, connections, LangGraph's state"),
)


def _memory_rows(runs: dict[str, dict[str, Any]], budget: float, results: Results) -> None:
    ours, official, zero = runs["ours"], runs["official"], runs["ours@0"]
    marks = sorted(official["by_threads"])
    for n in [m for m in marks if m % 1000 == 0] or marks[-1:]:
        results.rows.append(
            Row(
                "memory",
                f"RSS after {n} threads",
                "sync",
                "MiB",
                Stat(ours["by_threads"][n]["rss"]),
                Stat(official["by_threads"][n]["rss"]),
                note=f"cache_bytes=0: {zero['by_threads'][n]['rss']:.1f} MiB",
            )
        )
    bound = official["peak"] + budget + SLACK_MIB
    results.rows.append(
        Row(
            "memory",
            f"peak RSS, {marks[-1]} threads",
            "sync",
            "MiB",
            Stat(ours["peak"]),
            Stat(official["peak"]),
            # at most the official saver's plus the budget plus SLACK_MIB
            target=round(bound / official["peak"], 3),
            note=f"bound: the official's + {budget:.0f} + {SLACK_MIB} = {bound:.1f} MiB; "
            f"cache_bytes=0: {zero['peak']:.1f} MiB",
        )
    )
    for part, what in _PARTS:
        note = f"cache_bytes=0: {zero['breakdown'][part]:.1f} MiB"
        if part == "caches":
            last = ours["by_threads"][marks[-1]]
            kept = ", ".join(f"{k} {v / MIB:.1f}" for k, v in sorted(last["by_cache"].items()))
            note = f"{kept}; budget {budget:.0f}"
        results.rows.append(
            Row(
                "memory",
                f"peak RSS, part: {what}",
                "sync",
                "MiB",
                Stat(ours["breakdown"][part]),
                Stat(official["breakdown"][part]),
                note=note,
            )
        )
    since = 2000 if marks[-1] > 2000 else marks[(len(marks) - 1) // 2]
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
        f"half DeltaChannel); RSS read after every batch. The peak's parts: the RSS after "
        f"the imports both savers need, then what the saver's own imports added, what "
        f"pgcheckpoint's caches hold by their own count (which includes what the "
        f"allocators keep for them) and its zstd contexts after the last batch, and the "
        f"rest. What the caches hold (MiB, budget {budget:.0f}) after N threads: {held}."
    )

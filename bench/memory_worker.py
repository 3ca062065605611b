"""One process of the memory workload: a worker serving threads, reporting its RSS.

A worker opens a pool of 4 and one saver, and serves threads of 8 turns (half
a plain `add_messages` chat, half `DeltaChannel`, messages of about 2 KB)
from 4 Python threads, as a LangGraph worker serving requests does. It prints
JSON lines: its RSS before and after the imports both savers need, after the
saver's own imports, after each batch of threads (with, for pgcheckpoint,
what its caches hold by their own count and what its zstd contexts hold),
and at the end its peak RSS (VmHWM). Nothing of the other saver, nor of the
bench's database helpers, is imported, so each process's RSS is its saver's.

    .venv/bin/python bench/memory_worker.py ours DSN 2000 250 --cache-bytes 0
    .venv/bin/python bench/memory_worker.py ours DSN 2000 250 --trace-at 1000,2000

`--trace-at` diffs tracemalloc snapshots taken after those thread counts and
prints the lines that grew most to stderr. It is for finding a leak, not for
the table: tracemalloc's own records add to RSS (600 threads: 135 MiB traced
against 123 untraced), so compare RSS between untraced runs only.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

POOL = 4
TURNS = 8
MESSAGE_BYTES = 2000


def rss(field: str = "VmRSS") -> float:
    """A field of /proc/self/status (VmRSS, VmHWM), in MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _emit(**report: Any) -> None:
    print(json.dumps(report), flush=True)


def _saver(kind: str, pool: Any, cache_bytes: int | None) -> Any:
    if kind == "official":
        from langgraph.checkpoint.postgres import PostgresSaver as Official

        return Official(pool)
    from pgcheckpoint import PostgresSaver

    return (
        PostgresSaver(pool) if cache_bytes is None else PostgresSaver(pool, cache_bytes=cache_bytes)
    )


def _held(saver: Any) -> dict[str, Any]:
    """What pgcheckpoint's caches hold by their own count, by cache, and its zstd contexts."""
    caches = getattr(saver, "caches", None)
    if caches is None:
        return {"held": None}
    from pgcheckpoint.codec.values import zstd_context_bytes

    by_cache: dict[str, int] = {}
    for name, cost in caches.usage().items():
        cache = name.rstrip("0123456789")  # a with_allowlist copy's caches count with the saver's
        by_cache[cache] = by_cache.get(cache, 0) + cost
    return {"held": caches.used_bytes, "by_cache": by_cache, "zstd": zstd_context_bytes()}


def worker(
    kind: str,
    dsn: str,
    threads: int,
    step: int,
    cache_bytes: int | None,
    connection: dict[str, Any],
    trace_at: Sequence[int],
) -> None:
    """Serve `threads` threads, printing a JSON line after every `step`."""
    _emit(phase="start", rss=rss())
    from concurrent.futures import ThreadPoolExecutor

    from psycopg_pool import ConnectionPool

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_graphs import chat_graph, config, human

    _emit(phase="common", rss=rss())
    if kind == "official":
        import langgraph.checkpoint.postgres  # noqa: F401
    else:
        import pgcheckpoint  # noqa: F401
    _emit(phase="imports", rss=rss())

    if trace_at:
        tracemalloc.start(12)
    snapshots: dict[int, tracemalloc.Snapshot] = {}
    with ConnectionPool(dsn, min_size=POOL, max_size=POOL, kwargs=connection, open=True) as pool:
        pool.wait()
        saver = _saver(kind, pool, cache_bytes)
        graphs = [chat_graph(saver, message_bytes=MESSAGE_BYTES, delta=d) for d in (False, True)]
        _emit(phase="setup", rss=rss())

        def serve(n: int) -> None:
            conf = config(f"mem-{n}")
            for turn in range(1, TURNS + 1):
                graphs[n % 2].invoke({"messages": [human(turn, MESSAGE_BYTES)]}, conf)

        started = time.perf_counter()
        with ThreadPoolExecutor(POOL) as executor:
            for done in range(step, threads + 1, step):
                list(executor.map(serve, range(done - step, done)))
                _emit(
                    threads=done,
                    rss=rss(),
                    seconds=time.perf_counter() - started,
                    **_held(saver),
                )
                if done in trace_at:
                    gc.collect()
                    snapshots[done] = tracemalloc.take_snapshot()
    _emit(peak=rss("VmHWM"))
    if len(snapshots) >= 2:
        first, last = sorted(snapshots)[0], sorted(snapshots)[-1]
        diff = snapshots[last].compare_to(snapshots[first], "traceback")
        print(f"tracemalloc, {first} -> {last} threads, largest growth:", file=sys.stderr)
        for stat in diff[:15]:
            print(f"{stat.size_diff / 1024:+.0f} KiB, {stat.count_diff:+d} blocks", file=sys.stderr)
            for line in stat.traceback.format()[-8:]:
                print("   ", line, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("ours", "official"))
    parser.add_argument("dsn")
    parser.add_argument("threads", type=int)
    parser.add_argument("step", type=int)
    parser.add_argument("--cache-bytes", type=int)
    parser.add_argument(
        "--connection",
        default="{}",
        help="the pool's connection kwargs, as JSON (make bench passes LangGraph's settings)",
    )
    parser.add_argument("--trace-at", default="")
    args = parser.parse_args(argv)
    trace_at = [int(n) for n in args.trace_at.split(",") if n]
    connection = json.loads(args.connection)
    worker(args.kind, args.dsn, args.threads, args.step, args.cache_bytes, connection, trace_at)


if __name__ == "__main__":
    main()

"""Where the time of each bench workload goes, on either saver.

    .venv/bin/python bench/bench_profile.py [--saver ours|official] [--calls 20]

Runs each workload under cProfile and splits its wall time into: waiting on the
server (psycopg's `wait`: network, server time), decoding rows (`fetchall`),
the serializer (msgpack and LangChain objects), zstd, and the rest (the saver's
and LangGraph's Python). Then, for pgcheckpoint, runs each statement of the
workload once more under EXPLAIN ANALYZE (rolled back) for the server's planning
and execution time. cProfile slows Python down, so read proportions, not totals.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_db import SAVERS, Databases, server_dsn, sync_saver
from bench_graphs import (
    Put,
    Recording,
    agent_graph,
    chat_graph,
    config,
    record_chat,
    replay,
    snapshot_cycle,
)
from bench_graphs import turn_input as agent_input

# (file suffix, function name) -> bucket; cumulative time, outermost match wins
BUCKETS = {
    ("psycopg/connection.py", "wait"): "server wait",
    ("psycopg/cursor.py", "fetchall"): "row decoding",
    ("jsonplus.py", "dumps_typed"): "serde",
    ("jsonplus.py", "loads_typed"): "serde",
    ("~", "<method 'compress' of 'zstandard.backend_c.ZstdCompressor' objects>"): "zstd",
    ("~", "<method 'decompress' of 'zstandard.backend_c.ZstdDecompressor' objects>"): "zstd",
}


def breakdown(fn: Callable[[], object], calls: int) -> dict[str, float]:
    for _ in range(2):
        fn()
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    for _ in range(calls):
        fn()
    profile.disable()
    wall = (time.perf_counter() - t0) / calls
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out = dict.fromkeys(dict.fromkeys(BUCKETS.values()), 0.0)
    for (filename, _, name), (_, _, _, cumtime, callers) in stats.items():
        for (suffix, func), bucket in BUCKETS.items():
            # outermost calls only: not those from the same function (recursion)
            outer = not any(c[2] == func for c in callers)
            if name == func and filename.endswith(suffix) and outer:
                out[bucket] += cumtime / calls
    shares = {k: v * 1000 for k, v in out.items()}
    shares["other Python"] = max(0.0, wall * 1000 - sum(shares.values()))
    shares["total (profiled)"] = wall * 1000
    return shares


@contextlib.contextmanager
def captured(saver: Any) -> Iterator[list[tuple[str, str, Any]]]:
    """The (name, SQL, params) of the named statements a saver runs inside the block."""
    seen: list[tuple[str, str, Any]] = []
    names = {text: name for name, text in saver.queries.items()}
    execute = psycopg.Cursor.execute

    def spy(cur: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if isinstance(query, str) and query in names:
            seen.append((names[query], query, params))
        return execute(cur, query, params, **kwargs)

    psycopg.Cursor.execute = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]


def explain(dsn: str, statements: list[tuple[str, str, Any]]) -> list[str]:
    """Planning and execution time of each statement (writes rolled back)."""
    lines = []
    with psycopg.connect(dsn) as conn:
        for name, query, params in statements:
            with conn.transaction(force_rollback=True):
                row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchone()
            plan = row[0][0] if row else {}
            lines.append(
                f"    {name}: planning {plan.get('Planning Time', 0):.2f} ms, "
                f"execution {plan.get('Execution Time', 0):.2f} ms"
            )
    return lines


class SaverClock:
    """Wall time spent inside a saver's methods, from any thread (LangGraph's
    background puts too, which cProfile, bound to one thread, does not see)."""

    METHODS = ("put", "put_writes", "get_tuple", "get_delta_channel_history")

    def __init__(self, saver: Any) -> None:
        self.spent: dict[str, float] = dict.fromkeys(self.METHODS, 0.0)
        self.calls: dict[str, int] = dict.fromkeys(self.METHODS, 0)
        self._lock = threading.Lock()
        for method in self.METHODS:
            setattr(saver, method, self._timed(method, getattr(saver, method)))

    def _timed(self, method: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.spent[method] += time.perf_counter() - t0
                    self.calls[method] += 1

        return timed

    def reset(self) -> None:
        self.spent = dict.fromkeys(self.METHODS, 0.0)
        self.calls = dict.fromkeys(self.METHODS, 0)


def workloads(saver: Any, plain: Recording, delta_worst: str) -> dict[str, Callable[[], object]]:
    head = next(c for c in reversed(plain.upto(200)) if isinstance(c, Put))
    samples = iter(range(1, 1_000_000))
    turns = iter(range(1, 1_000_000))
    agent = agent_graph(saver)
    delta_graph = chat_graph(saver, delta=True)

    def put200() -> object:
        k = next(samples)
        versions = {c: f"{900 + k:032}.5" for c in head.new_versions}
        checkpoint = {
            **head.checkpoint,
            "id": f"1f0{k:033d}",
            "channel_versions": {**head.checkpoint["channel_versions"], **versions},
        }
        return saver.put(config("put200"), checkpoint, head.metadata, versions)

    return {
        "put @ turn 200": put200,
        "get_tuple latest @ turn 10": lambda: saver.get_tuple(config("chat10")),
        "get_tuple latest @ turn 200": lambda: saver.get_tuple(config("chat200")),
        "list(limit=10) @ turn 10": lambda: list(saver.list(config("chat10"), limit=10)),
        "list(limit=10) @ turn 200": lambda: list(saver.list(config("chat200"), limit=10)),
        "agent loop turn (5 super-steps)": lambda: agent.invoke(
            agent_input(next(turns)), config("agent")
        ),
        "DeltaChannel get_state worst @ turn 300": lambda: delta_graph.get_state(
            config("delta", delta_worst)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saver", choices=SAVERS, action="append")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    kinds = args.saver or list(SAVERS)
    plain = record_chat(200, delta=False)
    delta = record_chat(300, delta=True)
    _, worst = snapshot_cycle(delta)
    server, _ = server_dsn()
    with Databases(server) as dbs:
        for kind in kinds:
            dsn = dbs.fresh(kind, "profile")
            with sync_saver(kind, dsn) as saver:
                for turn in (10, 200):
                    replay(saver, plain.upto(turn), f"chat{turn}")
                replay(saver, delta.calls, "delta")
                dbs.analyze(dsn)
                clock = SaverClock(saver)
                print(f"\n## {kind}")
                for name, fn in workloads(saver, plain, worst).items():
                    calls = max(3, args.calls // 4) if "list" in name else args.calls
                    clock.reset()
                    shares = breakdown(fn, calls)
                    total = shares.pop("total (profiled)")
                    parts = ", ".join(f"{k} {v:.2f}" for k, v in shares.items())
                    print(f"{name}: {total:.2f} ms profiled = {parts}")
                    inside = ", ".join(
                        f"{m} {clock.spent[m] * 1000 / (calls + 2):.2f} ms"
                        f" ({clock.calls[m] / (calls + 2):g} calls)"
                        for m in clock.METHODS
                        if clock.calls[m]
                    )
                    print(f"    inside the saver, per run: {inside}")
                    if kind == "ours":
                        with captured(saver) as seen:
                            fn()
                        for line in explain(dsn, seen):
                            print(line)
            dbs.drop(dsn)


if __name__ == "__main__":
    main()

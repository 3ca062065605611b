"""The telemetry workload: what spans and metrics cost on the calls of the ops workload.

The same saver calls (`put`, `put_writes`, `get_tuple`, `list`) at turn N of a
chat, each run three ways on one database, alternating in small blocks:

- `none`: as without the `otel` extra (pgcheckpoint acts as if opentelemetry
  could not be imported);
- `api`: opentelemetry's API installed, no SDK configured (the global no-op
  providers): what an application that does not use OpenTelemetry pays;
- `sdk`: an SDK tracer provider with a batch processor and an in-memory
  exporter, and an SDK meter provider with an in-memory reader.

The ratios to `none` go in their own table.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bench_db import Databases, async_saver, sync_saver
from bench_graphs import Recording, config, replay
from bench_ops import OpsData, ops_data
from bench_report import Stat
from bench_timing import QUICK, Plan, Results, atimed, log, ms, timed
from psycopg.pq import TransactionStatus

import pgcheckpoint.telemetry.config as telemetry_module
from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.drivers.oprun import OpRun
from pgcheckpoint.ops import Op, Row, Stmt
from pgcheckpoint.telemetry.config import Telemetry, observe

KINDS = ("none", "api", "sdk")


def run_telemetry(
    dbs: Databases, plan: Plan, modes: Sequence[str], recording: Recording, results: Results
) -> None:
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        results.notes.append("telemetry: skipped, opentelemetry-sdk is not installed")
        return
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        results.notes.append("telemetry: skipped, a global tracer provider is set")
        return
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    sdk = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)

    dsn = dbs.fresh("ours", "telemetry")
    with sync_saver("ours", dsn) as saver:
        for turn in plan.ops_turns:
            replay(saver, recording.upto(turn), f"chat{turn}")
    dbs.analyze(dsn)
    count = plan.samples + plan.warmup
    try:
        for mode in modes:
            data = {
                (turn, kind): ops_data(recording, turn, f"{mode}-{kind}", count)
                for turn in plan.ops_turns
                for kind in KINDS
            }
            if mode == "sync":
                with sync_saver("ours", dsn) as base:
                    savers = _with_telemetry(base, sdk)
                    for turn in plan.ops_turns:
                        _rows(results, mode, turn, _sync_turn(savers, plan, turn, data))
            else:
                asyncio.run(_async(dsn, plan, data, sdk, results))
            log(f"telemetry: {mode} done, {len(exporter.get_finished_spans())} spans so far")
        overhead = _overhead(sdk, calls=2000 if plan is QUICK else 10000)
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
        dbs.drop(dsn)
    results.extra["telemetry_overhead_us"] = overhead
    _summary(results)


def _with_telemetry(base: Any, sdk: Telemetry) -> dict[str, Any]:
    """The three savers over the pool of `base` (`none` and `api` are one saver)."""
    cls = AsyncPostgresSaver if isinstance(base, AsyncPostgresSaver) else PostgresSaver
    return {"none": base, "api": base, "sdk": cls(base.conn, telemetry=sdk)}


def _hidden(kind: str, call: Callable[[], Any]) -> Any:
    # `none` runs as if `import opentelemetry` had failed: two stores of a global
    saved = telemetry_module._otel_module()
    if kind == "none":
        telemetry_module._OTEL_MODULE = None
    try:
        return call()
    finally:
        telemetry_module._OTEL_MODULE = saved


def _work(saver: Any, d: OpsData, latest: Any, by_id: Any) -> dict[str, Callable[[int], Any]]:
    return {
        "get_tuple latest": lambda i: saver.get_tuple(latest),
        "get_tuple by id": lambda i: saver.get_tuple(by_id),
        "list(limit=10)": lambda i: list(saver.list(latest, limit=10)),
        "put_writes": lambda i: saver.put_writes(*d.writes[i]),
        "put": lambda i: saver.put(*d.puts[i]),
    }


def _sync_turn(
    savers: dict[str, Any], plan: Plan, turn: int, data: dict[tuple[int, str], OpsData]
) -> dict[str, dict[str, list[float]]]:
    d0 = data[(turn, "none")]
    latest, by_id = config(f"chat{turn}"), config(f"chat{turn}", d0.head_id)
    work = {k: _work(savers[k], data[(turn, k)], latest, by_id) for k in KINDS}
    args = (KINDS, plan.samples, plan.warmup, plan.block)
    return {
        op: timed(*args, lambda k, i, op=op: _hidden(k, lambda: work[k][op](i)))
        for op in work["none"]
    }


async def _async(
    dsn: str,
    plan: Plan,
    data: dict[tuple[int, str], OpsData],
    sdk: Telemetry,
    results: Results,
) -> None:
    async with async_saver("ours", dsn) as base:
        savers = _with_telemetry(base, sdk)
        for turn in plan.ops_turns:
            _rows(results, "async", turn, await _async_turn(savers, plan, turn, data))


async def _async_turn(
    savers: dict[str, Any], plan: Plan, turn: int, data: dict[tuple[int, str], OpsData]
) -> dict[str, dict[str, list[float]]]:
    d0 = data[(turn, "none")]
    latest, by_id = config(f"chat{turn}"), config(f"chat{turn}", d0.head_id)
    work = {k: _awork(savers[k], data[(turn, k)], latest, by_id) for k in KINDS}
    args = (KINDS, plan.samples, plan.warmup, plan.block)

    async def call(op: str, kind: str, i: int) -> Any:
        saved = telemetry_module._otel_module()
        if kind == "none":
            telemetry_module._OTEL_MODULE = None
        try:
            return await work[kind][op](i)
        finally:
            telemetry_module._OTEL_MODULE = saved

    return {op: await atimed(*args, lambda k, i, op=op: call(op, k, i)) for op in work["none"]}


def _awork(
    saver: Any, d: OpsData, latest: Any, by_id: Any
) -> dict[str, Callable[[int], Awaitable[Any]]]:
    async def listing() -> list[Any]:
        return [t async for t in saver.alist(latest, limit=10)]

    return {
        "get_tuple latest": lambda i: saver.aget_tuple(latest),
        "get_tuple by id": lambda i: saver.aget_tuple(by_id),
        "list(limit=10)": lambda i: listing(),
        "put_writes": lambda i: saver.aput_writes(*d.writes[i]),
        "put": lambda i: saver.aput(*d.puts[i]),
    }


def _rows(results: Results, mode: str, turn: int, times: dict[str, dict[str, list[float]]]) -> None:
    for op, by_kind in times.items():
        stats = {k: Stat.of(ms(by_kind[k])) for k in KINDS}
        results.telemetry.append(
            {
                "operation": f"{op} @ turn {turn}",
                "mode": mode,
                **{f"{k}_p50_ms": stats[k].p50 for k in KINDS},
                **{f"{k}_p95_ms": stats[k].p95 for k in KINDS},
                "api_ratio": stats["api"].p50 / stats["none"].p50,
                "sdk_ratio": stats["sdk"].p50 / stats["none"].p50,
            }
        )


# -- the cost of the calls alone, without I/O -----------------------------------------


class _Info:
    dbname, host, port = "bench", "127.0.0.1", 5432
    transaction_status = TransactionStatus.IDLE


class _Conn:
    """What `Activity.connected` reads of a connection."""

    info = _Info()
    autocommit = True


_ROWS = [{"checkpoint": b"x" * 2048, "type": "msgpack", "checkpoint_id": "c1"}]


def _canned_op() -> Op[list[Row]]:
    """Two statements, a put's worth of bytes out and a checkpoint's back."""
    yield Stmt("get_latest_checkpoint", {"thread_id": "t1", "checkpoint_ns": ""}, fetch=True)
    rows = yield Stmt("put_checkpoint", {"thread_id": "t1", "checkpoint": b"y" * 2048}, fetch=True)
    return rows


def _drive(saver: Any, observed: bool) -> None:
    # what a driver does around an op, with canned rows instead of a server
    op = _canned_op()
    if not observed:
        run = OpRun(op)
        with contextlib.suppress(StopIteration):
            while True:
                run.send(_ROWS)
        return
    with observe(saver, op) as activity:
        run = OpRun(op, activity=activity)
        activity.connected(_Conn(), atomic=False, pipelined=False)
        with contextlib.suppress(StopIteration):
            while True:
                run.send(_ROWS)


def _overhead(sdk: Telemetry, calls: int) -> dict[str, float]:
    """CPU microseconds per op that the telemetry calls add, for each kind, best of 5 rounds."""
    saver = PostgresSaver.__new__(PostgresSaver)  # only `telemetry` and `schema` are read
    saver.schema = "public"
    best: dict[str, float] = {}
    for kind in ("bare", *KINDS):
        saver.telemetry = sdk if kind == "sdk" else telemetry_module.DEFAULT_TELEMETRY
        drive = functools.partial(_drive, saver, kind != "bare")
        rounds = []
        for _ in range(5):
            t0 = time.process_time()  # CPU time: what waiting for a busy core adds is not ours
            for _ in range(calls):
                _hidden(kind, drive)
            rounds.append((time.process_time() - t0) / calls * 1e6)
        best[kind] = min(rounds)
    return {kind: best[kind] - best["bare"] for kind in KINDS}


def _summary(results: Results) -> None:
    rows = results.telemetry
    if not rows:
        return
    overhead = results.extra["telemetry_overhead_us"]
    fastest = min(r["none_p50_ms"] for r in rows) * 1000
    results.notes.append(
        "telemetry, the calls alone (an op of two statements driven on canned rows, CPU "
        f"time, best of 5 rounds): {overhead['none']:.2f} us per op as without opentelemetry, "
        f"{overhead['api']:.2f} us with its API and no SDK, {overhead['sdk']:.1f} us with "
        f"the SDK; the fastest call above takes {fastest:.0f} us, so without an SDK "
        f"telemetry is {100 * overhead['api'] / fastest:.2f}% of it"
    )
    for kind, what in (("api", "the API and no SDK"), ("sdk", "the SDK and an in-memory exporter")):
        ratios = [r[f"{kind}_ratio"] for r in rows]
        product = 1.0
        for ratio in ratios:
            product *= ratio
        mean = product ** (1 / len(ratios))
        extra = sorted(r[f"{kind}_p50_ms"] - r["none_p50_ms"] for r in rows)
        results.notes.append(
            f"telemetry with {what}: p50 / p50 without opentelemetry = {mean:.3f} "
            f"(geometric mean of {len(ratios)} ops), {min(ratios):.3f} to {max(ratios):.3f}; "
            f"median extra {1000 * extra[len(extra) // 2]:.0f} us per call"
        )

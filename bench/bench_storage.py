"""The storage workload: table sizes after a long chat, and DeltaChannel `get_state`.

The chat is also stored by pgcheckpoint with `EncryptedSerde`: as it is by
default (no compression before encryption, which would let the size of a
value tell what it repeats) and with `compress=True`, next to the plain size.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from bench_db import NOTHING_CACHED, SAVERS, Databases, async_saver, sync_saver
from bench_graphs import Recording, chat_graph, config, replay, snapshot_cycle
from bench_report import Row, Stat
from bench_timing import ZERO_NOTE, Plan, Results, atimed, log, row, timed
from bench_wire import WireTrace

MIB = 1024 * 1024


def run_storage(
    dbs: Databases,
    plan: Plan,
    modes: Sequence[str],
    recordings: dict[bool, Recording],
    results: Results,
    kinds: Sequence[str] = SAVERS,
) -> None:
    delta_dsns: dict[str, str] = {}
    for delta, recording in recordings.items():
        label = "DeltaChannel" if delta else "plain add_messages"
        sizes: dict[str, dict[str, int]] = {}
        replay_s: dict[str, float] = {}
        for kind in kinds:
            dsn = dbs.fresh(kind, "delta" if delta else "plain")
            with sync_saver(kind, dsn) as saver:
                t0 = time.perf_counter()
                replay(saver, recording.calls, "chat")
                replay_s[kind] = time.perf_counter() - t0
                _check_state(saver, recording, kind)
            sizes[kind] = dbs.storage_bytes(dsn, kind)
            dbs.analyze(dsn)
            if delta:
                delta_dsns[kind] = dsn
            else:
                dbs.drop(dsn)
        total = {k: sum(v.values()) / MIB for k, v in sizes.items()}
        for ours in [k for k in ("ours", NOTHING_CACHED) if k in kinds]:
            results.rows.append(
                Row(
                    "storage",
                    f"storage after a {recording.turns}-turn chat, {label}",
                    "-",
                    "MiB",
                    Stat(total[ours]),
                    Stat(total["official"]),
                    target=None if delta else 0.1,
                    note=ZERO_NOTE if ours == NOTHING_CACHED else "",
                    extra={"tables_bytes": sizes, "replay_seconds": replay_s},
                )
            )
        if "ours" in kinds:
            _encrypted_storage(dbs, recording, label, total, results)
        log(
            f"storage: {label} replayed ({replay_s['ours']:.1f} s ours, "
            f"{replay_s['official']:.1f} s official)"
        )
    if True in recordings:
        _delta_get_state(dbs, plan, modes, recordings[True], delta_dsns, results)
    for dsn in delta_dsns.values():
        dbs.drop(dsn)


def _encrypted_storage(
    dbs: Databases, recording: Recording, label: str, plain: dict[str, float], results: Results
) -> None:
    """The chat stored encrypted: by default (no compression) and with compress=True."""
    from pgcheckpoint import EncryptedSerde

    sizes: dict[str, float] = {}
    for name, compress in (("encrypted", False), ("encrypted, compress=True", True)):
        serde = EncryptedSerde(keys={"bench": bytes(range(32))}, compress=compress)
        dsn = dbs.fresh("ours", "encrypted")
        try:
            with sync_saver("ours", dsn, serde=serde) as saver:
                replay(saver, recording.calls, "chat")
                _check_state(saver, recording, "ours")
            sizes[name] = sum(dbs.storage_bytes(dsn, "ours").values()) / MIB
        finally:
            dbs.drop(dsn)
        results.rows.append(
            Row(
                "storage",
                f"storage after a {recording.turns}-turn chat, {label}, {name}",
                "-",
                "MiB",
                Stat(sizes[name]),
                Stat(plain["official"]),
                note=f"{sizes[name] / plain['ours']:.2f}x pgcheckpoint's plain size",
            )
        )
    results.notes.append(
        f"{label}: pgcheckpoint stores the {recording.turns}-turn chat in "
        f"{plain['ours']:.2f} MiB plain, {sizes['encrypted']:.2f} MiB encrypted "
        f"({sizes['encrypted'] / plain['ours']:.2f}x; no compression before encryption, "
        f"the default), {sizes['encrypted, compress=True']:.2f} MiB encrypted with "
        "compress=True; the official saver stores it plain (encrypting "
        "adds 28 bytes of nonce and tag to each value)"
    )
    log(f"storage: {label} replayed encrypted")


def _check_state(saver: Any, recording: Recording, kind: str) -> None:
    """The replayed thread reads back as the recorded run ended; a bench of wrong answers
    would mean nothing."""
    graph = chat_graph(saver, delta=recording.delta)
    got = graph.get_state(config("chat")).values["messages"]
    want = recording.final_messages
    if [(m.id, m.content) for m in got] != [(m.id, m.content) for m in want]:
        raise RuntimeError(f"{kind} saver read back a different chat than was recorded")


def _delta_get_state(
    dbs: Databases,
    plan: Plan,
    modes: Sequence[str],
    recording: Recording,
    dsns: dict[str, str],
    results: Results,
) -> None:
    best, worst = snapshot_cycle(recording)
    cases = {"best case": best, "worst case": worst}
    for mode in modes:
        if mode == "sync":
            times = _get_state_sync(dsns, plan, cases)
        else:
            times = asyncio.run(_get_state_async(dsns, plan, cases))
        for case, t in times.items():
            _delta_row(results, recording, mode, case, t)
        log(f"DeltaChannel get_state: {mode} done")
    for kind in SAVERS:
        trace = WireTrace()
        try:
            with sync_saver(kind, dsns[kind], size=1, configure=trace.configure) as saver:
                graph = chat_graph(saver, delta=True)
                with trace.measure() as count:
                    graph.get_state(config("chat", worst))
                results.add_wire("DeltaChannel get_state, worst case", kind, count.per_call())
        finally:
            trace.close()


def _get_state_sync(
    dsns: dict[str, str], plan: Plan, cases: dict[str, str]
) -> dict[str, dict[str, list[float]]]:
    with contextlib.ExitStack() as stack:
        graphs = {
            k: chat_graph(stack.enter_context(sync_saver(k, dsns[k])), delta=True) for k in dsns
        }
        out = {}
        for case, cid in cases.items():
            conf = config("chat", cid)
            states = [
                [(m.id, m.content) for m in graphs[k].get_state(conf).values["messages"]]
                for k in dsns
            ]
            if any(state != states[0] for state in states):
                raise RuntimeError(f"the savers disagree on get_state in the {case}")
            out[case] = timed(
                tuple(dsns),
                plan.get_state_samples,
                plan.warmup,
                2,
                lambda k, i, c=conf: graphs[k].get_state(c),
            )
        return out


async def _get_state_async(
    dsns: dict[str, str], plan: Plan, cases: dict[str, str]
) -> dict[str, dict[str, list[float]]]:
    async with contextlib.AsyncExitStack() as stack:
        graphs = {
            k: chat_graph(await stack.enter_async_context(async_saver(k, dsns[k])), delta=True)
            for k in dsns
        }
        out = {}
        for case, cid in cases.items():
            conf = config("chat", cid)
            out[case] = await atimed(
                tuple(dsns),
                plan.get_state_samples,
                plan.warmup,
                2,
                lambda k, i, c=conf: graphs[k].aget_state(c),
            )
        return out


def _delta_row(
    results: Results, recording: Recording, mode: str, case: str, times: dict[str, list[float]]
) -> None:
    results.rows += row(
        "delta",
        f"get_state @ turn {recording.turns}, DeltaChannel, {case}",
        mode,
        times,
        target=0.5 if case == "worst case" else None,
    )

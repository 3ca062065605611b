"""The live DeltaChannel chat: a compiled graph run turn by turn on each saver.

The storage section replays a recorded chat and then runs ANALYZE, as
autovacuum would have done on a database that has been live for a while. Here
nothing is replayed or analyzed: the graph runs its turns on both savers (each
turn on one saver, then the other, in alternating order), as users run it, so
the tables hold only what autovacuum happened to analyze on its own (usually
nothing within the run). Then, at the worst case of the snapshot cycle (the
checkpoint with the most writes since its snapshot), `get_state` and
`get_delta_channel_history` alone, each timed twice: on a fresh pool (the first
two calls of each connection, in Postgres' custom plans) and in the steady
state (every connection past the five custom plans after which Postgres may
settle on a generic plan).

Every call also reports the time spent in psycopg's `execute` (sending, the
server's planning and execution, the network: "server" in the notes), the
rest being client CPU (serialisation, the graph, copies).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from bench_db import POOL_SIZE, SAVERS, Databases, sync_saver
from bench_graphs import chat_graph, config, human
from bench_report import Row, Stat
from bench_timing import Clock, Plan, Results, log, ms

# the size of a message in the chat users reported (~330 characters)
LIVE_MESSAGE_BYTES = 330
LAST_TURNS = 50


@contextlib.contextmanager
def _timed_saver(kind: str, dsn: str) -> Iterator[tuple[Any, Clock]]:
    clock = Clock()
    with sync_saver(kind, dsn, configure=clock.configure) as saver:
        yield saver, clock


def _sample(call: Callable[[], object], clock: Clock) -> tuple[float, float]:
    before = clock.seconds
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0, clock.seconds - before


def _worst_case(saver: Any) -> str:
    """The checkpoint of the newest snapshot cycle with the most writes since its snapshot."""

    def since(t: Any) -> int:
        counters = t.metadata.get("counters_since_delta_snapshot") or {}
        value = counters.get("messages") if isinstance(counters, dict) else None
        return int(value[0]) if value else 0

    recent = list(saver.list(config("chat"), limit=400))
    return str(max(recent, key=since).config["configurable"]["checkpoint_id"])


def run_live(dbs: Databases, plan: Plan, modes: Sequence[str], results: Results) -> None:
    if "sync" not in modes:
        return
    turns = plan.chat_turns
    dsns = {kind: dbs.fresh(kind, "live") for kind in SAVERS}
    try:
        per_turn = _chat(dsns, turns)
        _row(
            results,
            f"DeltaChannel chat, live, per turn (last {LAST_TURNS} of {turns})",
            per_turn,
            target=0.8,
        )
        log(f"live: {turns} turns run on each saver")
        with contextlib.ExitStack() as stack:
            savers = {k: stack.enter_context(_timed_saver(k, dsns[k])) for k in SAVERS}
            worst = {k: _worst_case(savers[k][0]) for k in SAVERS}
        for name, make in _calls(worst).items():
            first, steady = _first_and_steady(dsns, plan, make)
            _row(results, f"{name} @ turn {turns}, DeltaChannel, worst case, fresh pool", first)
            _row(
                results,
                f"{name} @ turn {turns}, DeltaChannel, worst case, steady state",
                steady,
                target=0.5 if name == "get_state" else None,
            )
        log("live: get_state timed")
    finally:
        for dsn in dsns.values():
            dbs.drop(dsn)


def _chat(dsns: dict[str, str], turns: int) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in SAVERS}
    with contextlib.ExitStack() as stack:
        savers = {k: stack.enter_context(_timed_saver(k, dsns[k])) for k in SAVERS}
        graphs = {
            k: chat_graph(s, delta=True, message_bytes=LIVE_MESSAGE_BYTES)
            for k, (s, _) in savers.items()
        }
        for turn in range(1, turns + 1):
            order = SAVERS if turn % 2 else tuple(reversed(SAVERS))
            for kind in order:
                message = {"messages": [human(turn, LIVE_MESSAGE_BYTES)]}
                sample = _sample(
                    lambda k=kind, m=message: graphs[k].invoke(m, config("chat")),
                    savers[kind][1],
                )
                out[kind].append(sample)
    return {k: v[-LAST_TURNS:] for k, v in out.items()}


def _calls(worst: dict[str, str]) -> dict[str, Callable[[str, Any], Callable[[], object]]]:
    def get_state(kind: str, saver: Any) -> Callable[[], object]:
        graph = chat_graph(saver, delta=True, message_bytes=LIVE_MESSAGE_BYTES)
        conf = config("chat", worst[kind])
        return lambda: graph.get_state(conf)

    def history(kind: str, saver: Any) -> Callable[[], object]:
        conf = config("chat", worst[kind])
        return lambda: saver.get_delta_channel_history(config=conf, channels=["messages"])

    return {"get_state": get_state, "get_delta_channel_history": history}


def _first_and_steady(
    dsns: dict[str, str], plan: Plan, make: Callable[[str, Any], Callable[[], object]]
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, list[tuple[float, float]]]]:
    """Calls on fresh pools (each connection's first two), then past the custom plans.

    The pool hands its connections out in turn, so a run of POOL_SIZE calls
    gives each connection one.
    """
    first: dict[str, list[tuple[float, float]]] = {k: [] for k in SAVERS}
    steady: dict[str, list[tuple[float, float]]] = {k: [] for k in SAVERS}
    rounds = max(2, plan.get_state_samples // POOL_SIZE)
    for r in range(rounds):
        order = SAVERS if r % 2 else tuple(reversed(SAVERS))
        for kind in order:
            with _timed_saver(kind, dsns[kind]) as (saver, clock):
                call = make(kind, saver)
                first[kind] += [_sample(call, clock) for _ in range(2 * POOL_SIZE)]
                for _ in range(5 * POOL_SIZE):
                    call()
                steady[kind] += [_sample(call, clock) for _ in range(POOL_SIZE)]
    return first, steady


def _row(
    results: Results,
    name: str,
    samples: dict[str, list[tuple[float, float]]],
    *,
    target: float | None = None,
) -> None:
    def p50(kind: str, part: int) -> float:
        return statistics.median(ms([s[part] for s in samples[kind]]))

    note = "in execute (server, network) p50: " + ", ".join(
        f"{'pgcheckpoint' if k == 'ours' else k} {p50(k, 1):.2f} ms" for k in SAVERS
    )
    results.rows.append(
        Row(
            "live",
            name,
            "sync",
            "ms",
            Stat.of(ms([s[0] for s in samples["ours"]])),
            Stat.of(ms([s[0] for s in samples["official"]])),
            target=target,
            note=note,
            extra={k: {"execute_p50_ms": p50(k, 1), "total_p50_ms": p50(k, 0)} for k in SAVERS},
        )
    )

"""Worker processes for the thread-lock fault tests (imported in the children).

Every worker opens its own saver (sync or async, a pool or one connection),
compiles the same real LangGraph graph, waits at a barrier with the others and
resumes the one thread. The graph's only node asks with `interrupt()`, records
a side effect in the test database (which count it saw, who held the lock),
may wait for the test's signal or hang until killed, then loops back to ask
again. Outcomes go back to the test through a queue.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass
from typing import Any, TypedDict

import psycopg
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver, ThreadBusyError
from pgcheckpoint.core.locks import thread_lock_key

VARIANTS = ("sync-conn", "sync-pool", "async-conn", "async-pool")
# Small pools: 16 workers share one server with the rest of the suite.
POOL = {"min_size": 1, "max_size": 3, "timeout": 60}
SIGNAL_WAIT = 120.0

EFFECTS_DDL = """
CREATE TABLE lock_effects (
    worker int NOT NULL,
    seen int NOT NULL,
    answer text NOT NULL,
    holder_pid int,
    entered timestamptz NOT NULL DEFAULT clock_timestamp(),
    left_at timestamptz
)
"""


class State(TypedDict):
    count: int


@dataclass(frozen=True)
class Job:
    """What one worker does."""

    dsn: str
    thread_id: str
    index: int
    variant: str
    timeout: float | None
    hang: bool = False


def build_graph(saver: Any, step: Any) -> Any:
    """START -> step -> step -> ...; every step first asks with interrupt()."""
    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", "step")
    return builder.compile(checkpointer=saver)


def _holder_sql() -> str:
    return (
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
        " AND (classid::int8 << 32 | objid::int8) = %s"
    )


def record_entry(job: Job, seen: int, answer: Any) -> None:
    """The node's side effect: one row per node run, with who held the lock."""
    with psycopg.connect(job.dsn, autocommit=True) as conn:
        row = conn.execute(_holder_sql(), (thread_lock_key(job.thread_id),)).fetchone()
        conn.execute(
            "INSERT INTO lock_effects (worker, seen, answer, holder_pid) VALUES (%s, %s, %s, %s)",
            (job.index, seen, str(answer), row[0] if row else None),
        )


def record_exit(job: Job) -> None:
    with psycopg.connect(job.dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE lock_effects SET left_at = clock_timestamp() WHERE worker = %s", (job.index,)
        )


def _after_entry(job: Job, release: Any) -> None:
    if job.hang:
        time.sleep(3600)  # until the test kills this process
    if release is not None:
        release.wait(SIGNAL_WAIT)


def run_worker(job: Job, barrier: Any, release: Any, results: Any) -> None:
    """Resume the thread once; put (index, outcome, detail) on `results`."""
    try:
        if job.variant.startswith("async"):
            outcome = asyncio.run(_run_async(job, barrier, release))
        else:
            outcome = _run_sync(job, barrier, release)
    except ThreadBusyError as exc:
        outcome = ("busy", {"holder_pid": exc.holder_pid, "message": str(exc)})
    except BaseException:
        outcome = ("error", traceback.format_exc())
    results.put((job.index, *outcome))


def _run_sync(job: Job, barrier: Any, release: Any) -> tuple[str, Any]:
    def step(state: State) -> State:
        answer = interrupt({"count": state["count"]})
        record_entry(job, state["count"], answer)
        _after_entry(job, release)
        record_exit(job)
        return {"count": state["count"] + 1}

    pool = POOL if job.variant.endswith("pool") else False
    with PostgresSaver.from_conn_string(job.dsn, pool=pool) as saver:
        graph = build_graph(saver, step)
        config = {"configurable": {"thread_id": job.thread_id}}
        if barrier is not None:
            barrier.wait()
        result = saver.resume(graph, config, f"answer {job.index}", timeout=job.timeout)
    return "ran", {"count": result["count"]}


async def _run_async(job: Job, barrier: Any, release: Any) -> tuple[str, Any]:
    async def step(state: State) -> State:
        answer = interrupt({"count": state["count"]})
        await asyncio.to_thread(record_entry, job, state["count"], answer)
        await asyncio.to_thread(_after_entry, job, release)
        await asyncio.to_thread(record_exit, job)
        return {"count": state["count"] + 1}

    pool = POOL if job.variant.endswith("pool") else False
    async with AsyncPostgresSaver.from_conn_string(job.dsn, pool=pool) as saver:
        graph = build_graph(saver, step)
        config = {"configurable": {"thread_id": job.thread_id}}
        if barrier is not None:
            await asyncio.to_thread(barrier.wait)
        result = await saver.aresume(graph, config, f"answer {job.index}", timeout=job.timeout)
    return "ran", {"count": result["count"]}

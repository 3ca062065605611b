"""Thread locks across real processes: double resumes, queued resumes, a killed holder.

Workers (`lock_workers.py`) are separate processes, each with its own saver,
mixing the four drivers (sync and async, a pool and one connection) so that
they also prove that every driver takes the same lock. They start from a
forkserver that imported LangGraph once: like spawn, a child never inherits the
test process's threads, pools or sockets, but it does not pay LangGraph's
seconds of imports sixteen times over on two shared cores.

A pgbouncer in transaction mode, when one is installed, checks that behind a
pooler the lock lives in a transaction that pins its server session: it
guards the thread while other clients use the pool, and its release always
reaches the session that took it.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import queue
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.context import ForkServerContext
from typing import Any

import psycopg
import pytest
from conftest import transaction_pooler
from psycopg.rows import dict_row

from pgcheckpoint import PostgresSaver, ThreadBusyError

from . import lock_workers
from .lock_workers import EFFECTS_DDL, VARIANTS, Job, State, build_graph

WORKERS = 16
WAIT = 120.0  # an upper bound for a step that should take well under a second
PRELOAD = ["psycopg", "psycopg_pool", "langgraph.graph", "langgraph.types", "pgcheckpoint"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def mp() -> ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    # Only takes effect if nothing in this test process started the forkserver yet.
    # Modules from site-packages: before 3.12 the forkserver ignores the test's
    # sys.path, so `lock_workers` itself is imported by each child (it is small).
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _ask_first(state: State) -> State:
    from langgraph.types import interrupt

    interrupt({"count": state["count"]})
    raise AssertionError("the first invoke stops at the interrupt")


def interrupted_thread(dsn: str) -> str:
    """A new thread whose graph waits at its first interrupt, and the effects table."""
    thread_id = f"поток-{uuid.uuid4()}-✓"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EFFECTS_DDL)
    with PostgresSaver.from_conn_string(dsn) as saver:
        graph = build_graph(saver, _ask_first)
        out = graph.invoke({"count": 0}, {"configurable": {"thread_id": thread_id}})
    assert out["__interrupt__"][0].value == {"count": 0}
    return thread_id


def effects(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute("SELECT * FROM lock_effects ORDER BY entered").fetchall()


def thread_state(dsn: str, thread_id: str) -> tuple[int, list[Any]]:
    """The thread's count and its checkpoints, newest first."""
    with PostgresSaver.from_conn_string(dsn) as saver:
        config = {"configurable": {"thread_id": thread_id}}
        latest = saver.get_tuple(config)
        assert latest is not None
        return latest.checkpoint["channel_values"]["count"], list(saver.list(config))


def collect(results: Any, count: int, deadline: float) -> list[tuple[Any, ...]]:
    got: list[tuple[Any, ...]] = []
    while len(got) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"only {len(got)} of {count} workers reported: {got}")
        with contextlib.suppress(queue.Empty):
            got.append(results.get(timeout=min(remaining, 1.0)))
    return got


@contextlib.contextmanager
def started(
    mp: ForkServerContext, jobs: list[Job], barrier: Any, release: Any, results: Any
) -> Iterator[list[Any]]:
    procs = [
        mp.Process(target=lock_workers.run_worker, args=(job, barrier, release, results))
        for job in jobs
    ]
    for proc in procs:
        proc.start()
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        for proc in procs:
            proc.join(WAIT)


def test_sixteen_double_resumes_run_the_node_once(mp: ForkServerContext, db_dsn: str) -> None:
    thread_id = interrupted_thread(db_dsn)
    barrier = mp.Barrier(WORKERS, timeout=WAIT)
    release = mp.Event()
    results = mp.Queue()
    jobs = [Job(db_dsn, thread_id, i, VARIANTS[i % len(VARIANTS)], 0) for i in range(WORKERS)]
    deadline = time.monotonic() + WAIT
    with started(mp, jobs, barrier, release, results):
        # the winner waits inside the node until every other worker has failed
        losers = collect(results, WORKERS - 1, deadline)
        assert [r for r in losers if r[1] != "busy"] == []
        release.set()
        (winner,) = collect(results, 1, deadline)

    assert winner[1] == "ran", winner
    assert winner[2] == {"count": 1}
    (effect,) = effects(db_dsn)  # exactly one run of the node
    assert effect["worker"] == winner[0]
    assert effect["seen"] == 0
    assert effect["answer"] == f"answer {winner[0]}"
    # every loser was told which backend holds the lock: the winner's
    assert effect["holder_pid"] is not None
    assert {r[2]["holder_pid"] for r in losers} == {effect["holder_pid"]}
    assert all(repr(thread_id) in r[2]["message"] for r in losers)
    assert {VARIANTS[r[0] % len(VARIANTS)] for r in losers} == set(VARIANTS)
    count, _ = thread_state(db_dsn, thread_id)
    assert count == 1


def test_sixteen_queued_resumes_run_one_after_another(mp: ForkServerContext, db_dsn: str) -> None:
    thread_id = interrupted_thread(db_dsn)
    barrier = mp.Barrier(WORKERS, timeout=WAIT)
    results = mp.Queue()
    jobs = [Job(db_dsn, thread_id, i, VARIANTS[i % len(VARIANTS)], None) for i in range(WORKERS)]
    with started(mp, jobs, barrier, None, results):
        outcomes = collect(results, WORKERS, time.monotonic() + WAIT)

    assert [o for o in outcomes if o[1] != "ran"] == []
    rows = effects(db_dsn)
    assert len(rows) == WORKERS
    assert {r["worker"] for r in rows} == set(range(WORKERS))
    # each run started from the checkpoint the previous one left
    assert [r["seen"] for r in rows] == list(range(WORKERS))
    assert sorted(o[2]["count"] for o in outcomes) == list(range(1, WORKERS + 1))
    # and never while another was inside the node
    for before, after in itertools.pairwise(rows):
        assert before["left_at"] is not None
        assert before["left_at"] <= after["entered"]
    count, history = thread_state(db_dsn, thread_id)
    assert count == WORKERS
    parents = [t.parent_config["configurable"]["checkpoint_id"] for t in history if t.parent_config]
    assert len(parents) == len(set(parents)), "two checkpoints share a parent: the thread forked"


def _wait_for_entry(dsn: str, worker: int) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = [r for r in effects(dsn) if r["worker"] == worker]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"worker {worker} never entered the node")


@pytest.mark.parametrize("holder_variant", VARIANTS)
def test_holder_killed_mid_node_frees_the_thread(
    mp: ForkServerContext, db_dsn: str, holder_variant: str
) -> None:
    thread_id = interrupted_thread(db_dsn)
    holder = Job(db_dsn, thread_id, 0, holder_variant, 0, hang=True)
    with started(mp, [holder], None, None, mp.Queue()) as (proc,):
        entry = _wait_for_entry(db_dsn, 0)
        with (
            PostgresSaver.from_conn_string(db_dsn) as saver,
            pytest.raises(ThreadBusyError) as busy,
            saver.lock_thread(thread_id),
        ):
            pass
        assert busy.value.holder_pid == entry["holder_pid"]
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(WAIT)
    assert proc.exitcode == -signal.SIGKILL

    resumer_variant = VARIANTS[(VARIANTS.index(holder_variant) + 1) % len(VARIANTS)]
    resumer = Job(db_dsn, thread_id, 1, resumer_variant, WAIT)
    results = mp.Queue()
    with started(mp, [resumer], None, None, results):
        (outcome,) = collect(results, 1, time.monotonic() + WAIT)

    assert outcome[1] == "ran", outcome
    assert outcome[2] == {"count": 1}
    rows = {r["worker"]: r for r in effects(db_dsn)}
    assert rows[0]["left_at"] is None  # killed inside the node
    # the resumer started from the last checkpoint: the one the killed run started from
    assert rows[1]["seen"] == 0
    assert rows[1]["answer"] == "answer 1"
    count, _ = thread_state(db_dsn, thread_id)
    assert count == 1


# -- a pooler in transaction mode ----------------------------------------------------------


@pytest.fixture
def pgbouncer_dsn(db_dsn: str) -> Iterator[str]:
    """`db_dsn` through a pgbouncer in transaction mode with three server connections."""
    with transaction_pooler(db_dsn, pool_size=3) as dsn:
        yield dsn


def lock_holders(dsn: str, thread_id: str) -> list[int]:
    """The server sessions holding the thread's lock, as seen on a direct connection."""
    from pgcheckpoint.core.locks import thread_lock_key

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
            " AND (classid::int8 << 32 | objid::int8) = %s",
            [thread_lock_key(thread_id)],
        ).fetchall()
    return [pid for (pid,) in rows]


def test_behind_a_transaction_pooler_the_lock_guards_and_its_release_reaches_it(
    db_dsn: str, pgbouncer_dsn: str
) -> None:
    thread_id = f"bounced-{uuid.uuid4()}"
    with (
        psycopg.connect(pgbouncer_dsn, autocommit=True) as conn_a,
        psycopg.connect(pgbouncer_dsn, autocommit=True) as conn_b,
        psycopg.connect(pgbouncer_dsn, autocommit=True) as traffic,
        ThreadPoolExecutor(1) as pool,
    ):
        first, second = PostgresSaver(conn_a), PostgresSaver(conn_b)
        for _ in range(20):
            with first.lock_thread(thread_id) as lock:
                # a transaction pins the server session: the lock is that session's
                assert lock.in_transaction
                assert lock_holders(db_dsn, thread_id) == [lock.backend_pid]
                # other clients keep using the pool meanwhile, on other sessions
                for _ in range(5):
                    row = traffic.execute("SELECT pg_backend_pid()").fetchone()
                    assert row is not None and row[0] != lock.backend_pid
                with pytest.raises(ThreadBusyError) as busy, second.lock_thread(thread_id):
                    pytest.fail("two clients hold the lock of one thread")
                assert busy.value.holder_pid == lock.backend_pid
            # the release reached the session that took it: nobody holds the lock
            assert lock_holders(db_dsn, thread_id) == []
        # one that waits is let in the moment the block ends
        with first.lock_thread(thread_id):
            waiter = pool.submit(_lock_and_release, second, thread_id)
            time.sleep(0.2)
            assert not waiter.done()
        assert waiter.result(30) == "ran"
        assert lock_holders(db_dsn, thread_id) == []


def _lock_and_release(saver: PostgresSaver, thread_id: str) -> str:
    with saver.lock_thread(thread_id, timeout=30):
        return "ran"

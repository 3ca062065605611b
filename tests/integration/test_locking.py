"""`lock_thread` and `resume` on every driver and kind of connection.

"Another worker" is a plain psycopg session taking the same advisory lock,
which also pins the key derivation down: whatever holds the one-bigint lock
`thread_lock_key(thread_id, schema)` is the one runner of that thread. Runs
across real processes are in `tests/faults/test_locking.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypedDict

import psycopg
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from support.savers import Saver

from pgcheckpoint import (
    AsyncPostgresSaver,
    InvalidInputError,
    PoolTimeoutError,
    PostgresSaver,
    ThreadBusyError,
)
from pgcheckpoint.core.locks import ThreadLock, thread_lock_key

WAIT = 60.0  # a bound for what should take milliseconds; never asserted

# The lock has its own connection, so a pipeline saver locks as a plain one does;
# pipelines matter only where the graph saves checkpoints under the lock.
LOCK_VARIANTS = ["sync-conn", "sync-pool", "async-conn", "async-pool"]
ONE_PER_DRIVER = ["sync-conn", "async-conn"]
lock_variants = pytest.mark.parametrize("saver", LOCK_VARIANTS, indirect=True)
one_per_driver = pytest.mark.parametrize("saver", ONE_PER_DRIVER, indirect=True)

# Thread ids of every shape: the longest allowed (1,024 UTF-8 bytes, in 1-, 2- and
# 4-byte characters), ZWJ emoji, combining marks, bidi controls, separators,
# invisible characters, SQL, and the empty id.
ODD_THREAD_IDS = [
    "x" * 1024,
    "é" * 512,
    "🧵" * 256,
    "👩‍👩‍👧‍👦 family",
    "e\u0301",  # e + combining acute: not the same thread as "é"
    "\u00e9",
    "שלום עולם",
    "\u202etxt.exe",
    "line\u2028sep\u2029para",
    "\ufeffbom\u200bzwsp",
    "tab\there\nnewline\r",
    "'; SELECT pg_sleep(10); --",
    "%(key)s {schema}",
    " ",
    "",
]


# -- helpers ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def locked(saver: Saver, thread_id: str, **kwargs: Any) -> AsyncIterator[ThreadLock]:
    if isinstance(saver, AsyncPostgresSaver):
        async with saver.lock_thread(thread_id, **kwargs) as held:
            yield held
    else:
        with saver.lock_thread(thread_id, **kwargs) as held:
            yield held


async def resume(saver: Saver, graph: Any, thread_id: str, value: Any, **kwargs: Any) -> Any:
    config = {"configurable": {"thread_id": thread_id}}
    if isinstance(saver, AsyncPostgresSaver):
        return await saver.aresume(graph, config, value, **kwargs)
    return saver.resume(graph, config, value, **kwargs)


def lock_args(thread_id: str, schema: str = "public") -> tuple[int]:
    return (thread_lock_key(thread_id, schema),)


def holders(dsn: str, thread_id: str, *, granted: bool = True) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            # pg_locks shows every database's: a test elsewhere may lock the same id
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND (classid::int8 << 32 | objid::int8) = %s AND granted = %s",
            (*lock_args(thread_id), granted),
        ).fetchall()
    return [pid for (pid,) in rows]


def free(dsn: str, thread_id: str, schema: str = "public") -> bool:
    """Whether another session can take the thread's lock right now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(%s::int8)", lock_args(thread_id, schema))
        got = bool(row.fetchone()[0])  # type: ignore[index]
        if got:
            conn.execute("SELECT pg_advisory_unlock(%s::int8)", lock_args(thread_id, schema))
        return got


@contextlib.contextmanager
def held_elsewhere(dsn: str, thread_id: str) -> Iterator[psycopg.Connection[Any]]:
    """Another worker holding the thread's lock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s::int8)", lock_args(thread_id))
        yield conn


def release_once_waited_for(conn: psycopg.Connection[Any], dsn: str, thread_id: str) -> Any:
    """Unlock `conn`'s hold (from another OS thread) once a session queues for the lock."""

    def run() -> None:
        deadline = time.monotonic() + WAIT
        while not holders(dsn, thread_id, granted=False) and time.monotonic() < deadline:
            time.sleep(0.02)
        conn.execute("SELECT pg_advisory_unlock(%s::int8)", lock_args(thread_id))

    helper = threading.Thread(target=run, daemon=True)
    helper.start()
    return helper


class State(TypedDict):
    count: int


def looping_graph(saver: Saver, node: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("step", node)
    builder.add_edge(START, "step")
    builder.add_edge("step", "step")
    return builder.compile(checkpointer=saver)


async def start(graph: Any, thread_id: str) -> Any:
    config = {"configurable": {"thread_id": thread_id}}
    if isinstance(graph.checkpointer, AsyncPostgresSaver):
        return await graph.ainvoke({"count": 0}, config)
    return graph.invoke({"count": 0}, config)


def new_thread() -> str:
    return f"lock-{uuid.uuid4()}"


# -- the lock -----------------------------------------------------------------------


@lock_variants
async def test_lock_excludes_other_sessions_until_the_block_ends(saver: Saver, db_dsn: str) -> None:
    thread_id = new_thread()
    async with locked(saver, thread_id) as held:
        assert held.thread_id == thread_id
        assert held.key == thread_lock_key(thread_id, "public")
        assert holders(db_dsn, thread_id) == [held.backend_pid]
        assert not free(db_dsn, thread_id)
    assert holders(db_dsn, thread_id) == []
    assert free(db_dsn, thread_id)


@lock_variants
async def test_busy_thread_fails_at_once_naming_the_holder(saver: Saver, db_dsn: str) -> None:
    thread_id = new_thread()
    with held_elsewhere(db_dsn, thread_id) as other:
        other_pid = other.info.backend_pid
        with pytest.raises(ThreadBusyError) as busy:
            async with locked(saver, thread_id):
                pytest.fail("took a lock another session holds")
    assert busy.value.thread_id == thread_id
    assert busy.value.holder_pid == other_pid
    assert repr(thread_id) in str(busy.value)
    assert str(other_pid) in str(busy.value)


@lock_variants
async def test_timeout_gives_up_when_the_thread_stays_busy(saver: Saver, db_dsn: str) -> None:
    thread_id = new_thread()
    with held_elsewhere(db_dsn, thread_id) as other:
        with pytest.raises(ThreadBusyError, match="after waiting") as busy:
            async with locked(saver, thread_id, timeout=0.2):
                pytest.fail("took a lock another session holds")
        assert busy.value.holder_pid == other.info.backend_pid
        # the waiter left the queue with nothing held
        assert holders(db_dsn, thread_id, granted=False) == []
    assert free(db_dsn, thread_id)


@lock_variants
async def test_waiter_takes_the_lock_once_released(saver: Saver, db_dsn: str) -> None:
    for timeout in (None, WAIT):
        thread_id = new_thread()
        with held_elsewhere(db_dsn, thread_id) as other:
            helper = release_once_waited_for(other, db_dsn, thread_id)
            async with locked(saver, thread_id, timeout=timeout) as held:
                assert holders(db_dsn, thread_id) == [held.backend_pid]
            helper.join(WAIT)
        assert free(db_dsn, thread_id)


@lock_variants
async def test_lock_is_released_when_the_block_raises(saver: Saver, db_dsn: str) -> None:
    thread_id = new_thread()
    with pytest.raises(KeyError, match="from the block"):
        async with locked(saver, thread_id):
            raise KeyError("from the block")
    assert free(db_dsn, thread_id)
    async with locked(saver, thread_id):  # and it can be taken again
        assert not free(db_dsn, thread_id)
    assert free(db_dsn, thread_id)


@pytest.mark.parametrize("saver", ["async-conn", "async-pool"], indirect=True)
async def test_cancelled_waiter_leaves_nothing_behind(saver: Saver, db_dsn: str) -> None:
    thread_id = new_thread()
    with held_elsewhere(db_dsn, thread_id):
        waiter = asyncio.ensure_future(locked(saver, thread_id, timeout=None).__aenter__())
        deadline = time.monotonic() + WAIT
        while not holders(db_dsn, thread_id, granted=False) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    # the waiting session was cancelled or closed: it does not take the lock later
    deadline = time.monotonic() + WAIT
    while holders(db_dsn, thread_id) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert holders(db_dsn, thread_id) == []
    async with locked(saver, thread_id):
        pass


@lock_variants
async def test_nested_lock_of_the_same_thread_fails_instead_of_waiting(saver: Saver) -> None:
    thread_id, other_thread = new_thread(), new_thread()
    async with locked(saver, thread_id) as held:
        with pytest.raises(ThreadBusyError, match="already locked by this run") as nested:
            async with locked(saver, thread_id, timeout=None):
                pytest.fail("took the same lock twice")
        assert nested.value.holder_pid == held.backend_pid
        async with locked(saver, other_thread):  # another thread is fine
            pass
    async with locked(saver, thread_id):  # and after the block, so is this one
        pass


@lock_variants
async def test_lost_connection_frees_the_lock_and_is_logged(
    saver: Saver, db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    thread_id = new_thread()
    caplog.set_level(logging.WARNING, logger="pgcheckpoint")
    async with locked(saver, thread_id) as held:
        with psycopg.connect(db_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [held.backend_pid])
        deadline = time.monotonic() + WAIT
        while holders(db_dsn, thread_id) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert free(db_dsn, thread_id)  # the server freed it with the session
    (record,) = [r for r in caplog.records if "broke" in r.getMessage()]
    # the thread is withheld unless the saver's telemetry records ids
    assert "the lock of thread <withheld>" in record.getMessage()
    assert thread_id not in record.getMessage()
    assert (record.pgcheckpoint_operation, record.pgcheckpoint_statement) == (
        "lock_thread",
        "unlock_thread",
    )
    async with locked(saver, thread_id):  # a pool replaced the connection
        assert not free(db_dsn, thread_id)


@one_per_driver
async def test_same_thread_id_in_another_schema_is_another_lock(saver: Saver, db_dsn: str) -> None:
    thread_id = new_thread()
    assert thread_lock_key(thread_id, "public") != thread_lock_key(thread_id, "tenant_b")
    async with locked(saver, thread_id):
        assert free(db_dsn, thread_id, schema="tenant_b")
        with psycopg.connect(db_dsn) as conn:
            tenant = PostgresSaver(conn, schema="tenant_b")
            with tenant.lock_thread(thread_id) as held:
                assert held.key == thread_lock_key(thread_id, "tenant_b")


@lock_variants
async def test_thread_ids_of_any_shape(saver: Saver, db_dsn: str) -> None:
    keys = set()
    with psycopg.connect(db_dsn) as conn:
        for thread_id in ODD_THREAD_IDS:
            # the key, as the README tells to compute it in SQL
            (sql_key,) = conn.execute(
                "SELECT ('x' || left(encode(sha256(convert_to('pgcheckpoint/thread-lock',"
                " 'UTF8') || '\\x00'::bytea || convert_to(%s, 'UTF8') || '\\x00'::bytea"
                " || convert_to(%s, 'UTF8')), 'hex'), 16))::bit(64)::int8",
                ("public", thread_id),
            ).fetchone()  # type: ignore[misc]
            assert sql_key == thread_lock_key(thread_id)
            keys.add(sql_key)
            async with locked(saver, thread_id) as held:
                assert held.thread_id == thread_id
                assert holders(db_dsn, thread_id) == [held.backend_pid]
            assert free(db_dsn, thread_id)
    assert len(keys) == len(ODD_THREAD_IDS)
    # decomposed and precomposed "é" are two threads, locked at once
    async with locked(saver, "e\u0301"), locked(saver, "\u00e9"):
        pass


# -- pools ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def small_pool_saver(dsn: str, asynchronous: bool, **settings: Any) -> AsyncIterator[Saver]:
    if asynchronous:
        apool = AsyncConnectionPool(dsn, open=False, **settings)
        await apool.open()
        try:
            yield AsyncPostgresSaver(apool)
        finally:
            await apool.close()
    else:
        with ConnectionPool(dsn, open=True, **settings) as pool:
            yield PostgresSaver(pool)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_pool_keeps_a_connection_for_checkpoints(db_dsn: str, asynchronous: bool) -> None:
    async with small_pool_saver(db_dsn, asynchronous, min_size=1, max_size=2, timeout=0.3) as saver:
        async with locked(saver, new_thread()):
            # the one connection left still saves and loads checkpoints
            if isinstance(saver, AsyncPostgresSaver):
                assert await saver.aget_tuple({"configurable": {"thread_id": "x"}}) is None
            else:
                assert saver.get_tuple({"configurable": {"thread_id": "x"}}) is None
            with pytest.raises(PoolTimeoutError, match="one stays free"):
                async with locked(saver, new_thread()):
                    pytest.fail("a second lock took the last connection")
        async with locked(saver, new_thread()):  # the slot came back
            pass


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_pool_of_one_connection_is_refused(db_dsn: str, asynchronous: bool) -> None:
    async with small_pool_saver(db_dsn, asynchronous, min_size=1, max_size=1) as saver:
        with pytest.raises(InvalidInputError, match="max_size >= 2"):
            async with locked(saver, new_thread()):
                pytest.fail("a pool of one connection cannot lock and save")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_pooled_connections_get_their_settings_back(db_dsn: str, asynchronous: bool) -> None:
    async with small_pool_saver(db_dsn, asynchronous, min_size=2, max_size=2) as saver:
        for _ in range(3):
            async with locked(saver, new_thread()):
                pass
        with contextlib.suppress(KeyError):
            async with locked(saver, new_thread()):
                raise KeyError("from the block")
        pool: Any = saver.conn
        if asynchronous:
            conns = [await pool.getconn(), await pool.getconn()]
            try:
                assert [c.autocommit for c in conns] == [False, False]
                assert [c.info.transaction_status.name for c in conns] == ["IDLE", "IDLE"]
            finally:
                for c in conns:
                    await pool.putconn(c)
        else:
            conns = [pool.getconn(), pool.getconn()]
            try:
                assert [c.autocommit for c in conns] == [False, False]
                assert [c.info.transaction_status.name for c in conns] == ["IDLE", "IDLE"]
            finally:
                for c in conns:
                    pool.putconn(c)


# -- resume ---------------------------------------------------------------------------


async def test_resume_runs_the_node_under_the_lock(saver: Saver, db_dsn: str) -> None:
    thread_id = new_thread()
    seen: list[tuple[Any, bool]] = []

    def step(state: State) -> State:
        answer = interrupt({"count": state["count"]})
        seen.append((answer, free(db_dsn, thread_id)))
        return {"count": state["count"] + 1}

    graph = looping_graph(saver, step)
    assert (await start(graph, thread_id))["__interrupt__"][0].value == {"count": 0}
    out = await resume(saver, graph, thread_id, "yes")
    assert out["count"] == 1
    assert out["__interrupt__"][0].value == {"count": 1}
    assert seen == [("yes", False)]  # the node ran once, with the thread locked
    assert free(db_dsn, thread_id)
    with held_elsewhere(db_dsn, thread_id), pytest.raises(ThreadBusyError):
        await resume(saver, graph, thread_id, "again")
    assert seen == [("yes", False)]  # a busy thread runs nothing


@lock_variants
async def test_resume_releases_the_lock_when_the_node_raises(saver: Saver, db_dsn: str) -> None:
    thread_id = new_thread()
    failures = [RuntimeError("the tool failed")]

    def step(state: State) -> State:
        interrupt({"count": state["count"]})
        if failures:
            raise failures.pop()
        return {"count": state["count"] + 1}

    graph = looping_graph(saver, step)
    await start(graph, thread_id)
    with pytest.raises(RuntimeError, match="the tool failed"):
        await resume(saver, graph, thread_id, "yes")
    assert free(db_dsn, thread_id)
    out = await resume(saver, graph, thread_id, "yes")  # the thread is still resumable
    assert out["count"] == 1


@lock_variants
async def test_node_that_resumes_its_own_thread_fails_instead_of_hanging(saver: Saver) -> None:
    thread_id = new_thread()
    asynchronous = isinstance(saver, AsyncPostgresSaver)
    graph: Any = None

    def step(state: State) -> State:
        interrupt({"count": state["count"]})
        saver.resume(graph, {"configurable": {"thread_id": thread_id}}, "inner", timeout=None)
        return {"count": state["count"] + 1}

    async def astep(state: State) -> State:
        interrupt({"count": state["count"]})
        assert isinstance(saver, AsyncPostgresSaver)
        config = {"configurable": {"thread_id": thread_id}}
        await saver.aresume(graph, config, "inner", timeout=None)
        return {"count": state["count"] + 1}

    graph = looping_graph(saver, astep if asynchronous else step)
    await start(graph, thread_id)
    with pytest.raises(ThreadBusyError, match="already locked by this run"):
        await resume(saver, graph, thread_id, "outer", timeout=None)


@one_per_driver
async def test_resume_needs_a_graph_that_saves_through_this_saver(saver: Saver) -> None:
    def step(state: State) -> State:
        interrupt({"count": state["count"]})
        return state

    for other in (InMemorySaver(), None):
        graph = looping_graph(other, step)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="compile it with checkpointer=saver"):
            await resume(saver, graph, new_thread(), "yes")


@one_per_driver
async def test_resume_passes_invoke_arguments_through(saver: Saver) -> None:
    thread_id = new_thread()

    def step(state: State) -> State:
        interrupt({"count": state["count"]})
        return {"count": state["count"] + 1}

    graph = looping_graph(saver, step)
    await start(graph, thread_id)
    out = await resume(saver, graph, thread_id, "yes", stream_mode="updates")
    assert {"step": {"count": 1}} in out

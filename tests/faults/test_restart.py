"""PostgreSQL restarts and idle timeouts: the application keeps running on its pool.

These tests stop and start a server, so they start one of their own
(`private_pg`) rather than touch the one the rest of the suite shares.

What a user gets, driver by driver, for a saver over a pool (the one
`from_conn_string(pool=...)` opens, or the caller's, with or without a check):
- after a restart, or after the server closed idle sessions, the next
  operation works: no restart of the application;
- an operation whose connection is lost while its first statement runs is run
  again, once, on a new connection when that statement is safe to repeat
  (`-- retry: safe` in their SQL headers: reads, and writes that leave the same rows when run
  twice); a put is one statement, so it is stored whole, once, or not at all;
- an operation that only reads (`list`, DeltaChannel history) starts over on a
  new connection, once, whichever of its statements lost the connection;
- a saver over one connection cannot replace it: the operation in flight fails
  with psycopg's error, and nothing of it is stored.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import (
    generate_config,
    generate_metadata,
)
from psycopg import sql
from support.checkpoints import with_values
from support.faults import WAIT, blocker, terminate_waiting
from support.rows import rows_of
from support.savers import POOLED, SaverApi, open_saver

from pgcheckpoint.core.copies import copy_thread_op
from pgcheckpoint.core.deletes import delete_for_runs_op, delete_thread_op, prune_op
from pgcheckpoint.core.delta_history import delta_history_op
from pgcheckpoint.core.reads import get_tuple_op, list_op
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.core.writes import put_op, put_writes_op
from pgcheckpoint.drivers.oprun import OpRun
from pgcheckpoint.schema import migrate
from pgcheckpoint.statements.queries import retry_safe, statement_names

from .private_pg import PrivateServer, why_unavailable

IDLE_TIMEOUT = "1s"


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateServer]:
    reason = why_unavailable()
    if reason is not None:
        pytest.skip(f"cannot start a private PostgreSQL to restart: {reason}")
    private = PrivateServer.create()
    try:
        private.start()
        with psycopg.connect(private.dsn(), autocommit=True) as conn:
            for name in ("faults", "idle"):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            # the server closes any session of this database idle for a second
            conn.execute(
                sql.SQL("ALTER DATABASE idle SET idle_session_timeout = {}").format(
                    sql.Literal(IDLE_TIMEOUT)
                )
            )
        for name in ("faults", "idle"):
            migrate.upgrade(private.dsn(name))
        yield private
    finally:
        private.remove()


@pytest.fixture
def dsn(server: PrivateServer) -> str:
    if not server.running():  # a failed test may have left it stopped
        server.start()
    return server.dsn("faults")


def thread() -> str:
    return f"restart-{uuid.uuid4()}"


async def put(
    api: SaverApi, thread_id: str, parent: RunnableConfig | None = None
) -> RunnableConfig:
    config = generate_config(thread_id)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    checkpoint, versions = with_values({"items": [thread_id, 1, 2]})
    return await api.put(config, checkpoint, generate_metadata(), versions)  # type: ignore[no-any-return]


async def wait_until_blocked(dsn: str, count: int = 1) -> None:
    """Until `count` sessions of the database wait for a lock."""
    deadline = time.monotonic() + WAIT
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            (waiting,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone() or (0,)
            if waiting >= count:
                return
            assert time.monotonic() < deadline, "the operation never reached the server"
            await asyncio.sleep(0.05)


# -- the next operation after an outage works ------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", POOLED)
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_pool_recovers_after_a_restart(
    server: PrivateServer, dsn: str, driver: str, kind: str
) -> None:
    tid = thread()
    async with open_saver(driver, kind, dsn) as api:
        first = await put(api, tid)
        await asyncio.to_thread(server.restart)
        # every connection the pool held is dead now
        tup = await api.get_tuple(first)
        assert tup is not None and tup.config == first
        second = await put(api, tid, first)
        assert [t.config for t in await api.list(generate_config(tid))] == [second, first]


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_thread_lock_after_a_restart(server: PrivateServer, dsn: str, driver: str) -> None:
    tid = thread()
    async with open_saver(driver, "own-pool", dsn) as api:
        await put(api, tid)
        await asyncio.to_thread(server.restart)
        if api.is_async:
            async with api.saver.lock_thread(tid) as lock:  # type: ignore[union-attr]
                assert lock.thread_id == tid
        else:

            def locked() -> str:
                with api.saver.lock_thread(tid) as lock:  # type: ignore[union-attr]
                    return lock.thread_id

            assert await asyncio.to_thread(locked) == tid


# A pool with `check=` is left out: psycopg_pool sleeps 1 s, then 2 s... between
# stale connections it finds, so with a 1 s timeout each one it tries next has
# idled out meanwhile, and the request times out (see README, Connections).
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["own-pool", "pool"])
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_connections_closed_by_idle_session_timeout_are_replaced(
    server: PrivateServer, driver: str, kind: str
) -> None:
    dsn = server.dsn("idle")
    tid = thread()
    async with open_saver(driver, kind, dsn) as api:
        first = await put(api, tid)
        with psycopg.connect(dsn, autocommit=True) as idle:
            await asyncio.sleep(2.5)  # more than the timeout: the server ends idle sessions
            with pytest.raises(psycopg.OperationalError):
                idle.execute("SELECT 1")  # as it did this one
        tup = await api.get_tuple(first)
        assert tup is not None and tup.config == first
        await asyncio.sleep(2.5)
        second = await put(api, tid, first)
        assert [t.config for t in await api.list(generate_config(tid))] == [second, first]


# -- an operation in flight during a restart -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_read_in_flight_during_a_restart_is_run_again(
    server: PrivateServer, dsn: str, driver: str
) -> None:
    tid = thread()
    async with open_saver(driver, "pool", dsn) as api:
        stored = await put(api, tid)
        # the read waits behind a lock until the server goes down under it
        with blocker(dsn, "LOCK TABLE pgc_checkpoints IN ACCESS EXCLUSIVE MODE"):
            reading = asyncio.ensure_future(api.get_tuple(stored))
            await wait_until_blocked(dsn)
            await asyncio.to_thread(server.restart)
            tup = await asyncio.wait_for(reading, WAIT)
        assert tup is not None and tup.config == stored
        assert tup.checkpoint["channel_values"] == {"items": [tid, 1, 2]}


def _conflicting_row(thread_id: str, checkpoint_id: str) -> tuple[str, list[str]]:
    # an uncommitted row with the checkpoint's key: the put's insert waits for it
    return (
        "INSERT INTO pgc_checkpoints (thread_id, checkpoint_ns, checkpoint_id, type,"
        " checkpoint, metadata_type, metadata_blob) VALUES (%s, '', %s, 'x', '', 'x', '')",
        [thread_id, checkpoint_id],
    )


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_put_in_flight_during_a_restart_is_stored_once_whole(
    server: PrivateServer, dsn: str, driver: str
) -> None:
    tid = thread()
    checkpoint, versions = with_values({"items": ["a", "b"], "more": {"k": [1, 2, 3]}})
    statement, params = _conflicting_row(tid, checkpoint["id"])
    async with open_saver(driver, "own-pool", dsn) as api:
        with blocker(dsn, statement, params=params):
            putting = asyncio.ensure_future(
                api.put(generate_config(tid), checkpoint, generate_metadata(), versions)
            )
            await wait_until_blocked(dsn)
            await asyncio.to_thread(server.restart)  # ends the blocker's transaction too
            stored = await asyncio.wait_for(putting, WAIT)
        tup = await api.get_tuple(stored)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {"items": ["a", "b"], "more": {"k": [1, 2, 3]}}
    assert rows_of(dsn, tid) == {"pgc_checkpoints": 1, "pgc_blobs": 2, "pgc_writes": 0}


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_put_in_flight_on_one_connection_fails_clearly_and_stores_nothing(
    server: PrivateServer, dsn: str, driver: str
) -> None:
    tid = thread()
    checkpoint, versions = with_values({"items": ["a", "b"], "more": {"k": [1, 2, 3]}})
    statement, params = _conflicting_row(tid, checkpoint["id"])
    async with open_saver(driver, "own-conn", dsn) as api:
        with blocker(dsn, statement, params=params):
            putting = asyncio.ensure_future(
                api.put(generate_config(tid), checkpoint, generate_metadata(), versions)
            )
            await wait_until_blocked(dsn)
            await asyncio.to_thread(server.restart)
            try:
                await asyncio.wait_for(putting, WAIT)
            except psycopg.OperationalError as exc:
                assert "terminating connection" in str(exc)
                stored = False
            else:
                # A fast shutdown ends the blocker first: the put may get its lock
                # and commit in the instant before its own session ends.
                stored = True
        # the caller's connection is gone, and the saver says so: "closed" once
        # the put saw the termination, the termination itself if the put did not
        expected = "terminating connection|closed" if stored else "closed"
        with pytest.raises(psycopg.OperationalError, match=expected):
            await api.get_tuple(generate_config(tid))
    # the statement's blobs and its checkpoint went together: nothing half-written
    rows = rows_of(dsn, tid)
    if stored:
        assert rows["pgc_checkpoints"] == 1 and rows["pgc_blobs"] == len(versions)
    else:
        assert rows == {"pgc_checkpoints": 0, "pgc_blobs": 0, "pgc_writes": 0}


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_an_operation_that_loses_its_connection_twice_fails(db_dsn: str, driver: str) -> None:
    """One retry, not a loop: a second lost connection is the caller's to handle."""
    tid = thread()
    async with open_saver(driver, "pool", db_dsn) as api:
        stored = await put(api, tid)
        with blocker(db_dsn, "LOCK TABLE pgc_checkpoints IN ACCESS EXCLUSIVE MODE"):
            reading = asyncio.ensure_future(api.get_tuple(stored))
            first = await terminate_waiting(db_dsn, set())
            await terminate_waiting(db_dsn, {first})  # the retry, waiting again
            with pytest.raises(psycopg.OperationalError, match="terminating connection"):
                await asyncio.wait_for(reading, WAIT)
        tup = await api.get_tuple(stored)  # and the pool still works
        assert tup is not None and tup.config == stored


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_a_listing_starts_over_when_its_second_statement_loses_the_connection(
    db_dsn: str, driver: str
) -> None:
    """`list` reads a page, then the page's stored values: two statements that only
    read, so a connection lost at the second starts the listing over elsewhere."""
    tid = thread()
    async with open_saver(driver, "pool", db_dsn) as api:
        first = await put(api, tid)
        second = await put(api, tid, first)
        # the page comes from the checkpoints; the stored values wait for the blobs
        with blocker(db_dsn, "LOCK TABLE pgc_blobs IN ACCESS EXCLUSIVE MODE") as lock:
            listing = asyncio.ensure_future(api.list(generate_config(tid)))
            query = await terminate_waiting_query(db_dsn)
            assert query.startswith("-- pgcheckpoint: listed_values")
            await wait_until_blocked(db_dsn)  # the listing, started over, waits again
            lock.rollback()
            tuples = await asyncio.wait_for(listing, WAIT)
    assert [t.config for t in tuples] == [second, first]
    assert [t.checkpoint["channel_values"]["items"] for t in tuples] == [[tid, 1, 2]] * 2


async def terminate_waiting_query(dsn: str) -> str:
    """Terminate the one session that waits for a lock; the statement it was running."""
    deadline = time.monotonic() + WAIT
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT pid, query FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if row is not None:
                conn.execute("SELECT pg_terminate_backend(%s)", [row[0]])
                return str(row[1])
            assert time.monotonic() < deadline, "the operation never reached the server"
            await asyncio.sleep(0.05)


# -- which operations may run again: no database needed ---------------------------------


def test_retry_safety_is_read_from_the_statement_headers() -> None:
    safe = {name for name in statement_names() if retry_safe(name)}
    assert {"put_checkpoint", "get_latest_checkpoint", "read_committed"} <= safe
    assert "delete_checkpoints" not in safe and not retry_safe("no_such_statement")


def test_every_public_operation_starts_with_a_statement_safe_to_run_again() -> None:
    core = SaverState()
    config = generate_config("t")
    with_id = {"configurable": {**config["configurable"], "checkpoint_id": "c1"}}
    checkpoint, versions = with_values({"items": [1, 2]})
    ops = {
        "put": put_op(core, config, checkpoint, generate_metadata(), versions),
        "put_writes": put_writes_op(core, with_id, [("a", 1)], "task"),
        "put_writes special": put_writes_op(core, with_id, [("__error__", "x")], "task"),
        "get_tuple": get_tuple_op(core, config),
        "get_tuple by id": get_tuple_op(core, with_id),
        "list": list_op(core, config),
        "list across threads": list_op(core, None, filter={"a": 1}),
        "delete_thread": delete_thread_op(core, "t"),
        "copy_thread": copy_thread_op(core, "t", "u"),
        "prune": prune_op(core, ["t"]),
        "prune delete": prune_op(core, ["t"], strategy="delete"),
        "delete_for_runs": delete_for_runs_op(core, ["r"]),
        "delta history": delta_history_op(core, with_id, ["m"]),
    }
    firsts = {name: OpRun(op).first.name for name, op in ops.items()}
    assert {name: first for name, first in firsts.items() if not retry_safe(first)} == {}


def test_put_is_a_single_statement() -> None:
    checkpoint, versions = with_values({"items": [1, 2], "other": {"deep": ["x"]}})
    op = put_op(SaverState(), generate_config("t"), checkpoint, generate_metadata(), versions)
    assert next(op).name == "put_checkpoint"
    with pytest.raises(StopIteration):
        op.send([{"stored": True}])  # its one row, and the op is done


class _Conn:
    def __init__(self, closed: bool) -> None:
        self.closed = closed


@pytest.mark.parametrize(
    ("pooled", "exc", "closed", "expected"),
    [
        (True, psycopg.errors.AdminShutdown("lost"), True, True),
        (True, psycopg.OperationalError("lost"), True, True),
        (False, psycopg.errors.AdminShutdown("lost"), True, False),  # no other connection
        (True, psycopg.errors.QueryCanceled("timeout"), False, False),  # session still up
        (True, psycopg.errors.UniqueViolation("dup"), True, False),  # not a lost connection
    ],
)
def test_when_an_operation_may_run_again(
    pooled: bool, exc: Exception, closed: bool, expected: bool
) -> None:
    run = OpRun(get_tuple_op(SaverState(), generate_config("t")), pooled=pooled)
    conn: Any = _Conn(closed)
    assert run.may_retry(exc, conn) is expected
    run.retried = True
    assert run.may_retry(exc, conn) is False  # once at most


def test_an_operation_that_has_seen_a_statement_does_not_run_again() -> None:
    run = OpRun(delete_for_runs_op(SaverState(), ["r"]), pooled=True)
    lost: Any = _Conn(True)
    assert run.may_retry(psycopg.OperationalError("lost"), lost)
    # its first read found checkpoints: what follows depends on that answer
    run.send([{"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"}])
    assert not run.may_retry(psycopg.OperationalError("lost"), lost)


def test_an_unsafe_first_statement_is_not_run_again() -> None:
    def unsafe() -> Any:
        from pgcheckpoint.ops import Stmt

        yield Stmt("delete_checkpoints", {})

    run = OpRun(unsafe(), pooled=True)
    assert not run.may_retry(psycopg.OperationalError("lost"), _Conn(True))  # type: ignore[arg-type]


def test_a_read_only_operation_starts_over_from_its_first_statement() -> None:
    config = generate_config("t")

    def listing() -> Any:
        return list_op(SaverState(), config)

    run = OpRun(listing(), pooled=True, restart=listing)
    lost: Any = _Conn(True)
    page = [{"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}]
    assert run.send(page).name == "listed_values"  # the page's values next
    assert run.may_retry(psycopg.OperationalError("lost"), lost)
    again = run.again()
    assert again is not run and again.first.name == run.first.name and not again.started
    assert not again.may_retry(psycopg.OperationalError("lost"), lost)  # once at most

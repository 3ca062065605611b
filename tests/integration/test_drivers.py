"""The drivers: caller resources, from_conn_string, threads and concurrency."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool
from support.savers import ASYNC_VARIANTS, VARIANTS, SaverApi

from pgcheckpoint import AsyncPostgresSaver, PgCheckpointError, PostgresSaver


def count_checkpoints(db_dsn: str, thread_id: str) -> int:
    with psycopg.connect(db_dsn) as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM pgc_checkpoints WHERE thread_id = %s", [thread_id]
        ).fetchone() or (None,)
    return int(n)


async def test_writes_are_committed_for_other_connections(api: SaverApi, db_dsn: str) -> None:
    tid = f"t-{uuid.uuid4()}"
    stored = await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(), {})
    await api.put_writes(stored, [("x", 1)], "task", "")
    assert count_checkpoints(db_dsn, tid) == 1
    with psycopg.connect(db_dsn) as conn:
        (writes,) = conn.execute(
            "SELECT count(*) FROM pgc_writes WHERE thread_id = %s", [tid]
        ).fetchone() or (None,)
    assert writes == 1
    await api.delete_thread(tid)
    assert count_checkpoints(db_dsn, tid) == 0


@pytest.mark.parametrize("saver", [v for v in VARIANTS if not v.endswith("-pool")], indirect=True)
async def test_the_callers_connection_settings_are_left_alone(api: SaverApi) -> None:
    conn = api.saver.conn
    assert isinstance(conn, psycopg.Connection | psycopg.AsyncConnection)
    stored = await api.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
    assert await api.get_tuple(stored) is not None
    assert await api.list(None)
    assert conn.autocommit is False
    assert conn.row_factory is tuple_row
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# -- from_conn_string --------------------------------------------------------------

OPTIONS = {
    "connection": {},
    "pipeline": {"pipeline": True},
    "pool": {"pool": True},
    "pool-settings": {"pool": {"min_size": 1, "max_size": 2, "timeout": 5}},
}


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_sync_from_conn_string(db_dsn: str, option: str) -> None:
    tid = f"t-{uuid.uuid4()}"
    with PostgresSaver.from_conn_string(db_dsn, **OPTIONS[option]) as saver:  # type: ignore[arg-type]
        stored = saver.put(generate_config(tid), generate_checkpoint(), generate_metadata(), {})
        assert saver.get_tuple(stored) is not None
        assert (saver.pipe is not None) is (option == "pipeline")
        resource = saver.conn
    assert resource.closed
    assert count_checkpoints(db_dsn, tid) == 1


@pytest.mark.parametrize("option", sorted(OPTIONS))
async def test_async_from_conn_string(db_dsn: str, option: str) -> None:
    tid = f"t-{uuid.uuid4()}"
    async with AsyncPostgresSaver.from_conn_string(db_dsn, **OPTIONS[option]) as saver:  # type: ignore[arg-type]
        stored = await saver.aput(
            generate_config(tid), generate_checkpoint(), generate_metadata(), {}
        )
        assert await saver.aget_tuple(stored) is not None
        assert (saver.pipe is not None) is (option == "pipeline")
        resource = saver.conn
    assert resource.closed
    assert count_checkpoints(db_dsn, tid) == 1


def test_a_failed_op_in_a_pipeline_leaves_it_working(empty_db_dsn: str) -> None:
    # from_conn_string's pipeline is in autocommit: a failed statement left it aborted,
    # and the schema check and every later op failed with PipelineAborted
    config = generate_config("t")
    with PostgresSaver.from_conn_string(empty_db_dsn, pipeline=True) as saver:
        with pytest.raises(PgCheckpointError, match="pgcheckpoint migrate"):
            saver.get_tuple(config)
        saver.setup()
        stored = saver.put(config, generate_checkpoint(), generate_metadata(), {})
        assert saver.get_tuple(stored) is not None


async def test_a_failed_op_in_an_async_pipeline_leaves_it_working(empty_db_dsn: str) -> None:
    config = generate_config("t")
    async with AsyncPostgresSaver.from_conn_string(empty_db_dsn, pipeline=True) as saver:
        with pytest.raises(PgCheckpointError, match="pgcheckpoint migrate"):
            await saver.aget_tuple(config)
        await saver.setup()
        stored = await saver.aput(config, generate_checkpoint(), generate_metadata(), {})
        assert await saver.aget_tuple(stored) is not None


def test_a_pool_with_a_pipeline_is_refused(db_dsn: str) -> None:
    with ConnectionPool(db_dsn, open=True) as pool, psycopg.connect(db_dsn) as conn:
        with conn.pipeline() as pipe, pytest.raises(ValueError, match="pipeline"):
            PostgresSaver(pool, pipe)
        assert not pool.closed


# -- concurrency -----------------------------------------------------------------------


async def test_many_concurrent_callers_each_keep_their_own_thread(
    api: SaverApi, db_dsn: str
) -> None:
    callers, steps = 8, 10

    def sync_caller(n: int) -> None:
        config = generate_config(f"c-{n}")
        for step in range(steps):
            config = api.saver.put(config, generate_checkpoint(), generate_metadata(step=step), {})
            api.saver.put_writes(config, [("n", n)], f"task-{step}", "")

    async def async_caller(n: int) -> None:
        config = generate_config(f"c-{n}")
        for step in range(steps):
            config = await api.saver.aput(
                config, generate_checkpoint(), generate_metadata(step=step), {}
            )
            await api.saver.aput_writes(config, [("n", n)], f"task-{step}", "")

    if api.is_async:
        await asyncio.gather(*(async_caller(n) for n in range(callers)))
    else:
        with ThreadPoolExecutor(callers) as pool:
            list(pool.map(sync_caller, range(callers)))

    for n in range(callers):
        history = await api.list(generate_config(f"c-{n}"))
        assert [t.metadata["step"] for t in history] == list(range(steps))[::-1]
        assert all(t.pending_writes == [(t.pending_writes[0][0], "n", n)] for t in history)
        for child, parent in itertools.pairwise(history):
            assert child.parent_config == parent.config


# -- the async saver's sync methods --------------------------------------------------------


@pytest.mark.parametrize("saver", ASYNC_VARIANTS, indirect=True)
async def test_async_savers_sync_methods_work_from_another_thread(
    saver: AsyncPostgresSaver,
) -> None:
    tid, copy = f"t-{uuid.uuid4()}", f"t-{uuid.uuid4()}"
    caller_threads = set()

    def from_a_thread() -> None:
        caller_threads.add(threading.get_ident())
        config = generate_config(tid)
        for step in range(3):
            metadata = generate_metadata(step=step)
            metadata["run_id"] = f"run-{step}"
            config = saver.put(config, generate_checkpoint(), metadata, {})
        saver.put_writes(config, [("x", "y")], "task", "")
        latest = saver.get_tuple(generate_config(tid))
        assert latest is not None and latest.config == config
        assert latest.pending_writes == [("task", "x", "y")]
        assert len(list(saver.list(generate_config(tid)))) == 3
        assert len(list(saver.list(generate_config(tid), limit=1))) == 1
        assert saver.get_delta_channel_history(config=config, channels=["x"])["x"] == {"writes": []}
        saver.copy_thread(tid, copy)
        assert len(list(saver.list(generate_config(copy)))) == 3
        saver.delete_for_runs(["run-0"])
        saver.prune([tid], strategy="keep_latest")
        assert len(list(saver.list(generate_config(tid)))) == 1
        saver.delete_thread(copy)
        assert saver.get_tuple(generate_config(copy)) is None

    await asyncio.to_thread(from_a_thread)
    assert threading.get_ident() not in caller_threads


@pytest.mark.parametrize("saver", ASYNC_VARIANTS, indirect=True)
async def test_async_savers_sync_methods_on_its_loop_say_to_await(
    saver: AsyncPostgresSaver, db_dsn: str
) -> None:
    config = generate_config("t")
    with pytest.raises(PgCheckpointError, match=r"await saver\.aget_tuple") as info:
        saver.get_tuple(config)
    assert "another thread" in str(info.value)
    with pytest.raises(PgCheckpointError, match=r"await saver\.aput\("):
        saver.put(config, generate_checkpoint(), generate_metadata(), {})
    with pytest.raises(PgCheckpointError, match="event loop"):
        list(saver.list(config))
    assert count_checkpoints(db_dsn, "t") == 0
    # the saver still works afterwards
    await saver.aput(config, generate_checkpoint(), generate_metadata(), {})
    assert await saver.aget_tuple(config) is not None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("saver", [v for v in VARIANTS if v.endswith("-pipeline")], indirect=True)
async def test_writes_of_megabytes_are_stored_through_a_callers_pipeline(api: SaverApi) -> None:
    # psycopg's Pipeline.sync() right after a statement of megabytes waits for ever:
    # a pipelined put_writes learns how many rows it stored by fetching that
    # statement's result, as fetchall does
    tid = f"t-{uuid.uuid4()}"
    stored = await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(), {})
    big = os.urandom(20_000_000)  # incompressible: megabytes on the wire
    await api.put_writes(stored, [("one", big)], "task-1", "")
    await api.put_writes(stored, [("a", big), ("b", b"small")], "task-2", "")
    found = await api.get_tuple(stored)
    assert found is not None
    assert sorted((task, channel) for task, channel, _ in found.pending_writes) == [
        ("task-1", "one"),
        ("task-2", "a"),
        ("task-2", "b"),
    ]
    assert all(value == big for _, channel, value in found.pending_writes if channel != "b")

"""A saver used the way only the other driver serves says which to use, and never hangs."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance.test_utils import generate_config
from langgraph.graph import END, START, StateGraph
from psycopg_pool import AsyncConnectionPool

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.errors import DriverMismatchError, PgCheckpointError

# a hang fails the test instead of the run
pytestmark = pytest.mark.timeout(120)


class State(TypedDict):
    n: int


def graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("add", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=saver)


async def test_the_sync_saver_under_ainvoke_names_the_async_saver(db_dsn: str) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        app = graph(saver)
        config = generate_config("t1")
        with pytest.raises(DriverMismatchError) as refused:
            await app.ainvoke({"n": 1}, config)
        message = str(refused.value)
        assert "PostgresSaver is synchronous" in message
        assert "called its aget_tuple()" in message
        assert "AsyncPostgresSaver" in message
        # what the base class raised, and the project's root
        assert isinstance(refused.value, NotImplementedError | PgCheckpointError)
        with pytest.raises(DriverMismatchError, match="called its alist"):
            [t async for t in saver.alist(None)]
        with pytest.raises(DriverMismatchError, match="called its aput_writes"):
            await saver.aput_writes(config, [("n", 1)], "task")
        # the same graph works when invoked the sync way
        assert app.invoke({"n": 1}, config) == {"n": 2}


def test_the_async_saver_refuses_sync_calls_once_its_loop_is_closed(db_dsn: str) -> None:
    async def make() -> AsyncPostgresSaver:
        pool = AsyncConnectionPool(db_dsn, min_size=1, max_size=2, open=False)
        await pool.open()
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        await pool.close()
        return saver

    saver = asyncio.run(make())  # asyncio.run closes its loop on the way out
    with pytest.raises(DriverMismatchError) as refused:
        saver.get_tuple(generate_config("t1"))
    message = str(refused.value)
    assert "AsyncPostgresSaver.get_tuple()" in message and "loop is closed" in message
    assert "use PostgresSaver in sync code" in message
    with pytest.raises(DriverMismatchError, match="loop is closed"):
        list(saver.list(None))


def test_the_async_saver_refuses_sync_calls_while_its_loop_is_stopped(db_dsn: str) -> None:
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()

    async def make() -> tuple[AsyncConnectionPool[Any], AsyncPostgresSaver]:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            db_dsn, min_size=1, max_size=2, open=False
        )
        await pool.open()
        return pool, AsyncPostgresSaver(pool)

    pool, saver = asyncio.run_coroutine_threadsafe(make(), loop).result()
    try:
        assert saver.get_tuple(generate_config("t1")) is None  # the loop runs: it works
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        with pytest.raises(DriverMismatchError, match="loop is not running"):
            saver.get_tuple(generate_config("t1"))
    finally:
        loop.run_until_complete(pool.close())
        loop.close()


async def test_a_sync_call_on_the_async_savers_loop_is_an_invalid_state_error(
    db_dsn: str,
) -> None:
    async with AsyncPostgresSaver.from_conn_string(db_dsn) as saver:
        await saver.setup()
        config = await saver.aput(generate_config("t1"), empty_checkpoint(), {}, {})
        # what the official AsyncPostgresSaver raises there, so its callers' handlers catch it
        for call in (
            lambda: saver.get_tuple(config),
            lambda: list(saver.list(None)),
            lambda: saver.prune(["t1"]),
        ):
            with pytest.raises(asyncio.InvalidStateError) as refused:
                call()
            assert isinstance(refused.value, DriverMismatchError)
            assert "called from the event loop it runs on" in str(refused.value)
        # from another thread the same calls run
        assert (await asyncio.to_thread(saver.get_tuple, config)) is not None
        await asyncio.to_thread(saver.prune, ["t1"])

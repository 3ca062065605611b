"""Failover: the primary dies, its synchronous standby is promoted, the graph goes on.

A private primary and a streaming standby (`private_pg.Replicated`), the saver
on a pool over the multi-host DSN the docs give
(`host=a,b port=p1,p2 target_session_attrs=read-write`). A graph runs; after a
few acknowledged checkpoints the primary is killed with SIGKILL (every process
of the server, as when its machine dies), and the standby is promoted right
away or after several seconds. What a user relies on:
- the invoke in flight when the primary died completes, on the same saver
  object, and no exception reaches the graph;
- with synchronous replication no acknowledged checkpoint is missing on the
  new primary;
- the saver does not wait for the pool's reconnection back-off: with that
  back-off made an hour long, the graph still goes on once the new primary
  accepts writes;
- while no server accepts writes, an operation that runs out of time raises
  `PoolTimeoutError` naming the connection failure, not the pool's size.

The downtime (from the moment the new primary accepts writes to the graph's
next acknowledged checkpoint) is printed with the test's output (`-s`), and
recorded as the test's `downtime_s` property; it is not asserted.
"""

from __future__ import annotations

import asyncio
import operator
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from psycopg_pool.base import AttemptWithBackoff

from pgcheckpoint import AsyncPostgresSaver, PoolTimeoutError, PostgresSaver
from pgcheckpoint.schema import migrate

from .private_pg import Replicated, why_unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STEPS = 30  # super-steps of the graph, one acknowledged checkpoint each
KILL_AFTER = 8  # acknowledged checkpoints before the primary dies
DELAY = 6.0  # seconds between the kill and the promotion, for the delayed case
POOL = {"min_size": 2, "max_size": 4, "timeout": 60.0}


class Counter(TypedDict):
    steps: Annotated[list[int], operator.add]


def step(state: Counter) -> dict[str, list[int]]:
    time.sleep(0.01)  # a node does some work; the kill lands in or between steps
    return {"steps": [len(state["steps"])]}


def more(state: Counter) -> str:
    return "step" if len(state["steps"]) < STEPS else END


def build() -> StateGraph[Counter]:
    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", more)
    return builder


class Acks:
    """When each checkpoint was acknowledged: `put` returned its config."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.ids: list[str] = []

    def record(self, config: RunnableConfig) -> None:
        self.times.append(time.monotonic())
        self.ids.append(config["configurable"]["checkpoint_id"])

    def first_after(self, moment: float) -> float:
        return next(t for t in self.times if t >= moment)


class AckedSaver(PostgresSaver):
    acks: Acks

    def put(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        config = super().put(*args, **kwargs)
        self.acks.record(config)
        return config


class AckedAsyncSaver(AsyncPostgresSaver):
    acks: Acks

    async def aput(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        config = await super().aput(*args, **kwargs)
        self.acks.record(config)
        return config


@pytest.fixture
def pair() -> Iterator[Replicated]:
    reason = why_unavailable()
    if reason is not None:
        pytest.skip(f"cannot start a private primary and standby: {reason}")
    replicated = Replicated.create(["app"])
    try:
        migrate.upgrade(replicated.dsn("app"))
        yield replicated
    finally:
        replicated.remove()


@pytest.fixture
def hour_long_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """psycopg_pool's reconnection back-off starts at an hour instead of a second."""
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 3600.0)


class Graph:
    """The counting graph on an acked saver of either driver, over the multi-host DSN."""

    def __init__(self, saver: AckedSaver | AckedAsyncSaver) -> None:
        self.saver = saver
        self.acks = saver.acks = Acks()
        self.graph = build().compile(checkpointer=saver)
        self.config: RunnableConfig = {
            "configurable": {"thread_id": f"failover-{uuid.uuid4()}"},
            "recursion_limit": STEPS + 10,
        }

    async def invoke(self) -> Any:
        if isinstance(self.saver, AsyncPostgresSaver):
            return await self.graph.ainvoke({"steps": []}, self.config, durability="sync")
        return await asyncio.to_thread(
            self.graph.invoke, {"steps": []}, self.config, durability="sync"
        )

    async def state(self) -> Any:
        if isinstance(self.saver, AsyncPostgresSaver):
            return (await self.graph.aget_state(self.config)).values
        return (await asyncio.to_thread(self.graph.get_state, self.config)).values


@pytest.fixture(params=["sync", "async"])
async def graph(request: pytest.FixtureRequest, pair: Replicated) -> AsyncIterator[Graph]:
    dsn = pair.dsn("app")
    if request.param == "sync":
        with AckedSaver.from_conn_string(dsn, pool=POOL) as saver:
            yield Graph(saver)  # type: ignore[arg-type]
        return
    async with AckedAsyncSaver.from_conn_string(dsn, pool=POOL) as asaver:
        yield Graph(asaver)  # type: ignore[arg-type]


async def until_acknowledged(acks: Acks, count: int, running: asyncio.Future[Any]) -> None:
    deadline = time.monotonic() + 60
    while len(acks.ids) < count:
        assert not running.done(), running.result()
        assert time.monotonic() < deadline, "the graph made no progress"
        await asyncio.sleep(0.005)


async def outage_error(pair: Replicated, driver: str) -> str:
    """What a saver with a short pool timeout raises while no server accepts writes."""
    short = {**POOL, "min_size": 1, "timeout": 1.5}
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    with pytest.raises(PoolTimeoutError) as raised:
        if driver == "sync":

            def read() -> None:
                with PostgresSaver.from_conn_string(pair.dsn("app"), pool=short) as saver:
                    saver.get_tuple(config)

            await asyncio.to_thread(read)
        else:
            async with AsyncPostgresSaver.from_conn_string(pair.dsn("app"), pool=short) as saver:
                await saver.aget_tuple(config)
    return str(raised.value)


async def fail_over(pair: Replicated, graph: Graph, *, delay: float, record_property: Any) -> None:
    running = asyncio.ensure_future(graph.invoke())
    try:
        await until_acknowledged(graph.acks, KILL_AFTER, running)
        await asyncio.to_thread(pair.primary.kill)
        killed = time.monotonic()
        if delay:
            driver = "async" if isinstance(graph.saver, AsyncPostgresSaver) else "sync"
            message = await outage_error(pair, driver)
            assert "cannot connect to the server" in message, message
            assert "session is read-only" in message, message  # the standby said no
            assert "max_size" not in message, message
            await asyncio.sleep(max(0.0, delay - (time.monotonic() - killed)))
        acknowledged_before = len(graph.acks.ids)
        await asyncio.to_thread(pair.promote)
        writable = time.monotonic()
        result = await asyncio.wait_for(running, 120)
    finally:
        if not running.done():
            running.cancel()
    # the invoke in flight at the kill completed: no exception reached the graph
    assert result == {"steps": list(range(STEPS))}
    # one checkpoint for the input, one for START's writes, then one a step, each once
    assert len(set(graph.acks.ids)) == len(graph.acks.ids) == STEPS + 2
    # with synchronous replication every acknowledged checkpoint is on the new primary
    with psycopg.connect(pair.standby.dsn("app")) as conn:
        stored = {
            checkpoint_id
            for (checkpoint_id,) in conn.execute(
                "SELECT checkpoint_id FROM pgc_checkpoints WHERE thread_id = %s",
                [graph.config["configurable"]["thread_id"]],
            )
        }
    assert set(graph.acks.ids) <= stored
    # and the same saver object goes on
    assert await graph.state() == {"steps": list(range(STEPS))}
    downtime = graph.acks.first_after(writable) - writable
    record_property("downtime_s", round(downtime, 3))
    print(
        f"\n{type(graph.saver).__name__}: killed after {acknowledged_before} acknowledged "
        f"checkpoints, promoted {writable - killed:.2f} s after the kill, next checkpoint "
        f"acknowledged {downtime:.3f} s after the new primary accepted writes"
    )


async def test_the_graph_goes_on_when_the_standby_is_promoted_right_away(
    pair: Replicated, graph: Graph, record_property: Any
) -> None:
    await fail_over(pair, graph, delay=0.0, record_property=record_property)


async def test_the_graph_goes_on_whatever_the_pools_reconnection_backoff(
    pair: Replicated, graph: Graph, hour_long_backoff: None, record_property: Any
) -> None:
    """Promoted several seconds after the kill, and the pool would retry only in an hour."""
    await fail_over(pair, graph, delay=DELAY, record_property=record_property)

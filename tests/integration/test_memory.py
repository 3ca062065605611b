"""What a saver keeps between calls: within `cache_bytes`, and nothing of a finished operation.

A worker serves many threads for days, so what the saver holds must stay
within the budget it was given, whatever the threads do; and the rows and
parameters of an operation must not outlive it.
"""

from __future__ import annotations

import gc
import os
import tracemalloc
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from support.memory import block_bytes, counted

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.core.caches import DEFAULT_CACHE_BYTES

from .conftest import Saver, SaverApi

BUDGETS = [0, 64 * 1024, 1024 * 1024, DEFAULT_CACHE_BYTES]
THREADS = 24
TURNS = 4
CONNECTION = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


class PlainChat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class DeltaChat(TypedDict):
    # a snapshot every 3 turns, so threads have seeds to keep too
    messages: Annotated[
        list[AnyMessage], DeltaChannel(_messages_delta_reducer, snapshot_frequency=3)
    ]


def reply(state: dict[str, Any]) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"answer {n} " + "a" * 1500, id=f"ai-{n}")]}


def chat_graph(saver: Saver, delta: bool) -> Any:
    builder = StateGraph(DeltaChat if delta else PlainChat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def said(turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"turn {turn} " + "h" * 1500, id=f"h-{turn}")]}


@pytest.fixture(params=["sync", "async"])
async def driver(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def budgeted(
    driver: str, db_dsn: str, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Saver, int]]:
    cache_bytes: int = request.param
    if driver == "sync":
        with ConnectionPool(db_dsn, max_size=4, kwargs=CONNECTION, open=True) as pool:
            yield PostgresSaver(pool, cache_bytes=cache_bytes), cache_bytes
        return
    async with AsyncConnectionPool(db_dsn, max_size=4, kwargs=CONNECTION, open=False) as apool:
        yield AsyncPostgresSaver(apool, cache_bytes=cache_bytes), cache_bytes


@pytest.mark.parametrize("budgeted", BUDGETS, indirect=True, ids=lambda b: f"budget-{b}")
async def test_what_a_saver_keeps_stays_within_its_budget(budgeted: tuple[Saver, int]) -> None:
    saver, budget = budgeted
    is_async = isinstance(saver, AsyncPostgresSaver)
    graphs = [chat_graph(saver, delta) for delta in (False, True)]
    # the copy LangGraph makes in strict msgpack mode shares the budget
    assert saver.with_allowlist([("my.module", "Thing")]).caches is saver.caches
    tracemalloc.start()
    try:
        for n in range(THREADS):
            graph, config = graphs[n % 2], {"configurable": {"thread_id": f"t{n}"}}
            for turn in range(1, TURNS + 1):
                if is_async:
                    await graph.ainvoke(said(turn), config)
                else:
                    graph.invoke(said(turn), config)
            state = (await graph.aget_state(config)) if is_async else graph.get_state(config)
            # the same answers whatever is kept
            assert [m.id for m in state.values["messages"]] == [
                i for t in range(1, TURNS + 1) for i in (f"h-{t}", f"ai-{2 * t - 1}")
            ]
            assert saver.caches.used_bytes <= budget
        del state  # it shares strings with the decoded values kept
        held = saver.caches.used_bytes
        gc.collect()
        before = block_bytes()
        saver.caches.clear()
        gc.collect()
        after = block_bytes()
    finally:
        tracemalloc.stop()
    if budget == 0:
        assert held == 0 and len(saver.caches) == 0
        return
    # the budget counts what the values, keys and entries take, with what each
    # allocator adds (tests/unit/test_caches.py): clearing frees about that (a
    # little less when a copy handed out still shares a string with them)
    small, large = before[0] - after[0], before[1] - after[1]
    freed = counted(small, large)
    assert held > budget / 4 or budget == DEFAULT_CACHE_BYTES
    assert 0.9 * freed <= held <= 1.3 * freed
    assert freed <= 1.1 * budget


def reachable(root: object, limit: int = 300_000) -> list[object]:
    """Objects reachable from `root`, classes and modules aside (they reach everything)."""
    seen = {id(root)}
    found = [root]
    queue = [root]
    while queue and len(found) < limit:
        for ref in gc.get_referents(queue.pop()):
            if id(ref) in seen or isinstance(ref, type | type(os)) or callable(ref):
                continue
            seen.add(id(ref))
            found.append(ref)
            queue.append(ref)
    return found


def large_or_results(root: object) -> list[str]:
    return [
        f"{type(obj).__name__} of {len(obj)}" if hasattr(obj, "__len__") else type(obj).__name__  # type: ignore[arg-type]
        for obj in reachable(root)
        if type(obj).__name__ == "PGresult"
        or (isinstance(obj, str | bytes | bytearray | memoryview) and len(obj) > 1_000_000)
    ]


async def test_nothing_of_a_finished_operation_is_kept(saver: Saver, api: SaverApi) -> None:
    # hex text: what is sent stays over 1 MB after compression
    document = os.urandom(1_000_000).hex()
    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    checkpoint = {
        "v": 4,
        "id": "1f0e0000-0000-6000-8000-000000000001",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {"document": document},
        "channel_versions": {"document": "00000000000000000000000000000001.1"},
        "versions_seen": {},
        "updated_channels": ["document"],
    }
    new_versions = {"document": "00000000000000000000000000000001.1"}
    stored = await api.put(config, checkpoint, {"source": "input", "step": -1}, new_versions)
    assert large_or_results(saver) == []
    await api.put_writes(stored, [("document", document)], "task-1")
    assert large_or_results(saver) == []
    listed = await api.list(config)
    assert listed[0].checkpoint["channel_values"]["document"] == document
    assert listed[0].pending_writes == [("task-1", "document", document)]
    del listed
    assert large_or_results(saver) == []
    found = await api.get_tuple(config)
    assert found is not None and found.checkpoint["channel_values"]["document"] == document
    del found
    assert large_or_results(saver) == []

"""Real graphs with a DeltaChannel over hundreds of turns, and maintenance on them.

Each run is repeated on InMemorySaver, LangGraph's reference; states and
histories must be equal, before and after prune, copy_thread and
delete_for_runs.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import StateGraph
from langgraph.types import Command, interrupt
from support.chat import chat_builder

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

TURNS = 500
SNAPSHOT_EVERY = 7


def build() -> StateGraph:
    return chat_builder(
        snapshot_frequency=SNAPSHOT_EVERY, reply=lambda turn: f"ai {turn}: " + "x" * 40
    )


def chat(graph: Any, thread_id: str, turns: int, start: int = 0) -> list[str]:
    """Run the chat; returns the run id of each turn."""
    run_ids = []
    for t in range(start, start + turns):
        run_id = str(uuid.uuid4())
        run_ids.append(run_id)
        config = {"configurable": {"thread_id": thread_id}, "run_id": run_id}
        graph.invoke({"messages": [f"human {t}"], "turn": t}, config)
    return run_ids


async def achat(graph: Any, thread_id: str, turns: int) -> None:
    for t in range(turns):
        config = {"configurable": {"thread_id": thread_id}, "run_id": str(uuid.uuid4())}
        await graph.ainvoke({"messages": [f"human {t}"], "turn": t}, config)


def snapshot(graph: Any, thread_id: str) -> tuple[Any, list[tuple[Any, Any]]]:
    config = {"configurable": {"thread_id": thread_id}}
    history = [(h.values, h.next) for h in graph.get_state_history(config)]
    return graph.get_state(config).values, history


async def asnapshot(graph: Any, thread_id: str) -> tuple[Any, list[tuple[Any, Any]]]:
    config = {"configurable": {"thread_id": thread_id}}
    history = [(h.values, h.next) async for h in graph.aget_state_history(config)]
    return (await graph.aget_state(config)).values, history


@pytest.fixture(scope="module")
def reference() -> tuple[Any, list[tuple[Any, Any]]]:
    graph = build().compile(checkpointer=InMemorySaver())
    chat(graph, "ref", TURNS)
    return snapshot(graph, "ref")


@pytest.mark.slow
def test_sync_500_turns_equal_in_memory(db_dsn: str, reference: Any) -> None:
    with PostgresSaver.from_conn_string(db_dsn, pool={"max_size": 4}) as saver:
        graph = build().compile(checkpointer=saver)
        run_ids = chat(graph, "t", TURNS)
        state, history = snapshot(graph, "t")
        assert state == reference[0]
        assert history == reference[1]
        # Every 50th checkpoint, loaded on its own by id.
        listed = list(saver.list({"configurable": {"thread_id": "t"}}))
        for i in range(0, len(listed), 50):
            config = listed[i].config
            assert graph.get_state(config).values == reference[1][i][0]

        # copy_thread: the copy rebuilds the same history.
        saver.copy_thread("t", "t-copy")
        assert snapshot(graph, "t-copy") == (state, history)

        # delete_for_runs of an old run: the latest state stays whole.
        saver.delete_for_runs(run_ids[10:12])
        assert graph.get_state({"configurable": {"thread_id": "t"}}).values == state

        # prune keep_latest: one checkpoint left visible, same state, and the
        # thread goes on correctly from there.
        saver.prune(["t"], strategy="keep_latest")
        assert graph.get_state({"configurable": {"thread_id": "t"}}).values == state
        chat(graph, "t", 3, start=TURNS)
        assert graph.get_state({"configurable": {"thread_id": "t"}}).values["messages"][-1] == (
            f"ai {TURNS + 2}: " + "x" * 40
        )
        # The copy was not touched by any of it.
        assert snapshot(graph, "t-copy") == (state, history)


@pytest.mark.slow
async def test_async_500_turns_equal_in_memory(db_dsn: str, reference: Any) -> None:
    async with AsyncPostgresSaver.from_conn_string(db_dsn, pool={"max_size": 4}) as saver:
        graph = build().compile(checkpointer=saver)
        await achat(graph, "t", TURNS)
        state, history = await asnapshot(graph, "t")
        assert state == reference[0]
        assert history == reference[1]
        await saver.acopy_thread("t", "t2")
        await saver.aprune(["t"], strategy="keep_latest")
        assert (await graph.aget_state({"configurable": {"thread_id": "t"}})).values == state
        assert await asnapshot(graph, "t2") == (state, history)


def test_prune_while_thread_is_written_loses_nothing(db_dsn: str) -> None:
    """Prunes race a live run on the same thread; every turn survives."""
    with PostgresSaver.from_conn_string(db_dsn, pool={"max_size": 4}) as saver:
        graph = build().compile(checkpointer=saver)
        chat(graph, "live", 20)
        stop = threading.Event()
        errors: list[BaseException] = []

        def pruner() -> None:
            try:
                while not stop.is_set():
                    saver.prune(["live"], strategy="keep_latest")
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=pruner)
        worker.start()
        try:
            chat(graph, "live", 60, start=20)
        finally:
            stop.set()
            worker.join()
        assert not errors
        values = graph.get_state({"configurable": {"thread_id": "live"}}).values
        expected: list[str] = []
        for t in range(80):
            expected += [f"human {t}", f"ai {t}: " + "x" * 40]
        assert values["messages"] == expected


def test_interrupt_resume_with_delta_channel_after_prune(db_dsn: str) -> None:
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt("continue?")
        return {"messages": [f"answer {answer}"]}

    builder = build()
    builder.add_node("ask", ask)
    builder.add_edge("agent", "ask")
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "i"}}
        for t in range(12):
            graph.invoke({"messages": [f"human {t}"], "turn": t}, config)
            graph.invoke(Command(resume=t), config)
        graph.invoke({"messages": ["human last"], "turn": 99}, config)
        before = graph.get_state(config)
        saver.prune(["i"], strategy="keep_latest")
        after = graph.get_state(config)
        assert after.values == before.values
        assert after.next == ("ask",)
        graph.invoke(Command(resume="done"), config)
        assert graph.get_state(config).values["messages"][-1] == "answer done"

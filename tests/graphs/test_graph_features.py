"""Every graph feature a user relies on, run on our saver and on InMemorySaver, compared.

Each test runs for sync and async graphs over a connection, a pool and a
pipeline (see conftest.py). Node call counts are reset between the two runs.
"""

from __future__ import annotations

import operator
import time
from collections import Counter
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

from .conftest import GraphRunner, describe

CONFIG: RunnableConfig = {"configurable": {"thread_id": "thread-1"}}


class State(TypedDict, total=False):
    foo: str
    bar: Annotated[list[str], operator.add]


def linear(calls: Counter[str]) -> StateGraph[Any]:
    """START -> a -> b -> END, LangGraph's persistence example."""

    def a(state: State) -> State:
        calls["a"] += 1
        return {"foo": "a", "bar": ["a"]}

    def b(state: State) -> State:
        calls["b"] += 1
        return {"foo": state["foo"] + "+b", "bar": ["b"]}

    builder = StateGraph(State)
    builder.add_node("a", a)
    builder.add_node("b", b)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder


async def histories(run: GraphRunner, config: RunnableConfig = CONFIG) -> list[dict[str, Any]]:
    return [describe(s) for s in await run.history(config)]


async def test_linear_graph_leaves_the_four_documented_checkpoints(
    runs: tuple[GraphRunner, GraphRunner],
) -> None:
    mine, reference = runs
    seen = []
    for run in runs:
        run.compile(linear(Counter()))
        assert await run.invoke({"foo": ""}, CONFIG) == {"foo": "a+b", "bar": ["a", "b"]}
        seen.append(await histories(run))
    history = seen[0]
    # newest first, as get_state_history yields them
    assert [(h["values"], h["next"], h["source"], h["step"]) for h in history] == [
        ({"foo": "a+b", "bar": ["a", "b"]}, (), "loop", 2),
        ({"foo": "a", "bar": ["a"]}, ("b",), "loop", 1),
        ({"foo": "", "bar": []}, ("a",), "loop", 0),
        ({"bar": []}, ("__start__",), "input", -1),
    ]
    assert history == seen[1]
    assert describe(await mine.get_state(CONFIG)) == describe(await reference.get_state(CONFIG))
    stored = await mine.history(CONFIG)
    assert [s.parent_config for s in stored[:-1]] == [s.config for s in stored[1:]]


async def test_interrupt_then_resume_with_command(runs: tuple[GraphRunner, GraphRunner]) -> None:
    class Approval(TypedDict, total=False):
        request: str
        answer: str
        done: bool

    def ask(state: Approval) -> Approval:
        answer = interrupt({"question": f"approve {state['request']}?"})
        return {"answer": answer}

    def finish(state: Approval) -> Approval:
        return {"done": state["answer"] == "yes"}

    builder = StateGraph(Approval)
    builder.add_node("ask", ask)
    builder.add_node("finish", finish)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "finish")
    builder.add_edge("finish", END)

    seen = []
    for run in runs:
        run.compile(builder)
        paused = await run.invoke({"request": "payment"}, CONFIG)
        assert [i.value for i in paused["__interrupt__"]] == [{"question": "approve payment?"}]
        state = await run.get_state(CONFIG)
        assert state.next == ("ask",)
        assert [i.value for i in state.interrupts] == [{"question": "approve payment?"}]
        final = await run.invoke(Command(resume="yes"), CONFIG)
        assert final == {"request": "payment", "answer": "yes", "done": True}
        assert (await run.get_state(CONFIG)).next == ()
        seen.append(await histories(run))
    assert seen[0] == seen[1]


async def test_parallel_branch_failure_retries_only_the_failed_node(
    runs: tuple[GraphRunner, GraphRunner],
) -> None:
    class Fan(TypedDict, total=False):
        results: Annotated[list[str], operator.add]

    calls: Counter[str] = Counter()
    fail = {"p3": True}
    current: dict[str, GraphRunner] = {}

    def steady(name: str) -> Any:
        def node(state: Fan) -> Fan:
            calls[name] += 1
            return {"results": [name]}

        return node

    def others_saved() -> bool:
        # p1 and p2 have finished once the checkpointer holds their writes
        latest = current["run"].checkpointer.get_tuple(CONFIG)
        saved = {
            tuple(v) for _, ch, v in (latest.pending_writes if latest else []) if ch == "results"
        }
        return {("p1",), ("p2",)} <= saved

    def flaky(state: Fan) -> Fan:
        calls["p3"] += 1
        if fail["p3"]:
            deadline = time.monotonic() + 30
            while not others_saved():
                assert time.monotonic() < deadline, "p1 and p2 never saved their writes"
                time.sleep(0.02)
            raise RuntimeError("p3 failed")
        return {"results": ["p3"]}

    def join(state: Fan) -> Fan:
        calls["join"] += 1
        return {"results": ["join:" + ",".join(sorted(state["results"]))]}

    builder = StateGraph(Fan)
    for name, node in (("p1", steady("p1")), ("p2", steady("p2")), ("p3", flaky)):
        builder.add_node(name, node)
        builder.add_edge(START, name)
        builder.add_edge(name, "join")
    builder.add_node("join", join)
    builder.add_edge("join", END)

    seen = []
    for run in runs:
        calls.clear()
        fail["p3"] = True
        current["run"] = run
        run.compile(builder)
        with pytest.raises(RuntimeError, match="p3 failed"):
            await run.invoke({"results": []}, CONFIG)
        assert calls == {"p1": 1, "p2": 1, "p3": 1}
        failed = await run.get_state(CONFIG)
        # the two that finished have their writes saved: only p3 is left to run
        assert failed.next == ("p3",)
        assert {t.name: t.result for t in failed.tasks if t.result} == {
            "p1": {"results": ["p1"]},
            "p2": {"results": ["p2"]},
        }
        errors = {t.name: str(t.error) for t in failed.tasks if t.error}
        assert list(errors) == ["p3"] and "p3 failed" in errors["p3"]

        fail["p3"] = False
        final = await run.invoke(None, CONFIG)
        assert calls == {"p1": 1, "p2": 1, "p3": 2, "join": 1}, run.name
        assert sorted(final["results"][:3]) == ["p1", "p2", "p3"]
        assert final["results"][3] == "join:p1,p2,p3"
        seen.append(await histories(run))
    assert seen[0] == seen[1]


async def test_time_travel_replay_and_update_state_fork(
    runs: tuple[GraphRunner, GraphRunner],
) -> None:
    calls: Counter[str] = Counter()
    seen = []
    for run in runs:
        calls.clear()
        run.compile(linear(calls))
        await run.invoke({"foo": ""}, CONFIG)
        first_end = await run.get_state(CONFIG)
        before_b = next(s for s in await run.history(CONFIG) if s.next == ("b",))

        # replay: resume from a past checkpoint; b runs again, a does not
        replayed = await run.invoke(None, before_b.config)
        assert replayed == {"foo": "a+b", "bar": ["a", "b"]}
        assert calls == {"a": 1, "b": 2}
        lineage = await ancestors(run, await run.get_state(CONFIG))
        assert before_b.config in lineage
        assert first_end.config not in lineage

        # fork: edit that past state, then continue from the edit
        forked = await run.update_state(before_b.config, {"foo": "edited", "bar": ["x"]})
        fork_state = await run.get_state(forked)
        assert fork_state.values == {"foo": "edited", "bar": ["a", "x"]}
        assert fork_state.next == ("b",)
        assert fork_state.metadata["source"] == "update"
        assert before_b.config in await ancestors(run, fork_state)
        result = await run.invoke(None, forked)
        assert result == {"foo": "edited+b", "bar": ["a", "x", "b"]}
        assert calls == {"a": 1, "b": 3}
        # the original branch is still there, unchanged
        assert (await run.get_state(before_b.config)).values == {"foo": "a", "bar": ["a"]}
        seen.append(await histories(run))
    assert seen[0] == seen[1]


async def ancestors(run: GraphRunner, snapshot: Any) -> list[RunnableConfig]:
    """The configs of a snapshot's parent chain, nearest first."""
    chain = []
    while snapshot.parent_config is not None:
        chain.append(snapshot.parent_config)
        snapshot = await run.get_state(snapshot.parent_config)
    return chain


async def test_subgraph_state_lives_in_its_own_namespace(
    runs: tuple[GraphRunner, GraphRunner], saver: PostgresSaver | AsyncPostgresSaver
) -> None:
    class Outer(TypedDict, total=False):
        log: Annotated[list[str], operator.add]
        answer: str

    class Inner(TypedDict, total=False):
        steps: Annotated[list[str], operator.add]
        answer: str

    def sub_first(state: Inner) -> Inner:
        return {"steps": ["sub_first"]}

    def sub_ask(state: Inner) -> Inner:
        return {"answer": interrupt("inside the subgraph"), "steps": ["sub_ask"]}

    sub_builder = StateGraph(Inner)
    sub_builder.add_node("sub_first", sub_first)
    sub_builder.add_node("sub_ask", sub_ask)
    sub_builder.add_edge(START, "sub_first")
    sub_builder.add_edge("sub_first", "sub_ask")
    sub_builder.add_edge("sub_ask", END)
    subgraph = sub_builder.compile()

    builder = StateGraph(Outer)
    builder.add_node("before", lambda state: {"log": ["before"]})
    builder.add_node("child", subgraph)
    builder.add_node("after", lambda state: {"log": ["after"]})
    builder.add_edge(START, "before")
    builder.add_edge("before", "child")
    builder.add_edge("child", "after")
    builder.add_edge("after", END)

    seen = []
    for run in runs:
        run.compile(builder)
        await run.invoke({"log": []}, CONFIG)
        state = await run.get_state(CONFIG, subgraphs=True)
        assert state.next == ("child",)
        (task,) = state.tasks
        assert task.state is not None and not isinstance(task.state, dict)
        child = task.state
        assert child.values == {"steps": ["sub_first"]}
        assert child.next == ("sub_ask",)
        namespace = child.config["configurable"]["checkpoint_ns"]
        assert namespace.startswith("child:")
        assert [i.value for i in child.interrupts] == ["inside the subgraph"]

        final = await run.invoke(Command(resume="42"), CONFIG)
        assert final == {"log": ["before", "after"], "answer": "42"}
        inner: RunnableConfig = {
            "configurable": {"thread_id": "thread-1", "checkpoint_ns": namespace}
        }
        inner_history = await histories(run, inner)
        assert inner_history[0]["values"] == {"steps": ["sub_first", "sub_ask"], "answer": "42"}
        seen.append((await histories(run), inner_history))
    assert seen[0] == seen[1]

    # the subgraph's checkpoints are stored under its namespace of the same thread
    if isinstance(saver, AsyncPostgresSaver):
        stored = [t async for t in saver.alist({"configurable": {"thread_id": "thread-1"}})]
    else:
        stored = list(saver.list({"configurable": {"thread_id": "thread-1"}}))
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in stored}
    assert "" in namespaces
    assert any(ns.startswith("child:") for ns in namespaces)


class Work(TypedDict, total=False):
    items: list[int]
    squares: Annotated[list[int], operator.add]


class Item(TypedDict):
    item: int


async def test_send_fan_out(runs: tuple[GraphRunner, GraphRunner]) -> None:
    def fan_out(state: Work) -> list[Send]:
        return [Send("worker", {"item": i}) for i in state["items"]]

    def worker(state: Item) -> Work:
        return {"squares": [state["item"] ** 2]}

    builder = StateGraph(Work)
    builder.add_node("plan", lambda state: {})
    builder.add_node("worker", worker)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["worker"])
    builder.add_edge("worker", END)

    seen = []
    for run in runs:
        run.compile(builder)
        result = await run.invoke({"items": [1, 2, 3, 4, 5, 6, 7]}, CONFIG)
        # Send tasks apply in order of their sends, whatever order they finish in
        assert result["squares"] == [1, 4, 9, 16, 25, 36, 49]
        state = await run.get_state(CONFIG)
        assert state.next == ()
        seen.append(await histories(run))
    assert seen[0] == seen[1]
    sends = [h for h in seen[0] if h["next"] and set(h["next"]) == {"worker"}]
    assert len(sends) == 1 and len(sends[0]["tasks"]) == 7


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_durability_modes(runs: tuple[GraphRunner, GraphRunner], durability: str) -> None:
    class Approval(TypedDict, total=False):
        steps: Annotated[list[str], operator.add]

    def first(state: Approval) -> Approval:
        return {"steps": ["first"]}

    def gate(state: Approval) -> Approval:
        return {"steps": [f"gate:{interrupt('go?')}"]}

    def last(state: Approval) -> Approval:
        return {"steps": ["last"]}

    builder = StateGraph(Approval)
    for name, node in (("first", first), ("gate", gate), ("last", last)):
        builder.add_node(name, node)
    builder.add_edge(START, "first")
    builder.add_edge("first", "gate")
    builder.add_edge("gate", "last")
    builder.add_edge("last", END)

    seen = []
    for run in runs:
        run.compile(builder)
        await run.invoke({"steps": []}, CONFIG, durability=durability)
        paused = await run.get_state(CONFIG)
        assert paused.next == ("gate",)
        assert paused.values == {"steps": ["first"]}
        final = await run.invoke(Command(resume="go"), CONFIG, durability=durability)
        assert final == {"steps": ["first", "gate:go", "last"]}
        seen.append(await histories(run))
    assert seen[0] == seen[1]
    if durability == "exit":
        # only where each run stopped: at the interrupt, then at the end
        assert [h["next"] for h in seen[0]] == [(), ("gate",)]
    else:
        # input, first, gate (interrupted); after resuming: last, end
        assert len(seen[0]) == 5

"""`get_delta_channel_history`: the contract cases, checked against InMemorySaver.

Every scenario is written to InMemorySaver (LangGraph's reference) and to our
saver through the same calls; the histories must be equal.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

THREAD = "delta-thread"


def checkpoint(values: dict[str, Any], versions: dict[str, str]) -> dict[str, Any]:
    return {
        "v": 4,
        "id": str(uuid6()),
        "ts": datetime.now(timezone.utc).isoformat(),
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": {},
        "updated_channels": None,
    }


class Writer:
    """Drives one saver (sync, or async from a thread) through plain calls."""

    def __init__(self, saver: BaseCheckpointSaver[Any], ns: str = "") -> None:
        self.saver = saver
        self.ns = ns
        self.versions: dict[str, int] = {}

    def put(
        self,
        parent: str | None,
        values: dict[str, Any] | None = None,
        bump: tuple[str, ...] = (),
        metadata: dict[str, Any] | None = None,
    ) -> str:
        for ch in bump:
            self.versions[ch] = self.versions.get(ch, 0) + 1
        versions = {ch: f"{v:032}.0" for ch, v in self.versions.items()}
        cp = checkpoint(values or {}, versions)
        config: dict[str, Any] = {"configurable": {"thread_id": THREAD, "checkpoint_ns": self.ns}}
        if parent:
            config["configurable"]["checkpoint_id"] = parent
        new_versions = {ch: versions[ch] for ch in bump}
        self.saver.put(config, cp, metadata or {"source": "loop", "step": 0}, new_versions)  # type: ignore[arg-type]
        return str(cp["id"])

    def write(
        self, at: str, writes: list[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        config = {
            "configurable": {"thread_id": THREAD, "checkpoint_ns": self.ns, "checkpoint_id": at}
        }
        self.saver.put_writes(config, writes, task_id, task_path)  # type: ignore[arg-type]

    def history(self, target: str, channels: list[str]) -> Any:
        config = {
            "configurable": {"thread_id": THREAD, "checkpoint_ns": self.ns, "checkpoint_id": target}
        }
        return self.saver.get_delta_channel_history(config=config, channels=channels)  # type: ignore[arg-type]


Scenario = Callable[[Writer], tuple[str, list[str]]]


def linear_writes(w: Writer) -> tuple[str, list[str]]:
    root = w.put(None, {"msgs": _DeltaSnapshot(["s0"])}, bump=("msgs",))
    w.write(root, [("msgs", ["a"])], "task-1", "~a")
    c1 = w.put(root, {}, bump=("msgs",))
    w.write(c1, [("msgs", ["b"])], "task-2", "~a")
    c2 = w.put(c1, {}, bump=("msgs",))
    w.write(c2, [("msgs", ["c"]), ("other", 1)], "task-3", "~a")
    c3 = w.put(c2, {}, bump=("msgs",))
    w.write(c3, [("msgs", ["pending, excluded"])], "task-4", "~a")
    return c3, ["msgs"]


def seed_absent_at_root(w: Writer) -> tuple[str, list[str]]:
    root = w.put(None, {}, bump=())
    w.write(root, [("msgs", ["a"])], "task-1")
    c1 = w.put(root, {}, bump=("msgs",))
    w.write(c1, [("msgs", ["b"])], "task-2")
    c2 = w.put(c1, {}, bump=("msgs",))
    return c2, ["msgs"]


def channels_at_different_depths(w: Writer) -> tuple[str, list[str]]:
    root = w.put(None, {"a": _DeltaSnapshot([0]), "b": _DeltaSnapshot(["x"])}, bump=("a", "b"))
    w.write(root, [("a", [1]), ("b", ["y"])], "t1")
    c1 = w.put(root, {}, bump=("a", "b"))
    w.write(c1, [("a", [2])], "t2")
    c2 = w.put(c1, {"a": _DeltaSnapshot([0, 1, 2])}, bump=("a",))
    w.write(c2, [("a", [3]), ("b", ["z"])], "t3")
    c3 = w.put(c2, {}, bump=("a", "b"))
    return c3, ["a", "b", "never-written"]


def fork_isolation(w: Writer) -> tuple[str, list[str]]:
    root = w.put(None, {"msgs": _DeltaSnapshot([])}, bump=("msgs",))
    w.write(root, [("msgs", ["shared"])], "t1")
    c1 = w.put(root, {}, bump=("msgs",))
    w.write(c1, [("msgs", ["branch A"])], "ta")
    a2 = w.put(c1, {}, bump=("msgs",))
    w.write(c1, [("msgs", ["branch B"])], "tb")
    b2 = w.put(c1, {}, bump=("msgs",))
    w.write(b2, [("msgs", ["after B"])], "tb2")
    w.put(b2, {}, bump=("msgs",))
    w.write(a2, [("msgs", ["after A"])], "ta2")
    a3 = w.put(a2, {}, bump=("msgs",))
    return a3, ["msgs"]


def plain_value_seed(w: Writer) -> tuple[str, list[str]]:
    root = w.put(None, {"msgs": ["plain", "list"], "title": "draft"}, bump=("msgs", "title"))
    w.write(root, [("msgs", ["delta 1"]), ("title", "final")], "t1")
    c1 = w.put(root, {}, bump=("msgs", "title"))
    w.write(c1, [("msgs", ["delta 2"])], "t2")
    c2 = w.put(c1, {}, bump=("msgs",))
    return c2, ["msgs", "title"]


def parallel_task_order(w: Writer) -> tuple[str, list[str]]:
    root = w.put(None, {"msgs": _DeltaSnapshot([])}, bump=("msgs",))
    # Saved in an order unlike live order: by task_path, then task_id, then idx.
    w.write(root, [("msgs", ["z-path"])], "task-a", "~__pregel_pull, z")
    w.write(root, [("msgs", ["b-path 0"]), ("msgs", ["b-path 1"])], "task-z", "~__pregel_pull, b")
    w.write(root, [("msgs", ["no path"])], "task-m", "")
    w.write(root, [("msgs", ["b-path other task"])], "task-c", "~__pregel_pull, b")
    c1 = w.put(root, {}, bump=("msgs",))
    return c1, ["msgs"]


def missing_target(w: Writer) -> tuple[str, list[str]]:
    w.put(None, {"msgs": _DeltaSnapshot(["s"])}, bump=("msgs",))
    return str(uuid6()), ["msgs"]


def empty_channels(w: Writer) -> tuple[str, list[str]]:
    root = w.put(None, {}, bump=())
    return root, []


def inline_primitive_seed(w: Writer) -> tuple[str, list[str]]:
    root = w.put(None, {"count": 3, "label": None}, bump=("count", "label"))
    w.write(root, [("count", 4)], "t1")
    c1 = w.put(root, {}, bump=("count",))
    return c1, ["count", "label"]


SCENARIOS: list[Scenario] = [
    linear_writes,
    seed_absent_at_root,
    channels_at_different_depths,
    fork_isolation,
    plain_value_seed,
    parallel_task_order,
    missing_target,
    empty_channels,
    inline_primitive_seed,
]


def run_scenario(saver: BaseCheckpointSaver[Any], scenario: Scenario, ns: str = "") -> Any:
    writer = Writer(saver, ns)
    target, channels = scenario(writer)
    return writer.history(target, channels)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_sync_history_equals_in_memory(db_dsn: str, scenario: Scenario) -> None:
    expected = run_scenario(InMemorySaver(), scenario)
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        got = run_scenario(saver, scenario)
        # A subgraph namespace on the same thread neither sees nor disturbs it.
        assert run_scenario(saver, scenario, ns="child:1") == expected
    assert got == expected


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_async_history_equals_in_memory(db_dsn: str, scenario: Scenario) -> None:
    expected = run_scenario(InMemorySaver(), scenario)
    async with AsyncPostgresSaver.from_conn_string(db_dsn, pool=True) as saver:
        # The scenario uses the sync API, which the async saver serves from
        # another thread; the result is then read through the async method too.
        writer = Writer(saver)
        target, channels = await asyncio.to_thread(scenario, writer)
        config = {
            "configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": target}
        }
        got = await saver.aget_delta_channel_history(config=config, channels=channels)  # type: ignore[arg-type]
    assert got == expected


def test_linear_case_in_detail(db_dsn: str) -> None:
    """The expected shape, spelled out, so the oracle itself is checked."""
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        got = run_scenario(saver, linear_writes)
    assert got["msgs"]["seed"] == _DeltaSnapshot(["s0"])
    assert [w[2] for w in got["msgs"]["writes"]] == [["a"], ["b"], ["c"]]
    assert [w[0] for w in got["msgs"]["writes"]] == ["task-1", "task-2", "task-3"]


def test_history_is_one_round_trip(db_dsn: str) -> None:
    """However deep the chain, the history is read with a single statement."""
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        writer = Writer(saver)
        parent = writer.put(None, {"msgs": _DeltaSnapshot([])}, bump=("msgs",))
        for i in range(300):
            writer.write(parent, [("msgs", [i])], f"task-{i}")
            parent = writer.put(parent, {}, bump=("msgs",))
        statements: list[str] = []
        run = saver.run

        def counting(op: Any, **kwargs: Any) -> Any:
            def watched() -> Any:
                stmt = next(op)
                while True:
                    statements.append(stmt.name)
                    try:
                        stmt = op.send((yield stmt))
                    except StopIteration as done:
                        return done.value

            return run(watched(), name=kwargs.get("name"))

        saver.run = counting  # type: ignore[method-assign]
        got = writer.history(parent, ["msgs"])
    assert statements == ["delta_channel_history"]
    assert [w[2] for w in got["msgs"]["writes"]] == [[i] for i in range(300)]


def test_default_walk_agrees(db_dsn: str) -> None:
    """The base class's get_tuple walk over our saver gives the same answer."""
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        for scenario in (channels_at_different_depths, fork_isolation, plain_value_seed):
            saver.delete_thread(THREAD)
            writer = Writer(saver)
            target, channels = scenario(writer)
            config = {
                "configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": target}
            }
            fast = saver.get_delta_channel_history(config=config, channels=channels)  # type: ignore[arg-type]
            walked = BaseCheckpointSaver.get_delta_channel_history(
                saver,
                config=config,  # type: ignore[arg-type]
                channels=channels,
            )
            assert fast == walked, scenario.__name__


def test_seed_messages_edited_in_place_leave_the_next_read_alone(db_dsn: str) -> None:
    """A node may edit a message it got, even inside it (tool call arguments, content
    blocks, additional_kwargs): the decoded seed kept for the next call must not see it."""
    stored = [
        AIMessage(
            content=[{"type": "text", "text": "hi"}],
            id="a1",
            tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "c1"}],
        ),
        HumanMessage("yo", id="h1"),
    ]
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        writer = Writer(saver)
        root = writer.put(None, {"msgs": _DeltaSnapshot(list(stored))}, bump=("msgs",))
        target = writer.put(root, {}, bump=("msgs",))
        first = writer.history(target, ["msgs"])["msgs"]["seed"].value
        first[0].tool_calls[0]["args"]["q"] = "edited"
        first[0].content.append({"type": "text", "text": "more"})
        first[0].additional_kwargs["seen"] = True
        first[1].content = "edited"
        second = writer.history(target, ["msgs"])["msgs"]["seed"].value
        assert second == stored
        assert second[0].tool_calls[0]["args"] == {"q": "x"}


def test_writes_read_again_are_fresh_copies_of_what_is_stored(db_dsn: str) -> None:
    """Writes on the path are kept decoded between calls too: editing a returned one
    in place leaves the next read alone, and a special write stored again (a new
    attempt's error) reads as its new value."""
    reply = AIMessage("hi", id="a1", tool_calls=[{"name": "f", "args": {"q": "x"}, "id": "c1"}])
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        writer = Writer(saver)
        root = writer.put(None, {"msgs": _DeltaSnapshot([])}, bump=("msgs",))
        writer.write(root, [("msgs", [reply]), ("__error__", "first attempt")], "t1")
        target = writer.put(root, {}, bump=("msgs",))
        first = writer.history(target, ["msgs", "__error__"])
        got = first["msgs"]["writes"][0][2]
        got[0].tool_calls[0]["args"]["q"] = "edited"
        got.append(HumanMessage("extra"))
        again = writer.history(target, ["msgs", "__error__"])
        assert again["msgs"]["writes"] == [("t1", "msgs", [reply])]
        assert again["__error__"]["writes"] == [("t1", "__error__", "first attempt")]
        writer.write(root, [("__error__", "second attempt")], "t1")  # replaces the first
        third = writer.history(target, ["__error__"])
        assert third["__error__"]["writes"] == [("t1", "__error__", "second attempt")]


def test_signature_matches_base() -> None:
    base = inspect.signature(BaseCheckpointSaver.get_delta_channel_history)
    assert inspect.signature(PostgresSaver.get_delta_channel_history) == base


def test_seed_read_twice_is_not_shared(db_dsn: str) -> None:
    """Seeds are kept decoded between calls; each caller still gets its own copy."""
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        writer = Writer(saver)
        root = writer.put(
            None, {"msgs": _DeltaSnapshot([{"text": "a"}, {"text": "b"}])}, bump=("msgs",)
        )
        writer.write(root, [("msgs", [{"text": "c"}])], "t1")
        target = writer.put(root, {}, bump=("msgs",))
        first = writer.history(target, ["msgs"])["msgs"]["seed"]
        first.value.append({"text": "mutated"})
        first.value[0]["text"] = "mutated"
        second = writer.history(target, ["msgs"])["msgs"]["seed"]
        assert second == _DeltaSnapshot([{"text": "a"}, {"text": "b"}])
        # A thread deleted and written again with the same version strings
        # reads its new values, not the old ones.
        saver.delete_thread(THREAD)
        writer = Writer(saver)
        root = writer.put(None, {"msgs": _DeltaSnapshot([{"text": "new"}])}, bump=("msgs",))
        target = writer.put(root, {}, bump=("msgs",))
        assert writer.history(target, ["msgs"])["msgs"]["seed"] == _DeltaSnapshot([{"text": "new"}])

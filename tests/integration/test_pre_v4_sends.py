"""A checkpoint older than LangGraph's format v4 reads back with its parent's sends.

Before format v4 the `Send` packets of a step were pending writes of the
checkpoint's parent to `__pregel_tasks`; older LangGraph wrote such
checkpoints, and the deprecated `empty_checkpoint()` / `create_checkpoint()`
helpers still do (format 2). `get_tuple` and `list` move them into the
checkpoint's `channel_values["__pregel_tasks"]`, as `langgraph-checkpoint-postgres`
reads them (`pgcheckpoint.core.sends`), on both drivers, plain or encrypted,
and a graph goes on from such a checkpoint as it does on the official saver.
"""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator
from typing import Annotated, Any

import psycopg
import pytest
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver
from langgraph.checkpoint.serde.types import TASKS
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from support.savers import VARIANTS, Saver, SaverApi, open_variant
from typing_extensions import TypedDict

from pgcheckpoint import AsyncPostgresSaver, EncryptedSerde

SERDES = {"plain": None, "encrypted": EncryptedSerde(keys={"k1": bytes(range(32))})}


@pytest.fixture(params=[f"{v}-{s}" for v in VARIANTS for s in sorted(SERDES)])
async def legacy_saver(request: pytest.FixtureRequest, db_dsn: str) -> AsyncIterator[Saver]:
    """A saver of each variant (`support.savers.VARIANTS`), plain and encrypting."""
    variant, serde = request.param.rsplit("-", 1)
    async with open_variant(variant, db_dsn, serde=SERDES[serde]) as opened:
        yield opened


def config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


async def a_step_with_sends(api: SaverApi, thread_id: str) -> tuple[Any, Any]:
    """Two checkpoints of format 2 (the deprecated helpers): the first holds the
    sends of a step, written by two tasks, the second is its child."""
    first = empty_checkpoint()
    at = await api.put(config(thread_id), first, {"step": -1, "source": "input"}, {})
    # written out of order: they come back as writes_sort_key orders them (task, then idx)
    await api.put_writes(at, [(TASKS, {"n": 2}), (TASKS, {"n": 3})], "task-b")
    await api.put_writes(at, [(TASKS, {"n": 1}), ("other", "not a send")], "task-a")
    second = create_checkpoint(first, {}, 0)
    child = await api.put(at, second, {"step": 0, "source": "loop"}, {})
    return at, child


SENT = [{"n": 1}, {"n": 2}, {"n": 3}]


async def test_get_tuple_and_list_move_the_parents_sends_into_the_checkpoint(
    legacy_saver: Saver,
) -> None:
    api = SaverApi(legacy_saver)
    parent, child = await a_step_with_sends(api, "t")

    tup = await api.get_tuple(child)
    assert tup.checkpoint["v"] == 2
    assert tup.checkpoint["channel_values"] == {TASKS: SENT}
    # no other version to take the newest of: a first version, as the official gives it
    assert list(tup.checkpoint["channel_versions"]) == [TASKS]
    assert tup.checkpoint["channel_versions"][TASKS].startswith(f"{1:032}.")
    assert tup.pending_writes == []
    latest = await api.get_tuple(config("t"))
    assert latest.checkpoint["channel_values"] == {TASKS: SENT}
    # the parent keeps them as its writes, and holds no such value itself
    held = await api.get_tuple(parent)
    assert held.checkpoint["channel_values"] == {}
    assert [w for w in held.pending_writes if w[1] == TASKS] == [
        ("task-a", TASKS, {"n": 1}),
        ("task-b", TASKS, {"n": 2}),
        ("task-b", TASKS, {"n": 3}),
    ]

    # a listing holding the parent, one that does not, across threads, and filtered
    for listing in (
        await api.list(config("t")),
        await api.list(config("t"), limit=1),
        await api.list(None, limit=1),
        await api.list(config("t"), filter={"source": "loop"}),
    ):
        assert listing[0].config == child
        assert listing[0].checkpoint["channel_values"] == {TASKS: SENT}
        assert TASKS in listing[0].checkpoint["channel_versions"]
    listed = await api.list(config("t"))
    assert [t.config for t in listed] == [child, parent]
    assert listed[1].checkpoint["channel_values"] == {}


async def test_the_checkpoints_other_versions_give_the_sends_their_version(
    legacy_saver: Saver,
) -> None:
    api = SaverApi(legacy_saver)
    first = empty_checkpoint()
    first["channel_values"] = {"count": 1, "items": ["a"]}
    first["channel_versions"] = {"count": f"{1:032}.5", "items": f"{1:032}.5"}
    at = await api.put(config("t"), first, {"step": -1}, dict(first["channel_versions"]))
    await api.put_writes(at, [(TASKS, Send("work", {"n": 1}))], "fan")
    second = create_checkpoint(first, None, 0)
    # `items` unchanged since the parent: its older version is not the newest
    second["channel_values"] = {"count": 2, "items": ["a"]}
    second["channel_versions"] = {"count": f"{2:032}.5", "items": f"{1:032}.5"}
    child = await api.put(at, second, {"step": 0}, {"count": f"{2:032}.5"})

    for tup in (await api.get_tuple(child), (await api.list(config("t"), limit=1))[0]):
        assert tup.checkpoint["channel_values"] == {
            "count": 2,
            "items": ["a"],
            TASKS: [Send("work", {"n": 1})],
        }
        assert tup.checkpoint["channel_versions"] == {
            "count": f"{2:032}.5",
            "items": f"{1:032}.5",
            TASKS: f"{2:032}.5",
        }
    # a parent that sent nothing: the checkpoint reads as it was stored
    third = create_checkpoint(second, None, 1)
    grandchild = await api.put(child, third, {"step": 1}, {})
    tup = await api.get_tuple(grandchild)
    assert tup.checkpoint["channel_versions"] == second["channel_versions"]
    assert TASKS not in tup.checkpoint["channel_values"]


async def test_the_sends_handed_out_are_the_callers_own(legacy_saver: Saver) -> None:
    api = SaverApi(legacy_saver)
    parent, child = await a_step_with_sends(api, "t")
    # a fork: another child of the same parent
    fork = await api.put(parent, create_checkpoint(empty_checkpoint(), {}, 0), {"step": 0}, {})

    tup = await api.get_tuple(child)
    tup.checkpoint["channel_values"][TASKS][0]["n"] = "edited"
    tup.checkpoint["channel_versions"].clear()
    assert (await api.get_tuple(child)).checkpoint["channel_values"] == {TASKS: SENT}
    for _ in range(2):
        listed = await api.list(config("t"))
        assert [t.config for t in listed] == [fork, child, parent]
        sends = [t.checkpoint["channel_values"][TASKS] for t in listed[:2]]
        assert sends == [SENT, SENT]
        held = [w[2] for w in listed[2].pending_writes if w[1] == TASKS]
        # each its own: the two children's, and the parent's own writes
        objects = [id(s) for s in [*sends[0], *sends[1], *held]]
        assert len(set(objects)) == len(objects)
        sends[0][0]["n"] = "edited"


class State(TypedDict, total=False):
    items: Annotated[list[int], operator.add]


def work(arg: dict[str, int]) -> dict[str, list[int]]:
    return {"items": [arg["n"] * 10]}


def fan_out(state: State) -> list[Send]:
    return [Send("work", {"n": n}) for n in (1, 2)]


def graph(checkpointer: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("work", work)
    builder.add_conditional_edges(START, fan_out, ["work"])
    builder.add_edge("work", END)
    return builder.compile(checkpointer=checkpointer)


async def stop_after_sending(api: SaverApi, thread_id: str) -> None:
    """The checkpoints an older LangGraph left after a step that sent two packets:
    format 2, the sends as writes of the parent."""
    first = empty_checkpoint()
    first["channel_values"] = {"items": [0]}
    first["channel_versions"] = {"items": api.saver.get_next_version(None, None)}
    versions = dict(first["channel_versions"])
    at = await api.put(config(thread_id), first, {"step": -1, "source": "input"}, versions)
    sends = [(TASKS, Send("work", {"n": 1})), (TASKS, Send("work", {"n": 2}))]
    await api.put_writes(at, sends, "fan")
    await api.put(at, create_checkpoint(first, None, 0), {"step": 0, "source": "loop"}, {})


async def test_a_graph_goes_on_from_a_checkpoint_of_format_2_as_on_the_official_saver(
    legacy_saver: Saver, db_dsn: str
) -> None:
    # the official saver, in a schema of its own of the same database
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA lg")
    with psycopg.connect(db_dsn, autocommit=True, options="-c search_path=lg") as conn:
        official = OfficialSaver(conn)
        official.setup()
        await stop_after_sending(SaverApi(official), "t")
        theirs = graph(official)
        their_state = theirs.get_state(config("t"))
        their_out = theirs.invoke(None, config("t"))
        their_history = [s.metadata["step"] for s in theirs.get_state_history(config("t"))]
    assert their_out == {"items": [0, 10, 20]}

    await stop_after_sending(SaverApi(legacy_saver), "t")
    mine = graph(legacy_saver)
    if isinstance(legacy_saver, AsyncPostgresSaver):
        state = await mine.aget_state(config("t"))
        out = await mine.ainvoke(None, config("t"))
        history = [s.metadata["step"] async for s in mine.aget_state_history(config("t"))]
    else:
        state = mine.get_state(config("t"))
        out = mine.invoke(None, config("t"))
        history = [s.metadata["step"] for s in mine.get_state_history(config("t"))]
    assert state.next == their_state.next == ("work", "work")
    assert [t.name for t in state.tasks] == [t.name for t in their_state.tasks]
    assert state.values == their_state.values
    assert out == their_out
    assert history == their_history

"""put / put_writes / get_tuple / list: what a graph reads back is what it stored."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ERROR,
    INTERRUPT,
    RESUME,
    WRITES_IDX_MAP,
    writes_sort_key,
)
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from psycopg.types.json import Jsonb
from support.savers import SaverApi

from pgcheckpoint.codec.metadata import metadata_matches


def thread() -> str:
    return f"t-{uuid.uuid4()}"


async def put_chain(
    api: SaverApi, thread_id: str, n: int, *, ns: str = "", **metadata: Any
) -> list[RunnableConfig]:
    """`n` checkpoints, each the child of the one before; returns their configs."""
    configs: list[RunnableConfig] = []
    parent: RunnableConfig | None = None
    for step in range(n):
        config = generate_config(thread_id, checkpoint_ns=ns)
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        md = generate_metadata(step=step, **metadata)
        parent = await api.put(config, generate_checkpoint(), md, {})
        configs.append(parent)
    return configs


def ids(tuples: list[Any]) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in tuples]


# -- get_tuple -------------------------------------------------------------------


async def test_get_tuple_latest_and_by_id_with_parent_config(api: SaverApi) -> None:
    tid = thread()
    configs = await put_chain(api, tid, 3)
    assert configs[0] == {
        "configurable": {
            "thread_id": tid,
            "checkpoint_ns": "",
            "checkpoint_id": configs[0]["configurable"]["checkpoint_id"],
        }
    }

    latest = await api.get_tuple({"configurable": {"thread_id": tid}})
    assert latest is not None
    assert latest.config == configs[2]
    assert latest.parent_config == configs[1]
    assert latest.metadata["step"] == 2

    first = await api.get_tuple(configs[0])
    assert first is not None
    assert first.config == configs[0]
    assert first.parent_config is None
    assert first.metadata == {"source": "loop", "step": 0, "parents": {}}

    middle = await api.get_tuple(configs[1])
    assert middle is not None and middle.parent_config == configs[0]

    missing = generate_config(tid, checkpoint_id=str(uuid.uuid4()))
    assert await api.get_tuple(missing) is None
    assert await api.get_tuple(generate_config(thread())) is None
    # another namespace of the same thread is another history
    assert await api.get_tuple(generate_config(tid, checkpoint_ns="child:1")) is None


async def test_channel_values_come_from_the_version_each_checkpoint_saw(api: SaverApi) -> None:
    saver = api.saver
    tid = thread()
    v1 = {ch: saver.get_next_version(None, None) for ch in ("items", "doc", "count", "note")}
    values1 = {
        "items": [1, 2, 3],
        "doc": {"title": "x", "body": "é" * 5000},  # large enough to be compressed
        "count": 7,
        "note": None,
    }
    cp1 = generate_checkpoint(channel_values=values1, channel_versions=dict(v1))
    config1 = await api.put(generate_config(tid), cp1, generate_metadata(step=0), v1)

    # the next step changes only `items`: LangGraph passes every value but new
    # versions only for the channels that changed
    v2 = dict(v1, items=saver.get_next_version(v1["items"], None))
    values2 = dict(values1, items=[1, 2, 3, 4])
    cp2 = generate_checkpoint(channel_values=values2, channel_versions=dict(v2))
    config2 = await api.put(config1, cp2, generate_metadata(step=1), {"items": v2["items"]})

    tup1 = await api.get_tuple(config1)
    tup2 = await api.get_tuple(config2)
    assert tup1 is not None and tup2 is not None
    assert tup1.checkpoint["channel_values"] == values1
    assert tup1.checkpoint["channel_versions"] == v1
    assert tup2.checkpoint["channel_values"] == values2
    assert tup2.checkpoint["channel_versions"] == v2
    assert tup2.checkpoint["id"] == cp2["id"]
    assert tup2.checkpoint["versions_seen"] == cp2["versions_seen"]


async def test_pending_writes_come_back_in_writes_sort_key_order(api: SaverApi) -> None:
    tid = thread()
    (config,) = await put_chain(api, tid, 1)
    # (task_id, task_path, writes), saved in an order that is not the sort order
    tasks = [
        ("t-z", "~__pregel_pull, b", [("x", "zb0"), ("y", "zb1")]),
        ("t-b", "~__pregel_push, 0000000001", [("x", "b0")]),
        ("t-a", "~__pregel_pull, B", [("x", "aB0"), (ERROR, "boom")]),
        ("t-c", "~__pregel_push, 0000000000", [("x", "c0"), ("x", "c1")]),
        ("t-y", "~__pregel_pull, a", [(INTERRUPT, "wait"), ("x", "ya0")]),
        ("t-0", "", [(RESUME, "yes")]),
    ]
    expected: list[tuple[tuple[str, str, int], tuple[str, str, Any]]] = []
    for task_id, path, writes in tasks:
        await api.put_writes(config, writes, task_id, path)
        for position, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, position)
            expected.append((writes_sort_key(path, task_id, idx), (task_id, channel, value)))
    expected.sort(key=lambda e: e[0])

    tup = await api.get_tuple(config)
    assert tup is not None
    assert tup.pending_writes == [write for _, write in expected]
    # list yields the same writes as get_tuple
    (listed,) = await api.list(config)
    assert [w[:2] for w in listed.pending_writes] == [w[:2] for w in tup.pending_writes]


async def test_a_retried_task_keeps_its_first_writes_but_its_latest_error(api: SaverApi) -> None:
    (config,) = await put_chain(api, thread(), 1)
    await api.put_writes(config, [("x", "first")], "task", "~__pregel_pull, n")
    await api.put_writes(config, [("x", "second")], "task", "~__pregel_pull, n")
    await api.put_writes(config, [(ERROR, "one")], "task", "~__pregel_pull, n")
    await api.put_writes(config, [(ERROR, "two")], "task", "~__pregel_pull, n")
    await api.put_writes(config, [], "other", "")
    tup = await api.get_tuple(config)
    assert tup is not None
    by_channel = {channel: value for _, channel, value in tup.pending_writes}
    assert len(tup.pending_writes) == 2
    assert by_channel["x"] == "first"
    assert by_channel[ERROR] == "two"


async def test_writes_saved_twice_before_their_namespace_has_a_checkpoint(api: SaverApi) -> None:
    """LangGraph may save a task's writes before the checkpoint they belong to; a
    second save of them (a retry) is done, not a thread deleted under the run."""
    checkpoint = generate_checkpoint()
    config = generate_config(thread(), checkpoint_ns="sub:1", checkpoint_id=checkpoint["id"])
    for _ in range(2):
        await api.put_writes(config, [("x", "first")], "task", "")
        await api.put_writes(config, [("x", "first"), ("y", 2)], "both", "")
    await api.put(
        generate_config(config["configurable"]["thread_id"], checkpoint_ns="sub:1"),
        checkpoint,
        generate_metadata(),
        {},
    )
    tup = await api.get_tuple(config)
    assert tup is not None
    expected = [("both", "x", "first"), ("both", "y", 2), ("task", "x", "first")]
    assert sorted(tup.pending_writes) == expected


async def test_put_over_an_existing_checkpoint_replaces_it(api: SaverApi) -> None:
    tid = thread()
    cp = generate_checkpoint(channel_values={"n": 1}, channel_versions={"n": "1"})
    config = await api.put(generate_config(tid), cp, generate_metadata(step=0), {"n": "1"})
    cp2 = dict(cp, channel_values={"n": 2})
    await api.put(generate_config(tid), cp2, generate_metadata(step=5), {"n": "1"})
    tup = await api.get_tuple(config)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {"n": 2}
    assert tup.metadata["step"] == 5
    assert len(await api.list(generate_config(tid))) == 1


# -- list ---------------------------------------------------------------------------


async def test_list_by_thread_namespace_id_before_and_limit(api: SaverApi) -> None:
    tid, other = thread(), thread()
    root = await put_chain(api, tid, 4)
    child = await put_chain(api, tid, 2, ns="sub:1")
    await put_chain(api, other, 2)

    everything = await api.list({"configurable": {"thread_id": tid}})
    # newest first, every namespace of the thread when checkpoint_ns is not given
    assert ids(everything) == sorted(ids(everything), reverse=True)
    assert set(ids(everything)) == set(ids_of(root + child))

    assert ids(await api.list(generate_config(tid))) == ids_of(root)[::-1]
    assert ids(await api.list(generate_config(tid, checkpoint_ns="sub:1"))) == ids_of(child)[::-1]

    one = await api.list(root[1])
    assert ids(one) == ids_of(root[1:2])

    before = await api.list(generate_config(tid), before=root[2])
    assert ids(before) == ids_of(root[:2])[::-1]

    assert ids(await api.list(generate_config(tid), limit=2)) == ids_of(root[2:])[::-1]
    assert ids(await api.list(generate_config(tid), before=root[3], limit=1)) == ids_of(root[2:3])
    assert await api.list(generate_config(tid), limit=0) == []
    assert await api.list(generate_config(thread())) == []


async def test_list_before_a_checkpoint_as_the_agent_server_passes_it(api: SaverApi) -> None:
    # LangGraph's Agent Server hands `before` on as its API's checkpoint: the ids at
    # the top, no `configurable` (the SDK's history call with `before=`)
    tid = thread()
    root = await put_chain(api, tid, 4)
    await put_chain(api, tid, 2, ns="sub:1")
    mark = root[2]["configurable"]
    checkpoint = {
        "thread_id": tid,
        "checkpoint_ns": "",
        "checkpoint_id": mark["checkpoint_id"],
        "checkpoint_map": {},
    }
    assert ids(await api.list(generate_config(tid), before=checkpoint)) == ids_of(root[:2])[::-1]
    assert ids(await api.list(generate_config(tid), before=checkpoint, limit=1)) == ids_of(
        root[1:2]
    )
    every_namespace = await api.list({"configurable": {"thread_id": tid}}, before=checkpoint)
    assert ids(every_namespace) == ids_of(root[:2])[::-1]


async def test_list_across_threads_when_config_is_none(api: SaverApi) -> None:
    first, second = thread(), thread()
    a = await put_chain(api, first, 2, owner="alice")
    b = await put_chain(api, second, 3, owner="bob")
    everything = await api.list(None)
    assert set(ids(everything)) == set(ids_of(a + b))
    assert ids(everything) == sorted(ids(everything), reverse=True)
    assert {t.config["configurable"]["thread_id"] for t in everything} == {first, second}

    bobs = await api.list(None, filter={"owner": "bob"})
    assert set(ids(bobs)) == set(ids_of(b))
    assert len(await api.list(None, filter={"owner": "bob"}, limit=2)) == 2
    assert ids(await api.list(None, before=b[0])) == ids_of(a)[::-1]


def ids_of(configs: list[RunnableConfig]) -> list[str]:
    return [c["configurable"]["checkpoint_id"] for c in configs]


async def test_metadata_filter_on_keys_langgraph_does_not_know(api: SaverApi) -> None:
    tid = thread()
    config = generate_config(tid)
    metadata: dict[str, Any] = {
        "source": "input",
        "step": -1,
        "parents": {},
        "tenant": {"region": "eu-west", "tags": ["gold", "beta"], "limits": {"rpm": 60}},
        "score": 0.25,
        "flag": False,
        "nothing": None,
        "big": 2**62,
        "unicode": "ünïcødé ✓",
    }
    stored = await api.put(config, generate_checkpoint(), metadata, {})
    await put_chain(api, tid, 1, tenant={"region": "us-east", "tags": ["gold"]})

    tup = await api.get_tuple(stored)
    assert tup is not None and tup.metadata == metadata

    async def found(filter: dict[str, Any]) -> list[str]:
        return ids(await api.list(generate_config(tid), filter=filter))

    me = [stored["configurable"]["checkpoint_id"]]
    assert await found({"tenant": {"region": "eu-west"}}) == me
    assert await found({"tenant": {"limits": {"rpm": 60}}}) == me
    assert await found({"tenant": {"tags": ["beta"]}}) == me
    assert len(await found({"tenant": {"tags": ["gold"]}})) == 2
    assert await found({"score": 0.25, "flag": False, "nothing": None}) == me
    assert await found({"big": 2**62}) == me
    assert await found({"unicode": "ünïcødé ✓"}) == me
    assert await found({"source": "input", "step": -1}) == me
    assert await found({"tenant": {"region": "nowhere"}}) == []
    assert await found({"not_a_key": 1}) == []
    assert await found({"flag": 0}) == []
    assert len(await found({})) == 2


async def test_config_keys_are_kept_in_metadata_and_filterable(api: SaverApi) -> None:
    tid = thread()
    config: RunnableConfig = {
        "configurable": {"thread_id": tid, "checkpoint_ns": "", "user_id": "u-1", "__secret": 1},
        "metadata": {"assistant": "helper"},
    }
    stored = await api.put(config, generate_checkpoint(), generate_metadata(step=0), {})
    tup = await api.get_tuple(stored)
    assert tup is not None
    assert tup.metadata["user_id"] == "u-1"
    assert tup.metadata["assistant"] == "helper"
    assert "__secret" not in tup.metadata
    assert ids(await api.list(None, filter={"user_id": "u-1", "assistant": "helper"})) == [
        stored["configurable"]["checkpoint_id"]
    ]


# -- metadata_matches agrees with the JSONB containment it stands in for -----------

CONTAINMENT_CASES: list[tuple[Any, Any]] = [
    ({"a": 1}, {"a": 1}),
    ({"a": 1}, {"a": 1.0}),
    ({"a": 1}, {"a": True}),
    ({"a": True}, {"a": 1}),
    ({"a": 0}, {"a": False}),
    ({"a": None}, {"a": None}),
    ({"a": None}, {"b": None}),
    ({"a": "x"}, {"a": ["x"]}),
    ({"a": ["x"]}, {"a": "x"}),
    ({"a": ["x", "y"]}, {"a": ["y"]}),
    ({"a": ["x", "y"]}, {"a": []}),
    ({"a": [["x", "y"], "z"]}, {"a": [["x"]]}),
    ({"a": [{"b": 1, "c": 2}]}, {"a": [{"b": 1}]}),
    ({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"c": 1}}}),
    ({"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 1, "d": 2}}}),
    ({"a": {"b": 1}}, {"a": {}}),
    ({"a": {}}, {"a": {"b": 1}}),
    ({"a": []}, {"a": {}}),
    ({"a": "1"}, {"a": 1}),
    ({"a": 1}, {}),
]


@pytest.mark.parametrize(("metadata", "filter"), CONTAINMENT_CASES)
def test_metadata_matches_agrees_with_jsonb_containment(
    db_dsn: str, metadata: Any, filter: Any
) -> None:
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT %s::jsonb @> %s::jsonb", [Jsonb(metadata), Jsonb(filter)])
        (jsonb_says,) = row.fetchone() or (None,)
    assert metadata_matches(metadata, filter) is jsonb_says

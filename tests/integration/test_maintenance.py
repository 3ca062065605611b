"""delete_thread, copy_thread, prune, delete_for_runs: what goes, what stays, nothing dangling."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from support.rows import TABLES, rows_of
from support.savers import SaverApi

from pgcheckpoint import InvalidInputError


def thread() -> str:
    return f"t-{uuid.uuid4()}"


async def put_history(
    api: SaverApi,
    thread_id: str,
    *,
    ns: str = "",
    steps: int = 3,
    run_id: str | None = None,
    entry_size: int = 0,
    config: RunnableConfig | None = None,
) -> list[RunnableConfig]:
    """A thread's history as a graph leaves it: channel `doc` written once at the
    start and never again, `log` growing every step, one task's writes per checkpoint.

    Entries of `entry_size` characters or more make `log` long enough for the
    saver to store later versions as appends to earlier ones.
    """
    saver = api.saver
    versions: dict[str, str] = {}
    values: dict[str, Any] = {}
    configs: list[RunnableConfig] = []
    if config is not None:
        parent = await api.get_tuple(config)
        assert parent is not None
        versions = dict(parent.checkpoint["channel_versions"])
        values = dict(parent.checkpoint["channel_values"])
    else:
        config = generate_config(thread_id, checkpoint_ns=ns)
    start = len(values.get("log", []))
    for step in range(start, start + steps):
        new: dict[str, str] = {}
        if step == 0:
            new["doc"] = saver.get_next_version(None, None)
            values["doc"] = {"title": "kept from step 0", "body": list(range(50))}
        new["log"] = saver.get_next_version(versions.get("log"), None)
        values["log"] = [f"entry {i} ".ljust(entry_size, "-") for i in range(step + 1)]
        versions.update(new)
        checkpoint = generate_checkpoint(
            channel_values=dict(values), channel_versions=dict(versions)
        )
        metadata = generate_metadata(step=step)
        if run_id is not None:
            metadata["run_id"] = run_id
        config = await api.put(config, checkpoint, metadata, new)
        await api.put_writes(
            config, [("log", f"write {step}")], f"task-{step}", "~__pregel_pull, a"
        )
        configs.append(config)
    return configs


async def snapshot(api: SaverApi, thread_id: str) -> list[tuple[Any, ...]]:
    """Everything `list` tells about a thread, without its thread id."""
    return [
        (
            t.config["configurable"]["checkpoint_ns"],
            t.config["configurable"]["checkpoint_id"],
            t.checkpoint,
            t.metadata,
            t.parent_config and t.parent_config["configurable"]["checkpoint_id"],
            t.pending_writes,
        )
        for t in await api.list({"configurable": {"thread_id": thread_id}})
    ]


async def test_delete_thread_removes_every_row_of_that_thread_only(
    api: SaverApi, db_dsn: str
) -> None:
    doomed, kept = thread(), thread()
    await put_history(api, doomed)
    await put_history(api, doomed, ns="sub:1")
    await put_history(api, kept)
    before = await snapshot(api, kept)

    await api.delete_thread(doomed)

    assert await api.list({"configurable": {"thread_id": doomed}}) == []
    assert await api.get_tuple(generate_config(doomed)) is None
    assert rows_of(db_dsn, doomed) == dict.fromkeys(TABLES, 0)
    assert await snapshot(api, kept) == before
    await api.delete_thread(thread())  # a thread that never existed: nothing to do


async def test_copy_thread_copies_every_namespace_with_values_and_writes(
    api: SaverApi, db_dsn: str
) -> None:
    source, target = thread(), thread()
    await put_history(api, source)
    await put_history(api, source, ns="sub:1", steps=2)
    before = await snapshot(api, source)

    await api.copy_thread(source, target)

    assert await snapshot(api, target) == before
    assert await snapshot(api, source) == before
    assert rows_of(db_dsn, target) == rows_of(db_dsn, source)
    latest = await api.get_tuple(generate_config(target))
    assert latest is not None
    assert latest.config["configurable"]["thread_id"] == target
    assert latest.parent_config is not None
    assert latest.parent_config["configurable"]["thread_id"] == target

    # the copy is independent of its source
    await api.delete_thread(source)
    assert await snapshot(api, target) == before


@pytest.mark.parametrize("entry_size", [0, 400], ids=["small", "appended"])
async def test_prune_keep_latest_keeps_each_namespace_head_whole(
    api: SaverApi, db_dsn: str, entry_size: int
) -> None:
    tid, other = thread(), thread()
    root = await put_history(api, tid, steps=4, entry_size=entry_size)
    child = await put_history(api, tid, ns="sub:1", steps=3, entry_size=entry_size)
    await put_history(api, other)
    heads = {}
    for config in (root[-1], child[-1]):
        tup = await api.get_tuple(config)
        assert tup is not None
        heads[config["configurable"]["checkpoint_ns"]] = tup
    other_before = await snapshot(api, other)

    await api.prune([tid], strategy="keep_latest")

    listed = await api.list({"configurable": {"thread_id": tid}})
    assert {t.config["configurable"]["checkpoint_ns"]: t.config for t in listed} == {
        ns: head.config for ns, head in heads.items()
    }
    for ns, head in heads.items():
        tup = await api.get_tuple(generate_config(tid, checkpoint_ns=ns))
        assert tup is not None
        # `doc` was last written at step 0, which is gone; its value must not be
        assert tup.checkpoint == head.checkpoint
        assert tup.checkpoint["channel_values"]["doc"]["title"] == "kept from step 0"
        assert tup.pending_writes == head.pending_writes
        assert tup.metadata == head.metadata
    rows = rows_of(db_dsn, tid)
    assert (rows["pgc_checkpoints"], rows["pgc_writes"]) == (2, 2)
    if not entry_size:
        # small values are stored whole: only the blobs the two heads use remain
        assert rows["pgc_blobs"] == 4
    assert await snapshot(api, other) == other_before

    await api.prune([tid], strategy="keep_latest")  # idempotent
    assert len(await api.list({"configurable": {"thread_id": tid}})) == 2


async def test_prune_delete_removes_the_threads(api: SaverApi, db_dsn: str) -> None:
    first, second, kept = thread(), thread(), thread()
    for tid in (first, second, kept):
        await put_history(api, tid)
    await api.prune([first, second], strategy="delete")
    for tid in (first, second):
        assert rows_of(db_dsn, tid) == dict.fromkeys(TABLES, 0)
    assert len(await api.list({"configurable": {"thread_id": kept}})) == 3
    await api.prune([], strategy="delete")


async def test_prune_refuses_bad_arguments(api: SaverApi) -> None:
    with pytest.raises(InvalidInputError, match="unknown prune strategy 'everything'"):
        await api.prune([thread()], strategy="everything")
    with pytest.raises(InvalidInputError, match="list of thread ids"):
        await api.prune("one-thread-id")


async def test_delete_for_runs_keeps_the_values_a_later_run_builds_on(api: SaverApi) -> None:
    tid = thread()
    first = await put_history(api, tid, steps=4, run_id="run-1", entry_size=400)
    second = await put_history(api, tid, steps=2, run_id="run-2", entry_size=400, config=first[-1])
    expected = [await api.get_tuple(config) for config in second]

    await api.delete_for_runs(["run-1"])

    remaining = await api.list({"configurable": {"thread_id": tid}})
    assert [t.config for t in remaining] == second[::-1]
    for want in expected:
        assert want is not None
        got = await api.get_tuple(want.config)
        assert got is not None
        assert got.checkpoint == want.checkpoint
        assert len(got.checkpoint["channel_values"]["log"]) in (5, 6)
        assert got.checkpoint["channel_values"]["doc"]["title"] == "kept from step 0"


async def test_delete_for_runs_removes_only_those_runs_checkpoints(
    api: SaverApi, db_dsn: str
) -> None:
    tid, other = thread(), thread()
    first = await put_history(api, tid, steps=2, run_id="run-1")
    # the second run continues the same thread from the first run's head
    second = []
    config = first[-1]
    for step in range(2):
        checkpoint = generate_checkpoint()
        metadata = generate_metadata(step=10 + step)
        metadata["run_id"] = "run-2"
        config = await api.put(config, checkpoint, metadata, {})
        await api.put_writes(config, [("x", step)], f"r2-{step}", "")
        second.append(config)
    await put_history(api, other, run_id="run-1")

    await api.delete_for_runs(["run-1"])

    remaining = await api.list({"configurable": {"thread_id": tid}})
    assert [t.config for t in remaining] == second[::-1]
    assert [t.metadata["run_id"] for t in remaining] == ["run-2", "run-2"]
    assert all(len(t.pending_writes) == 1 for t in remaining)
    assert rows_of(db_dsn, other) == dict.fromkeys(TABLES, 0)
    with psycopg.connect(db_dsn) as conn:
        (writes,) = conn.execute(
            "SELECT count(*) FROM pgc_writes WHERE thread_id = %s", [tid]
        ).fetchone() or (None,)
    assert writes == 2

    await api.delete_for_runs(["no-such-run"])
    await api.delete_for_runs([])
    assert len(await api.list({"configurable": {"thread_id": tid}})) == 2

"""NUL characters and missing ids: stored intact, or refused before anything is written."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from support.rows import total_rows
from support.savers import SaverApi

from pgcheckpoint import InvalidInputError
from pgcheckpoint.codec.metadata import json_projection

NUL_METADATA: dict[str, Any] = {
    "source": "loop",
    "step": 1,
    "parents": {},
    "note": "before\x00after",
    "nested": {"list": ["\x00", {"deep": "a\x00b", "k\x00ey": ["\x00\x00"]}], "ok": "fine"},
    "k\x00": "NUL in a key",
}


async def test_nul_in_metadata_at_any_depth_reads_back_intact(api: SaverApi) -> None:
    tid = f"t-{uuid.uuid4()}"
    stored = await api.put(generate_config(tid), generate_checkpoint(), NUL_METADATA, {})
    tup = await api.get_tuple(stored)
    assert tup is not None and tup.metadata == NUL_METADATA
    (listed,) = await api.list(generate_config(tid))
    assert listed.metadata == NUL_METADATA


async def test_filters_on_values_with_nul_match_exactly(api: SaverApi) -> None:
    tid = f"t-{uuid.uuid4()}"
    mine = await api.put(generate_config(tid), generate_checkpoint(), NUL_METADATA, {})
    # a look-alike: NUL_METADATA as its JSONB projection holds it, every NUL replaced
    lookalike, lossy = json_projection(NUL_METADATA)
    assert lossy and lookalike != NUL_METADATA
    await api.put(generate_config(tid), generate_checkpoint(), lookalike, {})
    for _ in range(3):
        await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(), {})

    async def found(filter: dict[str, Any], **kwargs: Any) -> list[str]:
        listed = await api.list(generate_config(tid), filter=filter, **kwargs)
        return [t.config["configurable"]["checkpoint_id"] for t in listed]

    me = [mine["configurable"]["checkpoint_id"]]
    assert await found({"note": "before\x00after"}) == me
    assert await found({"note": "before\x00after"}, limit=1) == me
    assert await found({"nested": {"list": [{"deep": "a\x00b"}]}}) == me
    assert await found({"k\x00": "NUL in a key"}, limit=1) == me
    assert await found({"note": "before\x00other"}) == []


async def test_nul_in_string_channel_values_and_writes_reads_back_intact(
    api: SaverApi,
) -> None:
    tid = f"t-{uuid.uuid4()}"
    values = {
        "text": "a\x00b",
        "items": ["\x00", "x\x00y", {"k\x00": "v\x00"}],
        "only_nul": "\x00",
    }
    versions = {ch: api.saver.get_next_version(None, None) for ch in values}
    checkpoint = generate_checkpoint(channel_values=values, channel_versions=dict(versions))
    stored = await api.put(generate_config(tid), checkpoint, generate_metadata(), versions)
    await api.put_writes(stored, [("text", "w\x00"), ("items", ["\x00"])], "task", "")
    tup = await api.get_tuple(stored)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == values
    assert tup.pending_writes == [("task", "text", "w\x00"), ("task", "items", ["\x00"])]


NUL_CONFIGS = {
    "thread_id": {"configurable": {"thread_id": "t\x00", "checkpoint_ns": ""}},
    "checkpoint_ns": {"configurable": {"thread_id": "t", "checkpoint_ns": "sub\x00:1"}},
}


@pytest.mark.parametrize("where", sorted(NUL_CONFIGS))
async def test_nul_in_thread_id_or_namespace_is_refused_before_writing(
    api: SaverApi, db_dsn: str, where: str
) -> None:
    config: RunnableConfig = NUL_CONFIGS[where]
    values = {"items": [1, 2]}
    checkpoint = generate_checkpoint(channel_values=values, channel_versions={"items": "1"})
    with pytest.raises(InvalidInputError, match=f"'{where}' contains a NUL character"):
        await api.put(config, checkpoint, generate_metadata(), {"items": "1"})
    with_id: RunnableConfig = {
        "configurable": dict(config["configurable"], checkpoint_id=checkpoint["id"])
    }
    with pytest.raises(InvalidInputError, match=f"'{where}' contains a NUL character"):
        await api.put_writes(with_id, [("items", [3])], "task", "")
    with pytest.raises(InvalidInputError, match=f"'{where}' contains a NUL character"):
        await api.get_tuple(config)
    with pytest.raises(InvalidInputError, match=f"'{where}' contains a NUL character"):
        await api.list(config)
    assert total_rows(db_dsn) == 0
    # the connection is still usable afterwards
    ok = await api.put(generate_config("t"), checkpoint, generate_metadata(), {"items": "1"})
    assert (await api.get_tuple(ok)) is not None


async def test_nul_in_thread_ids_of_maintenance_calls_is_refused(
    api: SaverApi, db_dsn: str
) -> None:
    stored = await api.put(generate_config("keep"), generate_checkpoint(), generate_metadata(), {})
    for call, args in [
        ("delete_thread", ("keep\x00",)),
        ("copy_thread", ("keep", "copy\x00")),
        ("copy_thread", ("keep\x00", "copy")),
        ("prune", (["keep", "x\x00"],)),
        ("delete_for_runs", (["run\x00"],)),
    ]:
        with pytest.raises(InvalidInputError, match="contains a NUL character"):
            await getattr(api, call)(*args)
    assert total_rows(db_dsn) == 1
    assert await api.get_tuple(stored) is not None


async def test_nul_in_task_id_or_channel_of_writes_is_refused_before_writing(
    api: SaverApi, db_dsn: str
) -> None:
    stored = await api.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
    with pytest.raises(InvalidInputError, match="'task_id' contains a NUL character"):
        await api.put_writes(stored, [("a", 1)], "task\x00", "")
    with pytest.raises(InvalidInputError, match="'channel' contains a NUL character"):
        await api.put_writes(stored, [("a", 1), ("b\x00", 2)], "task", "")
    tup = await api.get_tuple(stored)
    assert tup is not None and tup.pending_writes == []
    assert total_rows(db_dsn) == 1


@pytest.mark.parametrize(
    "config",
    [{"configurable": {}}, {"configurable": {"checkpoint_ns": ""}}, {}],
    ids=["no-thread-id", "ns-only", "no-configurable"],
)
async def test_missing_thread_id_says_so(
    api: SaverApi, db_dsn: str, config: RunnableConfig
) -> None:
    with pytest.raises(InvalidInputError, match="'thread_id'"):
        await api.put(config, generate_checkpoint(), generate_metadata(), {})
    with pytest.raises(InvalidInputError, match="'thread_id'"):
        await api.get_tuple(config)
    with_id: RunnableConfig = {
        "configurable": {**config.get("configurable", {}), "checkpoint_id": "x"}
    }
    with pytest.raises(InvalidInputError, match="'thread_id'"):
        await api.put_writes(with_id, [("a", 1)], "task", "")
    assert total_rows(db_dsn) == 0


async def test_missing_checkpoint_id_for_writes_says_so(api: SaverApi) -> None:
    with pytest.raises(InvalidInputError, match="'checkpoint_id' is missing"):
        await api.put_writes(generate_config("t"), [("a", 1)], "task", "")


# -- wrong types and numbers out of range: one clear InvalidInputError ----------------


@pytest.mark.parametrize("thread_id", [["t"], ("t",), {"t"}, {"t": 1}, b"t", True])
async def test_an_id_that_is_not_one_id_is_refused(
    api: SaverApi, db_dsn: str, thread_id: Any
) -> None:
    await api.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
    before = total_rows(db_dsn)
    with pytest.raises(InvalidInputError, match="thread_id"):
        await api.delete_thread(thread_id)  # a list would have become the string "['t']"
    with pytest.raises(InvalidInputError, match="thread_id"):
        await api.copy_thread(thread_id, "other")
    with pytest.raises(InvalidInputError, match="thread_id"):
        await api.prune([thread_id])
    with pytest.raises(InvalidInputError, match="thread_id"):
        await api.list(generate_config(thread_id))
    assert total_rows(db_dsn) == before


@pytest.mark.parametrize("strategy", ["keep_latest", "delete"])
async def test_one_thread_id_as_a_string_is_a_type_error_and_prunes_nothing(
    api: SaverApi, db_dsn: str, strategy: str
) -> None:
    for tid in ("ab", "a", "b"):  # what iterating "ab" would have pruned
        for _ in range(2):
            await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(), {})
    before = total_rows(db_dsn)
    # a TypeError, as the official saver raises, and still an InvalidInputError
    with pytest.raises(TypeError, match="not a str") as refused:
        await api.prune("ab", strategy=strategy)
    assert isinstance(refused.value, InvalidInputError)
    assert "pass ['ab'] for one" in str(refused.value)
    with pytest.raises(TypeError, match="not a str"):
        await api.delete_for_runs("run-1")
    assert total_rows(db_dsn) == before


@pytest.mark.parametrize(
    ("limit", "message"), [(True, "must be an int"), (-1, "at least 0"), ("3", "must be an int")]
)
async def test_list_limit_must_be_a_count(api: SaverApi, limit: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        await api.list(None, limit=limit)


async def test_a_limit_past_any_table_is_no_limit(api: SaverApi) -> None:
    tid = f"t-{uuid.uuid4()}"
    await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(), {})
    assert len(await api.list(generate_config(tid), limit=10**30)) == 1


async def test_retention_numbers_out_of_range_are_refused(api: SaverApi) -> None:
    from datetime import timedelta

    with pytest.raises(InvalidInputError, match="oldest time PostgreSQL stores"):
        await api.prune_older_than(timedelta(days=999_999_999))
    with pytest.raises(InvalidInputError, match="keep must be at most"):
        await api.prune_keep_last(2**31)
    with pytest.raises(InvalidInputError, match="batch_size must be at most"):
        await api.prune_keep_last(1, batch_size=2**40)
    with pytest.raises(InvalidInputError, match="max_seconds"):
        await api.prune_keep_last(1, max_seconds=float("nan"))

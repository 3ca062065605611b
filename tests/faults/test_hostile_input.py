"""Hostile input: stored and read back intact, or refused before anything is written.

`tests/integration/test_bad_input.py` covers NUL characters and missing ids in
put, put_writes, get_tuple and list; this covers the rest of issue 10's list:
any unicode in every string field, lone surrogates, 10 KB and non-string ids,
metadata filters that look like SQL or JSON path syntax, values the serializer
cannot encode, the other methods without a thread id, and `before` from
another thread.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from support.checkpoints import with_values
from support.rows import total_rows
from support.savers import SaverApi, open_saver

from pgcheckpoint import InvalidInputError

VARIANTS = ["sync-own-conn", "sync-own-pool", "async-own-conn", "async-own-pool"]


@pytest.fixture(params=VARIANTS)
async def api(request: pytest.FixtureRequest, db_dsn: str) -> AsyncIterator[SaverApi]:
    driver, kind = request.param.split("-", 1)
    async with open_saver(driver, kind, db_dsn, pool={"min_size": 1}) as opened:
        yield opened


def ids(tuples: list[CheckpointTuple]) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in tuples]


# -- unicode -----------------------------------------------------------------------

UNICODE = {
    "emoji": "😀 👩‍👩‍👧‍👦 🏳️‍🌈",
    "rtl": "עברית العربية \u202eoverride\u202c",
    "combining": "e\u0301 a\u0308 \u1100\u1161",
    "invisible": "zero\u200bwidth\u200djoiner\ufeffbom\u00a0nbsp",
    "astral": "\U0001d518\U0001d52b\U0001d526 \U00010348 \U0010fffd",
    "controls": "tab\tnewline\nbell\x07escape\x1b",
    "syntax": "quote ' \" \\ %s %(thread_id)s {schema} $1 -- /*",
}


async def test_any_unicode_in_every_string_field_reads_back_intact(api: SaverApi) -> None:
    text = " | ".join(UNICODE.values())
    thread_id = f"{UNICODE['emoji']} {UNICODE['rtl']} {uuid.uuid4()}"
    ns = f"{UNICODE['combining']}:{UNICODE['astral']}"
    channel = f"chan {UNICODE['invisible']}"
    values = {
        channel: [text, {text: text}],
        "plain": text,  # a string channel, stored inline
        "nested": {"k": [UNICODE["syntax"], {UNICODE["rtl"]: UNICODE["controls"]}]},
    }
    checkpoint, versions = with_values(values, checkpoint_id=f"{uuid.uuid4()} {UNICODE['rtl']}")
    metadata = generate_metadata(**{f"key {name}": value for name, value in UNICODE.items()})
    metadata["run_id"] = f"run {UNICODE['emoji']}"
    metadata["nested"] = {UNICODE["astral"]: [UNICODE["syntax"]]}
    config = generate_config(thread_id, checkpoint_ns=ns)
    stored = await api.put(config, checkpoint, metadata, versions)
    assert stored["configurable"] == {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": checkpoint["id"],
    }
    task_id, task_path = f"task {UNICODE['astral']}", f"path {UNICODE['combining']}"
    await api.put_writes(stored, [(channel, text), ("plain", UNICODE["rtl"])], task_id, task_path)

    tup = await api.get_tuple(stored)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == values
    assert tup.metadata == {**metadata}
    assert tup.pending_writes == [(task_id, channel, text), (task_id, "plain", UNICODE["rtl"])]
    # filters on unicode keys and values, nested too
    for key, value in [("key emoji", UNICODE["emoji"]), ("nested", metadata["nested"])]:
        assert ids(await api.list(config, filter={key: value})) == [checkpoint["id"]]
    assert ids(await api.list(None, filter={"key rtl": UNICODE["rtl"]})) == [checkpoint["id"]]
    # the maintenance calls take the same ids
    copy = f"{thread_id} copy 📋"
    await api.copy_thread(thread_id, copy)
    copied = await api.get_tuple(generate_config(copy, checkpoint_ns=ns))
    assert copied is not None and copied.checkpoint["channel_values"] == values
    await api.delete_for_runs([metadata["run_id"]])
    assert await api.get_tuple(stored) is None
    await api.prune([copy], strategy="delete")
    assert await api.list(generate_config(copy, checkpoint_ns=ns)) == []


async def _reference(
    checkpoint: Checkpoint, metadata: dict[str, Any], versions: dict[str, str]
) -> CheckpointTuple:
    memory = InMemorySaver()
    stored = memory.put(generate_config("t"), checkpoint, metadata, versions)  # type: ignore[arg-type]
    tup = memory.get_tuple(stored)
    assert tup is not None
    return tup


async def test_lone_surrogates_in_values_are_stored_as_langgraph_serializes_them(
    api: SaverApi,
) -> None:
    """LangGraph's serializer stores a lone surrogate as '?' (OPT_REPLACE_SURROGATES).

    The same as InMemorySaver: what the serializer makes of a value is the value.
    """
    values = {"items": ["\ud800", {"k": "a\udfffb"}], "pair": "\ud83d\ude00"}
    checkpoint, versions = with_values(values)
    metadata = generate_metadata(note="lone \udc80")
    expected = await _reference(checkpoint, dict(metadata), versions)
    stored = await api.put(generate_config(f"t-{uuid.uuid4()}"), checkpoint, metadata, versions)
    tup = await api.get_tuple(stored)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == expected.checkpoint["channel_values"]
    assert tup.checkpoint["channel_values"]["items"] == ["?", {"k": "a?b"}]
    assert tup.metadata["note"] == expected.metadata["note"] == "lone ?"
    # a filter on the original string matches nothing, as in InMemorySaver
    assert await api.list(stored, filter={"note": "lone \udc80"}) == []


SURROGATE_IDS = {
    "thread_id": {"configurable": {"thread_id": "t\ud800", "checkpoint_ns": ""}},
    "checkpoint_ns": {"configurable": {"thread_id": "t", "checkpoint_ns": "ns\udfff"}},
}


@pytest.mark.parametrize("where", sorted(SURROGATE_IDS))
async def test_lone_surrogates_in_ids_are_refused_before_writing(
    api: SaverApi, db_dsn: str, where: str
) -> None:
    config: RunnableConfig = SURROGATE_IDS[where]
    checkpoint, versions = with_values({"items": [1]})
    with pytest.raises(InvalidInputError, match=f"'{where}' contains an unpaired surrogate"):
        await api.put(config, checkpoint, generate_metadata(), versions)
    with pytest.raises(InvalidInputError, match="unpaired surrogate"):
        await api.get_tuple(config)
    stored = await api.put(generate_config("t"), checkpoint, generate_metadata(), versions)
    for task_id, channel, name in [("task\ud800", "a", "task_id"), ("task", "a\udc00", "channel")]:
        with pytest.raises(InvalidInputError, match=f"'{name}' contains an unpaired surrogate"):
            await api.put_writes(stored, [(channel, 1)], task_id)
    with pytest.raises(InvalidInputError, match="unpaired surrogate"):
        await api.copy_thread("t", "u\ud800")
    assert total_rows(db_dsn) == 2  # the one good checkpoint and its blob


async def test_a_metadata_key_the_serializer_cannot_encode_is_refused(
    api: SaverApi, db_dsn: str
) -> None:
    metadata = generate_metadata(**{"key \ud800": 1})
    with pytest.raises(TypeError):
        InMemorySaver().put(generate_config("t"), generate_checkpoint(), metadata, {})
    with pytest.raises(InvalidInputError, match="cannot store the metadata of checkpoint"):
        await api.put(generate_config("t"), generate_checkpoint(), metadata, {})
    assert total_rows(db_dsn) == 0


# -- long and non-string ids ---------------------------------------------------------


async def test_ten_kilobyte_thread_id_is_refused_before_writing(api: SaverApi, db_dsn: str) -> None:
    huge = "x" * 10_240
    config = generate_config(huge)
    checkpoint, versions = with_values({"items": [1, 2]})
    refused = "'thread_id' is 10240 bytes long; the limit is 1024 bytes"
    with pytest.raises(InvalidInputError, match=refused):
        await api.put(config, checkpoint, generate_metadata(), versions)
    with_id = generate_config(huge, checkpoint_id=checkpoint["id"])
    with pytest.raises(InvalidInputError, match=refused):
        await api.put_writes(with_id, [("items", [3])], "task")
    with pytest.raises(InvalidInputError, match=refused):
        await api.get_tuple(config)
    with pytest.raises(InvalidInputError, match=refused):
        await api.list(config)
    for call, args in [
        ("delete_thread", (huge,)),
        ("copy_thread", ("t", huge)),
        ("copy_thread", (huge, "t")),
        ("prune", (["t", huge],)),
    ]:
        with pytest.raises(InvalidInputError, match=refused):
            await getattr(api, call)(*args)
    assert total_rows(db_dsn) == 0
    # the limit counts UTF-8 bytes: 1,024 of them fit, 1,025 do not
    fits = "€" * 341 + "x"  # 3 * 341 + 1 = 1,024 bytes
    stored = await api.put(generate_config(fits), checkpoint, generate_metadata(), versions)
    assert (await api.get_tuple(stored)) is not None
    with pytest.raises(InvalidInputError, match="is 1025 bytes long"):
        await api.get_tuple(generate_config(fits + "x"))


async def test_non_string_ids_are_stored_as_their_text(api: SaverApi) -> None:
    number = 4_200_000 + uuid.uuid4().int % 1000
    as_uuid = uuid.uuid4()
    for raw, text in [(number, str(number)), (as_uuid, str(as_uuid))]:
        config: RunnableConfig = {"configurable": {"thread_id": raw, "checkpoint_ns": ""}}
        checkpoint, versions = with_values({"items": [text]})
        stored = await api.put(config, checkpoint, generate_metadata(), versions)
        assert stored["configurable"]["thread_id"] == text
        await api.put_writes(stored, [("items", [1])], uuid.uuid4())  # a UUID task id
        by_raw = await api.get_tuple(config)
        by_text = await api.get_tuple(generate_config(text))
        assert by_raw is not None and by_text is not None
        assert by_raw.config == by_text.config == stored
        assert by_raw.checkpoint["channel_values"] == {"items": [text]}
        assert [w[1:] for w in by_raw.pending_writes] == [("items", [1])]
        assert ids(await api.list(config)) == [checkpoint["id"]]
        await api.delete_thread(raw)
        assert await api.get_tuple(generate_config(text)) is None


async def test_bytes_ids_are_refused(api: SaverApi, db_dsn: str) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": b"t1", "checkpoint_ns": ""}}
    with pytest.raises(InvalidInputError, match="'thread_id' must be a string, not bytes"):
        await api.put(config, generate_checkpoint(), generate_metadata(), {})
    assert total_rows(db_dsn) == 0


# -- metadata filters that look like SQL or JSON path syntax -------------------------

LOOKALIKES = [
    "'; DROP TABLE pgc_checkpoints; --",
    "' OR '1'='1",
    "$.source",
    "$[*] ? (@ == 1)",
    "a->>'b'",
    "a #> '{b,c}'",
    "{a,b}",
    "@>",
    "?|",
    "%s",
    "%(thread_id)s",
    "{schema}",
    "a.b[0]",
    "*",
    "\\",
    "null",
    "",
]


async def test_metadata_filters_that_look_like_sql_or_json_path_match_literally(
    api: SaverApi, db_dsn: str
) -> None:
    tid = f"t-{uuid.uuid4()}"
    config = generate_config(tid)
    stored: dict[int, str] = {}
    for i, text in enumerate(LOOKALIKES):
        metadata = generate_metadata(step=i, **{text: text, "v": text, "nested": {text: [text]}})
        done = await api.put(config, generate_checkpoint(), metadata, {})
        stored[i] = done["configurable"]["checkpoint_id"]
    for i, text in enumerate(LOOKALIKES):
        expected = [stored[i]]
        assert ids(await api.list(config, filter={text: text})) == expected, text
        assert ids(await api.list(config, filter={"v": text})) == expected, text
        assert ids(await api.list(config, filter={"nested": {text: [text]}})) == expected, text
        assert ids(await api.list(config, filter={"v": text}, limit=1)) == expected, text
    # a key that is only a prefix or a path of another key matches nothing
    for path in ["v.0", "nested.@>", "nested->'@>'", "$.v", "v'"]:
        assert await api.list(config, filter={path: LOOKALIKES[0]}) == []
    assert total_rows(db_dsn) == len(LOOKALIKES)


# -- values the serializer cannot handle ---------------------------------------------


def _unserializable() -> list[tuple[str, Any]]:
    sock = socket.socket()
    sock.close()  # still a socket object; closed, so no ResourceWarning
    return [
        ("function", lambda x: x),
        ("socket", sock),
        ("lock", threading.Lock()),
        ("int", 2**70),
    ]


UNSERIALIZABLE = _unserializable()


@pytest.mark.parametrize(("kind", "value"), UNSERIALIZABLE, ids=[k for k, _ in UNSERIALIZABLE])
async def test_unserializable_values_are_refused_before_anything_is_written(
    api: SaverApi, db_dsn: str, kind: str, value: Any
) -> None:
    tid = f"t-{uuid.uuid4()}"
    # a channel value: the put is refused whole, the good channel with it
    checkpoint, versions = with_values({"good": [1, 2], "bad": [value]})
    with pytest.raises(InvalidInputError, match="cannot store the value of channel 'bad'") as err:
        await api.put(generate_config(tid), checkpoint, generate_metadata(), versions)
    assert isinstance(err.value.__cause__, TypeError)  # the serializer's own error
    assert repr(tid) in str(err.value)
    # metadata
    with pytest.raises(InvalidInputError, match="cannot store the metadata of checkpoint"):
        await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(x=value), {})
    assert total_rows(db_dsn) == 0
    # a write: none of the task's writes is stored, the good one neither
    stored = await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(), {})
    with pytest.raises(InvalidInputError, match="cannot store the write 1 of task 'task'"):
        await api.put_writes(stored, [("good", 1), ("bad", value)], "task")
    tup = await api.get_tuple(stored)
    assert tup is not None and tup.pending_writes == []
    assert total_rows(db_dsn) == 1


# -- other methods without a thread id --------------------------------------------------


async def test_other_methods_without_a_thread_id_say_so(api: SaverApi, db_dsn: str) -> None:
    with pytest.raises(InvalidInputError, match="'thread_id' is missing"):
        await api.delete_thread(None)
    with pytest.raises(InvalidInputError, match="'thread_id' is missing"):
        await api.copy_thread(None, "t")
    with pytest.raises(InvalidInputError, match="'thread_id' is missing"):
        await api.copy_thread("t", None)
    with pytest.raises(InvalidInputError, match="'thread_id' is missing"):
        await api.prune([None])
    with pytest.raises(InvalidInputError, match="'thread_id'"):
        await api.get_delta_channel_history(config={"configurable": {}}, channels=["m"])
    assert total_rows(db_dsn) == 0


async def test_list_with_a_config_without_thread_id_lists_across_threads(api: SaverApi) -> None:
    marker = str(uuid.uuid4())
    for tid in ("a", "b"):
        await api.put(generate_config(tid), generate_checkpoint(), generate_metadata(m=marker), {})
    across = await api.list(None, filter={"m": marker})
    assert len(across) == 2
    for config in ({"configurable": {}}, {}):
        assert ids(await api.list(config, filter={"m": marker})) == ids(across)


# -- `before` from another thread --------------------------------------------------------


async def test_before_from_another_thread_is_a_point_in_time(api: SaverApi) -> None:
    """Only `before`'s checkpoint id counts (ids are time-ordered), as in InMemorySaver."""
    a, b = f"a-{uuid.uuid4()}", f"b-{uuid.uuid4()}"
    memory = InMemorySaver()
    order = [(a, ""), (b, ""), (a, ""), (b, "sub"), (a, "")]
    configs = []
    for tid, ns in order:
        checkpoint = generate_checkpoint()
        config = generate_config(tid, checkpoint_ns=ns)
        configs.append(await api.put(config, checkpoint, generate_metadata(), {}))
        memory.put(config, checkpoint, generate_metadata(), {})
    a_ids = [
        c["configurable"]["checkpoint_id"] for c in configs if c["configurable"]["thread_id"] == a
    ]
    for before in configs[1], configs[3]:  # thread b's, one in another namespace
        ours = ids(await api.list(generate_config(a), before=before))
        reference = ids(list(memory.list(generate_config(a), before=before)))
        assert ours == reference
        cutoff = before["configurable"]["checkpoint_id"]
        assert ours == sorted((i for i in a_ids if i < cutoff), reverse=True)
    assert ids(await api.list(generate_config(a), before=configs[1])) == [a_ids[0]]
    # a `before` that names no stored checkpoint is a point in time all the same
    ghost = generate_config(b, checkpoint_id=generate_checkpoint()["id"])
    assert ids(await api.list(generate_config(a), before=ghost)) == sorted(a_ids, reverse=True)

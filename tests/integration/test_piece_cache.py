"""`get_tuple` keeps the pieces of stored lists decoded between calls (`piece_cache`).

A thread read again, or at its next turn, decodes only its new pieces. What
must hold: every read returns what the table holds now, as the caller's own
objects (a node may edit what it got in place), encrypted rows are checked at
every read, and the deltas a put writes still find their base.
"""

from __future__ import annotations

import collections
import dataclasses
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base.id import uuid6

from pgcheckpoint import DecryptionError, EncryptedSerde, PostgresSaver

KEY = bytes(range(32))
LONG = "x" * 400  # long enough for the first list to be a base of deltas


def checkpoint(value: list[Any], n: int) -> dict[str, Any]:
    return {
        "v": 4,
        "id": str(uuid6()),
        "ts": datetime.now(timezone.utc).isoformat(),
        "channel_values": {"messages": value},
        "channel_versions": {"messages": version(n)},
        "versions_seen": {},
        "updated_channels": ["messages"],
    }


def version(n: int) -> str:
    return f"{n:032}.0"


def store(saver: PostgresSaver, thread_id: str, values: list[list[Any]]) -> dict[str, Any]:
    """Put one checkpoint per value, each the child of the last; the last config."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for n, value in enumerate(values, start=1):
        config = saver.put(config, checkpoint(value, n), {"step": n}, {"messages": version(n)})
    return config


def read(saver: PostgresSaver, thread_id: str) -> list[Any]:
    got = saver.get_tuple({"configurable": {"thread_id": thread_id}})
    assert got is not None
    return got.checkpoint["channel_values"]["messages"]  # type: ignore[no-any-return]


def piece_rows(dsn: str, thread_id: str) -> list[tuple[str, str | None]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT version, base_version FROM pgc_blobs WHERE thread_id = %s ORDER BY version",
            (thread_id,),
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def messages() -> list[Any]:
    return [
        HumanMessage(LONG, id="h1"),
        AIMessage(
            content=[{"type": "text", "text": "hi"}],
            id="a1",
            tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "c1"}],
        ),
    ]


def test_a_list_read_again_decodes_nothing_and_is_the_callers_own(db_dsn: str) -> None:
    stored = messages()
    grown = [*stored, HumanMessage("more", id="h2")]
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        store(saver, "t", [stored, grown])
        assert [base for _, base in piece_rows(db_dsn, "t")] == [None, version(1)]
        before = saver.caches.used_bytes
        assert read(saver, "t") == grown
        once = saver.caches.used_bytes
        # read once, the pieces are only marked as seen; read again, kept decoded
        assert once - before < 2000  # two marks
        first = read(saver, "t")
        assert first == grown
        kept = saver.caches.used_bytes
        assert kept - once > 3 * (once - before)  # three messages
        # a node edits what it got, down inside a message
        first[1].tool_calls[0]["args"]["q"] = "edited"
        first[1].content.append({"type": "text", "text": "more"})
        first[1].additional_kwargs["seen"] = True
        first[0].content = "edited"
        first.append(HumanMessage("extra"))
        second = read(saver, "t")
        assert saver.caches.used_bytes == kept  # found, not decoded and kept again
        assert second == grown
        assert second[1].tool_calls[0]["args"] == {"q": "x"}
        assert all(a is not b for a, b in zip(first, second, strict=False))


def test_a_list_larger_than_half_the_budget_is_read_whole_each_time(db_dsn: str) -> None:
    value = [f"{n}" * 300 for n in range(100)]  # 30 KB
    with PostgresSaver.from_conn_string(db_dsn, cache_bytes=40_000) as saver:
        store(saver, "t", [value])
        for _ in range(3):
            got = read(saver, "t")
            assert got == value
            got[0] = "edited"
        assert saver.caches.used_bytes < 5_000


@dataclasses.dataclass
class Note:
    tags: list[str]


def test_items_a_copy_cannot_take_whole_are_decoded_at_every_read(db_dsn: str) -> None:
    """A deque is not copied whole (`pgcheckpoint.core.sharing`): a piece holding
    one is not kept, so an edit of what one read returned cannot reach the next."""
    value = [LONG, {"queue": collections.deque(["a"])}]
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        store(saver, "t", [value])
        marked = 0
        for _ in range(3):
            got = read(saver, "t")
            assert got == value
            got[1]["queue"].append("edited")
            marked = marked or saver.caches.used_bytes  # read once: the piece is marked
        assert saver.caches.used_bytes < marked + 100  # marked as not kept, no items


def test_dataclass_items_are_kept_and_each_read_gets_its_own(db_dsn: str) -> None:
    value = [LONG, {"note": Note(["a"])}]
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        store(saver, "t", [value])
        marked = 0
        for _ in range(3):
            got = read(saver, "t")
            assert got == value
            got[1]["note"].tags.append("edited")
            marked = marked or saver.caches.used_bytes
        assert saver.caches.used_bytes > marked + 500  # kept decoded


def test_a_piece_edited_in_the_table_is_read_as_it_now_is(db_dsn: str) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        store(saver, "t", [[LONG, "a"]])
        for _ in range(2):  # kept decoded
            assert read(saver, "t") == [LONG, "a"]
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            blob = saver.serde.dumps_typed([LONG, "b"])
            conn.execute("UPDATE pgc_blobs SET type = %s, blob = %s WHERE thread_id = 't'", blob)
        assert read(saver, "t") == [LONG, "b"]


def test_tampered_ciphertext_is_refused_after_a_cached_read(db_dsn: str) -> None:
    with PostgresSaver.from_conn_string(db_dsn, serde=EncryptedSerde(keys={"k1": KEY})) as saver:
        store(saver, "t", [messages(), [*messages(), HumanMessage("more", id="h2")]])
        for _ in range(2):  # kept decoded
            assert len(read(saver, "t")) == 3
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE pgc_blobs SET blob = overlay(blob PLACING '\\x00'::bytea FROM 40)"
                " WHERE thread_id = 't' AND base_version IS NULL"
            )
        with pytest.raises(DecryptionError):
            read(saver, "t")


def test_a_thread_written_again_with_the_same_versions_reads_its_new_values(
    db_dsn: str,
) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        store(saver, "t", [[LONG, "old"], [LONG, "old", "older"]])
        for _ in range(2):  # kept decoded
            assert read(saver, "t") == [LONG, "old", "older"]
        saver.delete_thread("t")
        store(saver, "t", [[LONG, "new"], [LONG, "new", "newer"]])
        assert read(saver, "t") == [LONG, "new", "newer"]


def test_a_list_found_decoded_still_teaches_the_append_cache(db_dsn: str) -> None:
    """Reading a list tells the saver what is stored, for the next put to store a
    delta on it, also when every piece was found decoded."""
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        config = store(saver, "t", [[LONG], [LONG, "a"]])
        read(saver, "t")
        read(saver, "t")  # pieces kept decoded
        saver.caches.discard(("t", "append", "", "messages"))  # as a full budget would
        assert not saver.append_cache.holds(("t", "", "messages"), version(2))
        read(saver, "t")
        assert saver.append_cache.holds(("t", "", "messages"), version(2))
        saver.put(config, checkpoint([LONG, "a", "b"], 3), {"step": 3}, {"messages": version(3)})
    assert piece_rows(db_dsn, "t")[-1] == (version(3), version(2))


def test_nothing_is_kept_without_a_budget(db_dsn: str) -> None:
    with PostgresSaver.from_conn_string(db_dsn, cache_bytes=0) as saver:
        store(saver, "t", [messages()])
        first = read(saver, "t")
        first[0].content = "edited"
        assert read(saver, "t") == messages()
        assert len(saver.caches) == 0


def test_listed_values_share_nothing_with_what_is_kept(db_dsn: str) -> None:
    """`list` finds the pieces `get_tuple` keeps: editing what a listing returned
    reaches neither the next listing nor the next read."""
    lists = [messages(), [*messages(), HumanMessage("more", id="h2")]]
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        store(saver, "t", lists)
        config = {"configurable": {"thread_id": "t"}}
        for _ in range(3):  # the pieces are kept from the second read on
            listed = [t.checkpoint["channel_values"]["messages"] for t in saver.list(config)]
            assert listed == lists[::-1]
            assert listed[0][0] is not listed[1][0]
            for value in listed:
                value[1].tool_calls[0]["args"]["q"] = "edited"
                value[1].additional_kwargs["seen"] = True
                value.append(HumanMessage("extra"))
        assert read(saver, "t") == lists[1]

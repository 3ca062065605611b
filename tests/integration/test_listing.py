"""`list` reads a page in two statements: the rows, then their stored values once.

The values shared by the checkpoints of a page (an unchanged channel, the full
value under a delta) cross the wire once, and a checkpoint deleted between the
two statements is left out. (The plans' costs: test_plan_costs.py.)
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base.id import uuid6
from psycopg.rows import dict_row

from pgcheckpoint import PostgresSaver
from pgcheckpoint.core.reads import decode_listed, list_op


def grow_chat(saver: PostgresSaver, thread_id: str, turns: int) -> list[list[str]]:
    """A thread whose `messages` grows by two items a checkpoint (stored as deltas)."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    messages: list[str] = []
    values = []
    for turn in range(turns):
        messages = [*messages, f"question {turn} " + "q" * 200, f"answer {turn} " + "a" * 200]
        version = f"{turn + 1:032}.{turn:016}"
        checkpoint = {
            "v": 4,
            "id": str(uuid6()),
            "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": {"messages": messages, "settings": {"mode": "fixed"}},
            "channel_versions": {"messages": version, "settings": "1"},
            "versions_seen": {},
            "updated_channels": ["messages"],
        }
        new = {"messages": version, **({"settings": "1"} if turn == 0 else {})}
        config = saver.put(config, checkpoint, {"step": turn}, new)  # type: ignore[arg-type]
        values.append(messages)
    return values


def test_a_page_reads_each_stored_value_once(db_dsn: str) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        values = grow_chat(saver, "chat", 40)
        op = list_op(saver, {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}, limit=10)
        rows, _ = saver.run(op)
        assert len(rows) == 10
        listed = [t.checkpoint["channel_values"] for t in decode_listed(saver, rows, None, 10)]
    assert [v["messages"] for v in listed] == values[::-1][:10]
    assert all(v["settings"] == {"mode": "fixed"} for v in listed)
    # every row names its pieces, but each piece's bytes are one object for the page
    pieces = [
        (row["blob_channels"][i], row["blob_versions"][i], id(row["blob_values"][i]))
        for row in rows
        for i in range(len(row["blob_channels"]))
    ]
    by_key: dict[tuple[str, str], set[int]] = {}
    for channel, version, obj in pieces:
        by_key.setdefault((channel, version), set()).add(obj)
    assert all(len(objs) == 1 for objs in by_key.values())
    assert len(pieces) > len(by_key)  # the full value under the deltas is shared


def test_listed_items_are_not_shared_between_checkpoints(db_dsn: str) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        grow_chat(saver, "chat", 12)
        listed = list(saver.list({"configurable": {"thread_id": "chat"}}))
        newest, older = listed[0].checkpoint, listed[1].checkpoint
        newest["channel_values"]["messages"][0] = "edited"
        newest["channel_values"]["settings"]["mode"] = "edited"
        assert older["channel_values"]["messages"][0].startswith("question 0")
        assert older["channel_values"]["settings"] == {"mode": "fixed"}


def test_a_checkpoint_deleted_between_the_two_statements_is_left_out(db_dsn: str) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        values = grow_chat(saver, "chat", 5)
        grow_chat(saver, "other", 2)
        op = list_op(saver, None)
        stmt = next(op)
        assert stmt.name == "list_checkpoints"
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            cur = conn.cursor(row_factory=dict_row, binary=True)
            rows = cur.execute(saver.queries[stmt.name], stmt.params).fetchall()
            assert len(rows) == 7
            saver.delete_thread("other")  # after the page, before its values
            stmt = op.send(rows)
            assert stmt.name == "listed_values"
            found = cur.execute(saver.queries[stmt.name], stmt.params).fetchall()
        with pytest.raises(StopIteration) as done:
            op.send(found)
        kept, _ = done.value.value
        assert {r["thread_id"] for r in kept} == {"chat"}
        listed = list(decode_listed(saver, kept, None, None))
    assert [t.checkpoint["channel_values"]["messages"] for t in listed] == values[::-1]

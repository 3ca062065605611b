"""The typed array parameters (`pgcheckpoint.statements.arrays`) as PostgreSQL reads them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import weakref

import psycopg
import pytest
from psycopg.rows import dict_row

from pgcheckpoint import PostgresSaver
from pgcheckpoint.drivers.connections import Cursors, cursor_of
from pgcheckpoint.statements.arrays import ByteaArray, Float8Array, Int4Array, TextArray


def test_arrays_arrive_as_sent(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT %s::text[], %s::bytea[], %b::bytea[], %s::int[], %s::text[], %s::int[]",
            (
                TextArray(["messages", None, "", "é€ 🐍", 'a,b"{c}\\']),
                ByteaArray([b"\x00\x01\xff", None, b"", memoryview(b"view")]),
                ByteaArray([b"binary placeholder"]),
                Int4Array([-4, 0, 7, 2**31 - 1]),
                TextArray(),
                Int4Array(),
            ),
        ).fetchone()
    assert row == (
        ["messages", None, "", "é€ 🐍", 'a,b"{c}\\'],
        [b"\x00\x01\xff", None, b"", b"view"],
        [b"binary placeholder"],
        [-4, 0, 7, 2**31 - 1],
        [],
        [],
    )


def test_float8_arrays_arrive_as_sent(db_dsn: str) -> None:
    sent = [0.4, None, -1.5e300, 7, float("inf"), 2.5e-300]
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT %s::float8[], %s::float8[], %s::float8[]",
            (Float8Array(sent), Float8Array(), Float8Array([None])),
        ).fetchone()
        assert row == ([0.4, None, -1.5e300, 7.0, float("inf"), 2.5e-300], [], [None])
        with pytest.raises(psycopg.DataError, match="not a number"):
            conn.execute("SELECT %s::float8[]", (Float8Array(["1.5"]),))  # type: ignore[list-item]


def test_unnest_of_empty_arrays_is_no_rows(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute(
            "SELECT * FROM unnest(%s::text[], %b::bytea[])", (TextArray(), ByteaArray())
        ).fetchall()
    assert rows == []


def test_nul_in_text_is_refused_by_postgres(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn, pytest.raises(psycopg.DataError):
        conn.execute("SELECT %s::text[]", (TextArray(["a\x00b"]),))


def test_connection_opened_before_import_still_stores(db_dsn: str) -> None:
    # A connection that ran a statement before the import lacks the dumpers: the
    # arrays go through psycopg's list adaptation instead, and a checkpoint still
    # round-trips.
    script = textwrap.dedent(
        f"""
        import psycopg
        from psycopg.rows import dict_row
        conn = psycopg.connect({db_dsn!r}, autocommit=True, row_factory=dict_row)
        conn.execute("SELECT 1")  # its adapters are made now, before the dumpers exist
        from langgraph.checkpoint.base import empty_checkpoint
        from pgcheckpoint import PostgresSaver
        from pgcheckpoint.statements.arrays import TextArray
        from psycopg.adapt import PyFormat
        assert conn.adapters.get_dumper(TextArray, PyFormat.AUTO).__name__ != "TextArrayDumper"
        saver = PostgresSaver(conn)
        cp = empty_checkpoint()
        cp["channel_values"] = {{"messages": ["x" * 400]}}
        cp["channel_versions"] = {{"messages": "1"}}
        cfg = saver.put({{"configurable": {{"thread_id": "t"}}}}, cp, {{}}, {{"messages": "1"}})
        saver.put_writes(cfg, [("messages", ["y"]), ("other", None)], "task")
        got = saver.get_tuple(cfg)
        assert got.checkpoint["channel_values"] == {{"messages": ["x" * 400]}}, got
        assert got.pending_writes == [("task", "messages", ["y"]), ("task", "other", None)]
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_text_follows_the_client_encoding(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        conn.execute("SET client_encoding TO 'LATIN1'")
        row = conn.execute(
            "SELECT %s::text[], %s::text[] = ARRAY[%s::text]",
            (TextArray(["é"]), TextArray(["é"]), "é"),
        ).fetchone()
    assert row == (["é"], True)


def test_values_of_the_wrong_kind_are_refused(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        with pytest.raises(TypeError):
            conn.execute("SELECT %b::bytea[]", (ByteaArray([5]),))  # type: ignore[list-item]
        conn.rollback()
        with pytest.raises(psycopg.DataError, match="int4 range"):
            conn.execute("SELECT %s::int[]", (Int4Array([2**31]),))


def test_one_cursor_per_connection_until_its_encoding_changes(db_dsn: str) -> None:
    kept: Cursors = weakref.WeakKeyDictionary()
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        first = cursor_of(conn, kept)
        assert cursor_of(conn, kept) is first
        conn.execute("SET client_encoding TO 'LATIN1'")
        second = cursor_of(conn, kept)
        assert second is not first  # its text values are now encoded for LATIN1
        second.execute("SELECT %s::text[] AS t", [TextArray(["é"])])
        assert second.fetchone() == {"t": ["é"]}
    with pytest.raises(psycopg.OperationalError, match="closed"):
        cursor_of(conn, kept)


def test_two_savers_on_one_connection_keep_their_own_cursors(db_dsn: str) -> None:
    # each saver's lock guards its own cursor; one shared cursor could hand one
    # saver's rows to the other
    with psycopg.connect(db_dsn, autocommit=True, row_factory=dict_row) as conn:
        first, second = PostgresSaver(conn), PostgresSaver(conn)
        config = {"configurable": {"thread_id": "t"}}
        assert first.get_tuple(config) is None and second.get_tuple(config) is None  # type: ignore[arg-type]
        assert first.cursors[conn][1] is not second.cursors[conn][1]

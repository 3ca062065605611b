"""`threads` and `show` on a database with damaged rows: the error in place, not a failure.

A value whose zstd frame is cut short, a value whose bytes are NULL, a write
with no bytes, metadata that is not msgpack: each shows as `<unreadable: why>`
(naming the row) where the value would be, the rest of the checkpoint and
every other thread still show, and the command exits 0.
"""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from pgcheckpoint import PostgresSaver, UnreadableValueError
from pgcheckpoint.cli import main

BIG = [f"line {i} " + "x" * 80 for i in range(40)]  # compressed when stored


def write(dsn: str, thread_id: str) -> None:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"big": BIG, "small": {"a": 1}, "title": "t"}
    checkpoint["channel_versions"] = {"big": "1", "small": "1", "title": "1"}
    with PostgresSaver.from_conn_string(dsn) as saver:
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        versions = {"big": "1", "small": "1"}
        config = saver.put(config, checkpoint, {"source": "loop", "step": 1}, versions)
        saver.put_writes(config, [("small", {"b": 2}), ("title", "u")], "task")


def damage(dsn: str, thread_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cut = conn.execute(
            "UPDATE pgc_blobs SET blob = substring(blob from 1 for length(blob) - 9)"
            " WHERE thread_id = %s AND channel = 'big' AND type = 'msgpack+zstd'",
            [thread_id],
        ).rowcount
        nulled = conn.execute(
            "UPDATE pgc_blobs SET blob = NULL WHERE thread_id = %s AND channel = 'small'",
            [thread_id],
        ).rowcount
        nulled *= conn.execute(
            "UPDATE pgc_writes SET blob = '' WHERE thread_id = %s AND channel = 'small'",
            [thread_id],
        ).rowcount
        garbled = conn.execute(
            "UPDATE pgc_checkpoints SET metadata_blob = '\\xc1'::bytea WHERE thread_id = %s",
            [thread_id],
        ).rowcount
    assert cut == nulled == garbled == 1


def run(capsys: pytest.CaptureFixture[str], dsn: str, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--dsn", dsn])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_one_damaged_thread_does_not_stop_the_others(
    db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write(db_dsn, "good")
    write(db_dsn, "bad")
    damage(db_dsn, "bad")
    with (
        PostgresSaver.from_conn_string(db_dsn) as saver,
        pytest.raises(UnreadableValueError) as err,
    ):
        saver.get_tuple({"configurable": {"thread_id": "bad"}})
    assert "thread 'bad'" in str(err.value) and "Zstd" not in type(err.value).__name__
    code, out, err_text = run(capsys, db_dsn, "threads", "--json")
    assert code == 0, err_text
    assert {t["thread_id"] for t in json.loads(out)} == {"good", "bad"}
    code, out, err_text = run(capsys, db_dsn, "threads")
    assert code == 0 and "bad" in out and "good" in out, err_text


def test_show_values_prints_each_error_in_place_of_its_value(
    db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write(db_dsn, "bad")
    damage(db_dsn, "bad")
    code, out, err = run(capsys, db_dsn, "show", "bad", "--values", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert "zstd frame is corrupt" in shown["values"]["big"]["unreadable"]
    assert "channel 'big'" in shown["values"]["big"]["unreadable"]
    assert "is NULL" in shown["values"]["small"]["unreadable"]
    assert shown["values"]["title"] == "t"  # the rest of the checkpoint still shows
    writes = {w["channel"]: w["value"] for w in shown["pending_writes"]}
    assert "write 0 of task 'task'" in writes["small"]["unreadable"]
    assert writes["title"] == "u"
    assert "metadata of checkpoint" in shown["metadata"]["(metadata)"]["unreadable"]
    code, out, err = run(capsys, db_dsn, "show", "bad", "--values")
    assert code == 0, err
    assert "big: <unreadable: cannot read the value of channel 'big'" in out
    code, out, err = run(capsys, db_dsn, "show", "bad")
    assert code == 0, err


# -- rows the statements cannot take apart ---------------------------------------------

STRUCTURE_DAMAGE = {
    "versions an array": ("channel_versions = '[1]'", "channel_versions is a JSON array"),
    "versions a string": ("channel_versions = '\"1\"'", "channel_versions is a JSON string"),
    "versions null": ("channel_versions = 'null'", "channel_versions is JSON null"),
    "a version an object": (
        "channel_versions = jsonb_set(channel_versions, '{big}', '{\"v\": 1}')",
        "gives channel 'big' a JSON object, not a version",
    ),
    "metadata an array": ("metadata = '[1]'", "column metadata is a JSON array"),
}


@pytest.mark.parametrize("case", list(STRUCTURE_DAMAGE))
def test_a_row_the_statements_cannot_take_apart_shows_as_damaged_and_hides_nothing(
    db_dsn: str, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    change, said = STRUCTURE_DAMAGE[case]
    for thread_id in ("before", "bad", "after"):
        write(db_dsn, thread_id)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE pgc_checkpoints SET {change} WHERE thread_id = 'bad'")

    code, out, err = run(capsys, db_dsn, "threads", "--json")
    assert code == 0, err
    listed = {t["thread_id"]: t for t in json.loads(out)}
    assert sorted(listed) == ["after", "bad", "before"]
    assert listed["bad"]["status"] == "damaged" and said in listed["bad"]["detail"]
    assert listed["before"]["status"] == listed["after"]["status"] == "stopped"  # writes saved
    [damage] = listed["bad"]["damage"]
    # the query it gives shows the damaged row
    with psycopg.connect(db_dsn) as conn:
        assert len(conn.execute(damage["look"]).fetchall()) == 1
    code, out, err = run(capsys, db_dsn, "threads")
    assert code == 0 and re.search(r"^bad .* damaged +column ", out, re.MULTILINE), out
    assert "`pgcheckpoint show bad` says what is wrong" in err

    code, out, err = run(capsys, db_dsn, "show", "bad")
    assert code == 0, err
    status = out.splitlines()[1]
    assert status.startswith("status: damaged: ") and said in status, out
    assert f"look at it: {damage['look']}" in out
    code, out, err = run(capsys, db_dsn, "show", "bad", "--json")
    assert code == 0 and json.loads(out)["checkpoints"][0]["damage"] == [damage], err

    code, out, err = run(capsys, db_dsn, "stats", "--json")
    assert code == 0, err
    assert json.loads(out)["damaged"] == {"checkpoints": 1, "blobs": 0, "thread_ids": ["bad"]}
    code, out, err = run(capsys, db_dsn, "stats")
    assert code == 0 and "damaged      1 checkpoints, 0 values (threads 'bad')" in out, err
    code, out, err = run(capsys, db_dsn, "stats", "--prometheus")
    assert 'pgcheckpoint_damaged_rows{schema="public",table="pgc_checkpoints"} 1' in out


def test_show_values_of_a_row_the_read_cannot_take_apart_says_where_to_look(
    db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write(db_dsn, "bad")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgc_checkpoints SET channel_versions = '[1]'")
    code, _, err = run(capsys, db_dsn, "show", "bad", "--values")
    assert code == 1
    assert "is damaged: its row cannot be read whole" in err
    assert "`pgcheckpoint show bad` says what is wrong" in err


def test_stats_counts_values_whose_bytes_are_null(
    db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write(db_dsn, "good")
    write(db_dsn, "bad")
    damage(db_dsn, "bad")
    code, out, err = run(capsys, db_dsn, "stats", "--json")
    assert code == 0, err
    assert json.loads(out)["damaged"] == {"checkpoints": 0, "blobs": 1, "thread_ids": ["bad"]}

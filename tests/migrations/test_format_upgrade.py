"""A database written by pgcheckpoint 0.1.0 reads after the upgrade, and after `rotate-key`.

`format1/rows.json` holds rows written by 0.1.0 (`format1/write_rows.py`) at
revision 0003: a thread sealed by its EncryptedSerde (row format 1), one in
clear, one by LangGraph's own EncryptedSerializer, each with DeltaChannel
snapshots, a list stored as deltas and a pending interrupt, and what 0.1.0
read of each. Loaded into a database at 0003 and upgraded to head, they read
the same; `rotate-key` rewrites every value in row format 2, after which they
read the same with every legacy setting off, and their columns are
authenticated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb
from support.format1 import FILTERABLE, KEY, LANGGRAPH_KEY, TABLES, config, what_reads

from pgcheckpoint import DecryptionError, EncryptedSerde, PostgresSaver, rotate_key
from pgcheckpoint.schema.migrate import current, upgrade

WRITTEN = json.loads((Path(__file__).parent / "format1" / "rows.json").read_text())
THREADS = sorted(WRITTEN["expected"])


def load(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        for table in TABLES:
            rows = WRITTEN["rows"][table]
            if table == "pgc_blobs":  # a delta's base first
                rows = sorted(rows, key=lambda r: (r["base_version"] is not None, r["version"]))
            for row in rows:
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} SELECT * FROM jsonb_populate_record(NULL::{}, %s)"
                    ).format(sql.Identifier(table), sql.Identifier(table)),
                    [Jsonb(row)],
                )


def serde(**kwargs: Any) -> EncryptedSerde:
    return EncryptedSerde(keys={"k1": KEY}, filterable_metadata=FILTERABLE, **kwargs)


def reads(dsn: str, reader: EncryptedSerde) -> dict[str, Any]:
    with PostgresSaver.from_conn_string(dsn, serde=reader) as saver:
        return {thread_id: what_reads(saver, thread_id) for thread_id in THREADS}


@pytest.fixture
def upgraded(empty_db_dsn: str) -> str:
    assert WRITTEN["revision"] == "0003" and WRITTEN["written_by"] == "pgcheckpoint 0.1.0"
    upgrade(empty_db_dsn, revision="0003")
    load(empty_db_dsn)
    upgrade(empty_db_dsn)
    assert current(empty_db_dsn) != "0003"
    return empty_db_dsn


def test_rows_of_0_1_0_read_as_they_did_then_after_rotate_key_in_format_2(upgraded: str) -> None:
    expected = WRITTEN["expected"]
    migrating = serde(allow_plaintext=True, langgraph_key=LANGGRAPH_KEY)
    assert reads(upgraded, migrating) == expected

    report = rotate_key(upgraded, migrating, batch_size=7)
    assert report.remaining == {}
    assert {"k1 (0.1.0)", "(plaintext)", "(langgraph-eax)"} <= set(report.counts)
    with psycopg.connect(upgraded) as conn:
        types = {
            t
            for (t,) in conn.execute(
                "SELECT type FROM pgc_checkpoints UNION SELECT metadata_type FROM pgc_checkpoints"
                " UNION SELECT type FROM pgc_blobs UNION SELECT type FROM pgc_writes"
            )
        }
        unset = conn.execute(
            "SELECT count(*) FROM pgc_checkpoints WHERE sealed_parent_id IS NULL"
        ).fetchone()
    assert {t.rpartition("+")[2] for t in types} <= {"aesgcm2:k1", "empty"}
    assert unset == (0,)

    strict = serde(accept_format_1=False, accept_langgraph_eax=False)
    assert reads(upgraded, strict) == expected
    # nothing left to rotate, and the columns are bound now
    assert rotate_key(upgraded, strict, dry_run=True).to_rotate == 0
    with psycopg.connect(upgraded, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgc_checkpoints SET parent_checkpoint_id = NULL WHERE checkpoint_id = %s",
            [expected["sealed"]["checkpoints"][0]["checkpoint_id"]],
        )
    with (
        PostgresSaver.from_conn_string(upgraded, serde=strict) as saver,
        pytest.raises(DecryptionError, match="parent_checkpoint_id"),
    ):
        saver.get_tuple(config("sealed"))


def test_with_format_1_turned_off_the_rows_of_0_1_0_are_refused_until_rotated(
    upgraded: str,
) -> None:
    refusing = serde(accept_format_1=False)
    with (
        PostgresSaver.from_conn_string(upgraded, serde=refusing) as saver,
        pytest.raises(DecryptionError, match=r"sealed by pgcheckpoint 0\.1\.0"),
    ):
        saver.get_tuple(config("sealed"))
    with (
        PostgresSaver.from_conn_string(upgraded, serde=refusing) as saver,
        pytest.raises(DecryptionError, match="stored unencrypted"),
    ):
        saver.get_tuple(config("plain"))

"""`pgcheckpoint stats`: rows, bytes, activity and the largest threads, as text and JSON."""

from __future__ import annotations

import json
import time
from datetime import datetime

import psycopg
from support.cli import run_cli
from support.retention import AGES, DAY, table_rows
from support.rows import TABLES

from pgcheckpoint import PostgresStore


async def test_stats_shows_rows_bytes_activity_and_the_largest_threads(
    db_dsn: str, threads: dict[str, str]
) -> None:
    result = run_cli("stats", "--json", "--top", "2", "--dsn", db_dsn)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    rows = table_rows(db_dsn)
    assert (stats["threads"], stats["checkpoints"], stats["blobs"], stats["writes"]) == (
        len(AGES),
        len(rows["pgc_checkpoints"]),
        len(rows["pgc_blobs"]),
        len(rows["pgc_writes"]),
    )
    assert set(stats["tables"]) == {*TABLES, "pgc_store", "pgc_deletions"}
    assert all(t["total_bytes"] >= t["table_bytes"] > 0 for t in stats["tables"].values())
    oldest = datetime.fromisoformat(stats["oldest"])
    newest = datetime.fromisoformat(stats["newest"])
    assert newest - oldest > 399 * DAY
    # the two-namespace threads hold the most
    assert [t["checkpoints"] for t in stats["largest"]] == [8, 8]
    assert {t["thread_id"] for t in stats["largest"]} <= {
        threads[name] for name in ("week", "idle", "mixed")
    }

    text = run_cli("stats", "--dsn", db_dsn)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0] == f"threads      {len(AGES)}"
    assert "pgc_checkpoints" in text.stdout and "largest threads" in text.stdout


async def test_stats_in_prometheus_text_format_parse_with_prometheus_client(
    db_dsn: str, threads: dict[str, str]
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    result = run_cli("stats", "--prometheus", "--dsn", db_dsn)
    assert result.returncode == 0, result.stderr
    families = {f.name: f for f in text_string_to_metric_families(result.stdout)}
    assert set(families) == {
        "pgcheckpoint_threads",
        "pgcheckpoint_table_rows",
        "pgcheckpoint_table_data_bytes",
        "pgcheckpoint_table_index_bytes",
        "pgcheckpoint_damaged_rows",
        "pgcheckpoint_store_expired_items",
        "pgcheckpoint_oldest_checkpoint_timestamp_seconds",
        "pgcheckpoint_newest_checkpoint_timestamp_seconds",
    }
    assert all(f.type == "gauge" for f in families.values())

    def by_table(name: str) -> dict[str, float]:
        samples = families[name].samples
        assert all(s.labels["schema"] == "public" for s in samples)
        return {s.labels["table"]: s.value for s in samples}

    rows = table_rows(db_dsn)
    assert [s.value for s in families["pgcheckpoint_threads"].samples] == [len(AGES)]
    assert by_table("pgcheckpoint_table_rows") == {t: len(rows[t]) for t in TABLES} | {
        "pgc_store": 0
    }
    assert set(by_table("pgcheckpoint_table_data_bytes")) == {*TABLES, "pgc_store", "pgc_deletions"}
    assert all(v > 0 for v in by_table("pgcheckpoint_table_data_bytes").values())
    assert by_table("pgcheckpoint_damaged_rows") == {"pgc_checkpoints": 0, "pgc_blobs": 0}
    (oldest,) = families["pgcheckpoint_oldest_checkpoint_timestamp_seconds"].samples
    (newest,) = families["pgcheckpoint_newest_checkpoint_timestamp_seconds"].samples
    assert newest.value - oldest.value > 399 * DAY.total_seconds()
    # no thread ids: personal data in many applications, and a series each
    assert not any(thread_id in result.stdout for thread_id in threads.values())


async def test_stats_of_an_empty_schema_in_prometheus_format_has_no_timestamps(
    db_dsn: str,
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    result = run_cli("stats", "--prometheus", "--dsn", db_dsn)
    assert result.returncode == 0, result.stderr
    families = {f.name: f for f in text_string_to_metric_families(result.stdout)}
    assert [s.value for s in families["pgcheckpoint_threads"].samples] == [0]
    assert "pgcheckpoint_oldest_checkpoint_timestamp_seconds" not in families


def test_stats_count_the_store_items_and_those_not_swept_yet(db_dsn: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    with PostgresStore.from_conn_string(db_dsn) as store:
        store.put(("users", "u1"), "a", {"v": 1})
        store.put(("users", "u2"), "b", {"v": 2}, ttl=60)
        store.put(("cache",), "old", {"v": 3}, ttl=0.001)
    time.sleep(0.2)
    stats = json.loads(run_cli("stats", "--json", "--dsn", db_dsn).stdout)
    assert stats["store"] == {"items": 3, "expired": 1}
    assert "pgc_store_vectors" not in stats["tables"]  # no store with an index yet
    text = run_cli("stats", "--dsn", db_dsn).stdout.splitlines()
    assert "store items  3 (1 expired, not swept yet)" in text
    assert next(line for line in text if line.startswith("pgc_store ")).split()[1] == "3"
    prometheus = run_cli("stats", "--prometheus", "--dsn", db_dsn).stdout
    families = {f.name: f for f in text_string_to_metric_families(prometheus)}
    rows = {s.labels["table"]: s.value for s in families["pgcheckpoint_table_rows"].samples}
    assert rows["pgc_store"] == 3
    assert [s.value for s in families["pgcheckpoint_store_expired_items"].samples] == [1]

    # the vector table a store with an index creates (a stand-in here: the
    # server may lack pgvector) is sized where it exists; its rows are not counted
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pgc_store_vectors (ns text, key text, field text, v text)")
        conn.execute(
            "INSERT INTO pgc_store_vectors SELECT 'users.u1', 'a', 'text', repeat('x', 99)"
        )
    stats = json.loads(run_cli("stats", "--json", "--dsn", db_dsn).stdout)
    assert stats["tables"]["pgc_store_vectors"]["table_bytes"] > 0
    text = run_cli("stats", "--dsn", db_dsn).stdout.splitlines()
    # every table `all` adds up, in one order; those whose rows stats does not count: -
    listed = [line.split()[:2] for line in text if line.startswith("pgc_")]
    assert listed == [
        ["pgc_checkpoints", "0"],
        ["pgc_blobs", "0"],
        ["pgc_writes", "0"],
        ["pgc_store", "3"],
        ["pgc_deletions", "-"],
        ["pgc_store_vectors", "-"],
    ]
    assert run_cli("store", "sweep", "--dsn", db_dsn).returncode == 0
    assert "store items  2" in run_cli("stats", "--dsn", db_dsn).stdout.splitlines()

"""`pgcheckpoint stats`: rows, bytes, activity and the largest threads, as text and JSON."""

from __future__ import annotations

import json
from datetime import datetime

from support.cli import run_cli
from support.retention import AGES, DAY, table_rows
from support.rows import TABLES


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
    assert set(stats["tables"]) == {*TABLES, "pgc_store"}
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
    assert by_table("pgcheckpoint_table_rows") == {t: len(rows[t]) for t in TABLES}
    assert set(by_table("pgcheckpoint_table_data_bytes")) == {*TABLES, "pgc_store"}
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

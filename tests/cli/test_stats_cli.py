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
    assert set(stats["tables"]) == set(TABLES)
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

"""`pgcheckpoint prune` as cron runs it: what goes, what it prints, and how it fails.

The threads are those of `support.retention.AGES` (the `threads` fixture);
tests/integration/test_retention.py checks the sweeps themselves row by row.
"""

from __future__ import annotations

import json
import time

import psycopg
from support.cli import run_cli, run_cli_on_terminal
from support.dsn import url_of
from support.retention import AGES, IDLE, table_rows

from pgcheckpoint import PostgresStore


async def test_the_cron_command_without_a_terminal(db_dsn: str, threads: dict[str, str]) -> None:
    before = table_rows(db_dsn)
    dry = run_cli("prune", "--older-than", "30d", "--dry-run", "--dsn", db_dsn)
    assert dry.returncode == 0, dry.stderr
    assert table_rows(db_dsn) == before
    assert dry.stdout.startswith("would delete 2 threads: 12 checkpoints, 12 writes, ")
    # a log gets plain lines, no terminal control characters
    assert "\r" not in dry.stderr and "\x1b" not in dry.stderr
    assert dry.stderr.splitlines()[-1] == (
        "dry run: deleting threads idle for 30d: 2/2 (100%) done"
    )

    done = run_cli("prune", "--older-than", "30d", "--json", PGCHECKPOINT_DSN=db_dsn)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["threads"], report["checkpoints"], report["dry_run"]) == (2, 12, False)
    left = {key[0] for key in table_rows(db_dsn)["pgc_checkpoints"]}
    assert left == {threads[name] for name in AGES if name not in IDLE}

    # DATABASE_URL as frameworks write it; --keep-last; a batch per thread
    env = {"DATABASE_URL": url_of(db_dsn, "postgresql+psycopg")}
    trim = run_cli("prune", "--keep-last", "3", "--batch-size", "1", **env)
    assert trim.returncode == 0, trim.stderr
    assert trim.stdout.startswith("trimmed 3 threads: 5 checkpoints, 5 writes, ")


async def test_the_cron_command_on_a_terminal_draws_a_progress_bar(
    db_dsn: str, threads: dict[str, str]
) -> None:
    code, output = run_cli_on_terminal(
        "prune", "--older-than", "5d", "--batch-size", "1", PGCHECKPOINT_DSN=db_dsn
    )
    assert code == 0, output
    bar = "deleting threads idle for 5d ["
    assert bar in output and "#" in output.split(bar)[-1]
    assert "\r" in output and "\x1b[2K" in output  # redrawn in place, then cleared
    lines = output.replace("\r\n", "\n").split("\n")
    assert "deleting threads idle for 5d: 3/3 (100%) done" in output
    assert any(line.startswith("deleted 3 threads: ") for line in lines)


async def test_the_cron_command_fails_clearly(db_dsn: str, empty_db_dsn: str) -> None:
    for args, env, code, message in [
        (["prune", "--older-than", "30d"], {}, 2, "no database given: pass --dsn"),
        (["prune", "--older-than", "30x", "--dsn", db_dsn], {}, 2, "'30x' is not a duration"),
        (["prune", "--older-than", "0d", "--dsn", db_dsn], {}, 2, "is no time at all"),
        (["prune", "--dsn", db_dsn], {}, 2, "one of the arguments --older-than --keep-last"),
        (
            ["prune", "--older-than", "1d", "--keep-last", "2", "--dsn", db_dsn],
            {},
            2,
            "not allowed with argument",
        ),
        (
            ["prune", "--keep-last", "2", "--strategy", "delete", "--dsn", db_dsn],
            {},
            2,
            "--strategy goes with --older-than",
        ),
        (
            ["prune", "--older-than", "1d"],
            {"PGCHECKPOINT_DSN": db_dsn + "_missing"},
            1,
            "cannot use the database",
        ),
        (
            ["prune", "--older-than", "1d", "--dsn", empty_db_dsn],
            {},
            1,
            "has no pgcheckpoint tables: run `pgcheckpoint migrate`",
        ),
        (["stats", "--dsn", empty_db_dsn], {}, 1, "has no pgcheckpoint tables"),
    ]:
        result = run_cli(*args, **env)
        assert result.returncode == code, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
        if code == 1:  # the error is the only line, no progress line for a sweep not begun
            assert len(result.stderr.splitlines()) == 1, (args, result.stderr)


def _expiring_items(dsn: str) -> None:
    """Two items past their TTL, one with time left, one without a TTL."""
    with PostgresStore.from_conn_string(dsn) as store:
        store.put(("cache",), "a", {"v": 1}, ttl=0.001)
        store.put(("cache",), "b", {"v": 2}, ttl=0.001)
        store.put(("cache",), "c", {"v": 3}, ttl=60)
        store.put(("users", "u1"), "prefs", {"theme": "dark"})
    time.sleep(0.2)


def _keys(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {key for (key,) in conn.execute("SELECT key FROM pgc_store").fetchall()}


async def test_the_cron_command_sweeps_the_store_unless_told_not_to(
    db_dsn: str, threads: dict[str, str]
) -> None:
    _expiring_items(db_dsn)
    dry = run_cli("prune", "--older-than", "30d", "--dry-run", "--dsn", db_dsn)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[1] == "would delete 2 expired store items"
    assert _keys(db_dsn) == {"a", "b", "c", "prefs"}

    kept = run_cli("prune", "--older-than", "30d", "--no-store", "--json", "--dsn", db_dsn)
    assert kept.returncode == 0, kept.stderr
    report = json.loads(kept.stdout)
    assert (report["threads"], report["store_items"]) == (2, None)
    assert _keys(db_dsn) == {"a", "b", "c", "prefs"}

    done = run_cli("prune", "--older-than", "30d", "--json", "--dsn", db_dsn)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["threads"], report["store_items"], report["complete"]) == (0, 2, True)
    assert _keys(db_dsn) == {"c", "prefs"}
    text = run_cli("prune", "--keep-last", "3", "--dsn", db_dsn)
    assert text.stdout.splitlines()[1] == "deleted 0 expired store items"

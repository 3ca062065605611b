"""`pgcheckpoint store`: namespaces, one item, counts and the TTL sweep, as text and JSON."""

from __future__ import annotations

import json
import time

import psycopg
from support.cli import run_cli

from pgcheckpoint import PostgresStore


def _fill(dsn: str) -> None:
    with PostgresStore.from_conn_string(dsn) as store:
        store.put(("users", "u1"), "prefs", {"theme": "dark", "n": 2**70})
        store.put(("users", "u2"), "prefs", {"theme": "light"})
        store.put(("users", "u\x1b[31m"), "k", {"v": 1})
        store.put(("cache",), "old", {"v": 1}, ttl=0.001)
    time.sleep(0.2)


def test_store_commands(db_dsn: str) -> None:
    _fill(db_dsn)
    listed = run_cli("store", "namespaces", "--prefix", "users", "--json", "--dsn", db_dsn)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [["users", "u\x1b[31m"], ["users", "u1"], ["users", "u2"]]
    text = run_cli("store", "namespaces", "--max-depth", "1", "--dsn", db_dsn)
    assert text.stdout.split() == ["users"]  # the expired item's namespace is left out
    shown = run_cli("store", "show", "users.u1", "prefs", "--json", "--dsn", db_dsn)
    assert json.loads(shown.stdout)["value"] == {"theme": "dark", "n": 2**70}
    hostile = run_cli("store", "namespaces", "--dsn", db_dsn)
    assert "\x1b" not in hostile.stdout
    count = run_cli("store", "count", "--json", "--dsn", db_dsn)
    assert json.loads(count.stdout) == {"items": 4, "expired": 1}
    sweep = run_cli("store", "sweep", "--json", "--dsn", db_dsn)
    assert json.loads(sweep.stdout) == {"swept": 1}
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgc_store").fetchone() == (3,)
    missing = run_cli("store", "show", "users.u9", "prefs", "--dsn", db_dsn)
    assert missing.returncode == 1 and "pgcheckpoint store namespaces" in missing.stderr
    assert run_cli("store", "count", "users", "--dsn", db_dsn).stdout.split()[:2] == ["items", "3"]

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


def test_store_import_copies_the_official_store(db_dsn: str) -> None:
    from langgraph.store.postgres import PostgresStore as OfficialStore

    with OfficialStore.from_conn_string(db_dsn) as official:
        official.setup()
        for i in range(7):
            official.put(("users", f"u{i % 2}"), f"k{i}", {"i": i, "text": "é\u2603"})
        official.put(("users", "u0"), "ttl", {"v": 1}, ttl=30)
    with PostgresStore.from_conn_string(db_dsn) as ours:
        ours.put(("users", "u0"), "k0", {"newer": True})
    first = run_cli("store", "import", "--page-size", "3", "--json", "--dsn", db_dsn)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"items": 7, "kept": 1, "vectors": 0, "failed": {}}
    again = run_cli("store", "import", "--json", "--dsn", db_dsn)
    assert json.loads(again.stdout)["items"] == 0
    with PostgresStore.from_conn_string(db_dsn) as ours:
        assert ours.get(("users", "u0"), "k0").value == {"newer": True}
        assert ours.get(("users", "u1"), "k3").value == {"i": 3, "text": "é\u2603"}
        assert len(ours.search(("users",), limit=100)) == 8
    with psycopg.connect(db_dsn) as conn:
        ttl = conn.execute("SELECT ttl_minutes FROM pgc_store WHERE key = 'ttl'").fetchone()
    assert ttl == (30.0,)

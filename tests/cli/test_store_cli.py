"""`pgcheckpoint store`: namespaces, one item, counts and the TTL sweep, as text and JSON."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql
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


def _embed(texts: list[str]) -> list[list[float]]:
    return [[t.count("a") + 0.1, t.count("b") + 0.1, t.count("c") + 0.1] for t in texts]


@pytest.mark.parametrize(("theirs", "ours"), [("vector", "halfvec"), ("halfvec", "vector")])
def test_store_import_copies_the_official_vectors(
    vector_db_dsn: str, theirs: str, ours: str
) -> None:
    from langgraph.store.postgres import PostgresStore as OfficialStore

    def index(vector_type: str) -> dict[str, Any]:
        return {"dims": 3, "embed": _embed, "ann_index_config": {"vector_type": vector_type}}

    texts = {"a": "aaaa", "b": "bbbb", "c": "cccc", "ab": "aabb"}
    with OfficialStore.from_conn_string(vector_db_dsn, index=index(theirs)) as official:
        official.setup()
        for key, text in texts.items():
            official.put(("docs",), key, {"text": text})
        official.put(("docs",), "plain", {"text": "aaaa"}, index=False)
    with PostgresStore.from_conn_string(vector_db_dsn, index=index(ours)) as store:
        store.setup()
    done = run_cli("store", "import", "--page-size", "2", "--json", "--dsn", vector_db_dsn)
    assert done.returncode == 0, done.stderr
    # one vector per indexed item: the whole value ("$") is its one field
    assert json.loads(done.stdout) == {"items": 5, "kept": 0, "vectors": 4, "failed": {}}
    with PostgresStore.from_conn_string(vector_db_dsn, index=index(ours)) as store:
        found = store.search(("docs",), query="ccc", limit=10)
        assert [i.key for i in found][:1] == ["c"]
        assert [i.key for i in found if i.score is None] == ["plain"]
        # the copied vectors are the official ones, not embedded anew
        with psycopg.connect(vector_db_dsn) as conn:
            copied = conn.execute(
                "SELECT key, field, embedding::text FROM pgc_store_vectors ORDER BY key"
            ).fetchall()
            # a halfvec keeps about three digits: compare both in the type of ours
            official_rows = conn.execute(
                sql.SQL(
                    "SELECT key, field_name, embedding::{}::text FROM store_vectors ORDER BY key"
                ).format(sql.Identifier(ours))
            ).fetchall()
        assert copied == official_rows


def test_store_import_refuses_official_vectors_of_another_size(vector_db_dsn: str) -> None:
    from langgraph.store.postgres import PostgresStore as OfficialStore

    with OfficialStore.from_conn_string(
        vector_db_dsn, index={"dims": 3, "embed": _embed}
    ) as theirs:
        theirs.setup()
        theirs.put(("docs",), "a", {"text": "aaaa"})
    four = {"dims": 4, "embed": lambda texts: [[1.0, 2.0, 3.0, 4.0] for _ in texts]}
    with PostgresStore.from_conn_string(vector_db_dsn, index=four) as ours:
        ours.setup()
    done = run_cli("store", "import", "--dsn", vector_db_dsn)
    assert done.returncode == 1
    assert "have 3 dimensions and this store's 4" in done.stderr
    assert "index dims to 3" in done.stderr
    with psycopg.connect(vector_db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgc_store").fetchone() == (0,)

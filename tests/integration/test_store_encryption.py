"""The store with a key: values sealed as checkpoint values are, filters over declared fields,
and `rotate-key` sealing the items again under a new key (or for the first time) while the
store writes."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from langgraph.store.base import PutOp
from psycopg.rows import dict_row
from support.savers import VARIANTS
from support.stores import Store, StoreApi, open_store

from pgcheckpoint import (
    DecryptionError,
    EncryptedSerde,
    InvalidInputError,
    PostgresSaver,
    PostgresStore,
    rotate_key,
)
from pgcheckpoint.cli import main as cli_main
from pgcheckpoint.maintenance.rotation import rotate_page_op
from pgcheckpoint.statements.queries import Queries

K1 = bytes(range(32))
K2 = bytes(range(100, 132))
SECRET = "MARKER-41c9e0"


def enc(**kwargs: Any) -> EncryptedSerde:
    kwargs.setdefault("keys", {"k1": K1})
    return EncryptedSerde(**kwargs)


@pytest.fixture(params=[v for v in VARIANTS if v.endswith("-conn") or v == "async-pool"])
async def api(request: pytest.FixtureRequest, db_dsn: str) -> AsyncIterator[StoreApi]:
    serde = EncryptedSerde(keys={"k1": K1})
    store: Store
    async with open_store(request.param, db_dsn, serde=serde, filterable=["kind"]) as store:
        yield StoreApi(store)


async def test_values_are_sealed_and_only_declared_fields_stay_readable(
    api: StoreApi, db_dsn: str
) -> None:
    await api.put(("u", "1"), "note", {"kind": "pref", "text": SECRET, "n": 2**80})
    await api.put(("u", "1"), "other", {"kind": "fact", "text": "x"})
    with psycopg.connect(db_dsn) as raw:
        type_, value, doc = raw.execute(
            "SELECT type, value, doc FROM pgc_store WHERE key = 'note'"
        ).fetchone()
    assert "+aesgcm2:k1" in type_ and SECRET.encode() not in bytes(value)
    assert doc == {"kind": "pref"}
    item = await api.get(("u", "1"), "note")
    assert item.value == {"kind": "pref", "text": SECRET, "n": 2**80}
    assert [i.key for i in await api.search(("u",), filter={"kind": "pref"})] == ["note"]
    with pytest.raises(InvalidInputError, match="filterable"):
        await api.search(("u",), filter={"text": SECRET})


async def test_an_altered_readable_field_or_a_moved_value_fails_to_read(
    api: StoreApi, db_dsn: str
) -> None:
    await api.put(("u",), "a", {"kind": "pref", "text": "a"})
    await api.put(("u",), "b", {"kind": "fact", "text": "b"})
    with psycopg.connect(db_dsn, autocommit=True) as raw:
        raw.execute("""UPDATE pgc_store SET doc = '{"kind": "fact"}' WHERE key = 'a'""")
        with pytest.raises(DecryptionError, match="altered"):
            await api.get(("u",), "a")
        raw.execute(
            "UPDATE pgc_store SET value = (SELECT value FROM pgc_store WHERE key = 'b'),"
            " type = (SELECT type FROM pgc_store WHERE key = 'b'),"
            " doc = (SELECT doc FROM pgc_store WHERE key = 'b') WHERE key = 'a'"
        )
        with pytest.raises(DecryptionError):
            await api.get(("u",), "a")
        raw.execute("""UPDATE pgc_store SET doc = '{"kind": "fact", "x": 1}' WHERE key = 'b'""")
        with pytest.raises(DecryptionError):
            await api.get(("u",), "b")


# -- key rotation -----------------------------------------------------------------------


def _items(dsn: str) -> dict[tuple[str, str], dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as raw:
        rows = raw.execute(
            "SELECT ns, key, type, value, doc, created_at, updated_at, expires_at FROM pgc_store"
        ).fetchall()
    return {(r["ns"], r["key"]): r for r in rows}


def _fill(store: PostgresStore, n: int) -> dict[tuple[str, ...], dict[str, Any]]:
    """`n` items per kind of value: JSON, one JSON cannot hold, a large one; some with a TTL."""
    values: dict[tuple[str, ...], dict[str, Any]] = {}
    for i in range(n):
        values[("u", str(i), "json")] = {"kind": "pref", "text": f"{SECRET}-{i}", "n": 2**70}
        values[("u", str(i), "dated")] = {"kind": "fact", "at": datetime(2024, 1, 1 + i)}
        values[("u", str(i), "big")] = {"kind": "doc", "text": f"{SECRET} " * 400}
    for (*ns, key), value in values.items():
        store.put(tuple(ns), key, value, ttl=60 if key == "json" else None)
    return values


def test_rotation_reseals_store_items_while_the_store_writes_then_k1_can_go(db_dsn: str) -> None:
    old, both, new_only = enc(), enc(keys={"k2": K2, "k1": K1}), enc(keys={"k2": K2})
    with PostgresStore.from_conn_string(db_dsn, serde=old, filterable=["kind"]) as app_v1:
        expected = _fill(app_v1, 6)
    before = _items(db_dsn)
    rounds = threading.Semaphore(0)
    stop = threading.Event()
    errors: list[BaseException] = []

    def app() -> None:
        # the application, already on k2 first: puts items the rotation is going
        # through again, and reads others (refreshing their TTL)
        try:
            with PostgresStore.from_conn_string(db_dsn, serde=both, filterable=["kind"]) as v2:
                n = 0
                while not stop.is_set():
                    n += 1
                    # one batch over several items, which it locks in key order
                    value = {"kind": "pref", "text": f"round {n}", "n": n}
                    v2.batch([PutOp(("u", str(i)), "json", value) for i in (5, 0, 3)])
                    for i in (0, 3, 5):
                        expected[("u", str(i), "json")] = value
                        item = v2.get(("u", str(i + 1 if i < 5 else 1)), "dated")
                        assert item is not None and item.value["kind"] == "fact"
                    rounds.release()
                    stop.wait(0.005)
        except BaseException as exc:
            errors.append(exc)
            rounds.release()

    def interleave(done: int, total: int) -> None:
        rounds.acquire(timeout=30)  # a round of the application between two batches

    worker = threading.Thread(target=app)
    worker.start()
    try:
        report = rotate_key(db_dsn, both, batch_size=4, progress=interleave)
    finally:
        stop.set()
        worker.join()
    assert not errors, errors
    assert 0 < report.counts["k1"]["items"] <= 18 and report.remaining == {}
    assert "k1" not in rotate_key(db_dsn, both, dry_run=True).counts
    after = _items(db_dsn)
    assert all(r["type"].endswith("+aesgcm2:k2") for r in after.values())
    for where, row in after.items():
        if where[1] != "json":  # not put again: its timestamps and TTL are its own still
            old_row = before[where]
            assert (row["created_at"], row["updated_at"]) == (
                old_row["created_at"],
                old_row["updated_at"],
            )
            assert row["doc"] == old_row["doc"] and row["value"] != old_row["value"]
    with PostgresStore.from_conn_string(db_dsn, serde=new_only, filterable=["kind"]) as v3:
        for (*ns, key), value in expected.items():
            item = v3.get(tuple(ns), key, refresh_ttl=False)
            assert item is not None and item.value == value, (ns, key)
        found = v3.search(("u",), filter={"kind": "doc"}, limit=100)
        assert len(found) == 6


def test_a_store_written_without_encryption_is_sealed_by_rotation(
    db_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with PostgresStore.from_conn_string(db_dsn) as plain:
        expected = _fill(plain, 2)
    assert any(SECRET in json.dumps(r["doc"]) for r in _items(db_dsn).values())
    keys = f"k1:{base64.b64encode(K1).decode()}"
    monkeypatch.setenv("PGCHECKPOINT_AES_KEYS", keys)
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    assert cli_main(["rotate-key", "--dsn", db_dsn, "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].split()[-2:] == ["items", "total"]
    assert captured.out.splitlines()[1].split() == ["(plaintext)", "0", "0", "0", "0", "6", "6"]
    assert "--store-filterable FIELDS for the store's items" in captured.err
    # without --allow-plaintext it stops at the first item and names the option
    assert cli_main(["rotate-key", "--dsn", db_dsn]) == 1
    assert "rotate-key --allow-plaintext" in capsys.readouterr().err
    args = ["--allow-plaintext", "--store-filterable", "kind", "--batch-size", "4"]
    assert cli_main(["rotate-key", "--dsn", db_dsn, *args]) == 0
    assert "re-encrypted 6 values under key 'k1'" in capsys.readouterr().out
    rows = _items(db_dsn)
    assert all(r["type"].endswith("+aesgcm2:k1") for r in rows.values())
    assert {json.dumps(r["doc"], sort_keys=True) for r in rows.values()} == {
        '{"kind": "pref"}',
        '{"kind": "fact"}',
        '{"kind": "doc"}',
    }
    assert not any(SECRET.encode() in bytes(r["value"]) for r in rows.values())
    sealed = enc(keys={"k1": K1})
    with PostgresStore.from_conn_string(db_dsn, serde=sealed, filterable=["kind"]) as reader:
        for (*ns, key), value in expected.items():
            item = reader.get(tuple(ns), key, refresh_ttl=False)
            assert item is not None and item.value == value
        assert {i.key for i in reader.search(("u",), filter={"kind": "fact"})} == {"dated"}


def test_rotation_never_undoes_a_concurrent_put_of_an_item(db_dsn: str) -> None:
    old, both = enc(), enc(keys={"k2": K2, "k1": K1})
    with PostgresStore.from_conn_string(db_dsn, serde=old, filterable=["kind"]) as app:
        app.put(("u",), "a", {"kind": "pref", "v": 1})
        app.put(("u",), "b", {"kind": "pref", "v": 2})
        with PostgresSaver.from_conn_string(db_dsn, serde=both) as saver:
            op = rotate_page_op(saver, "items", None, 10)
            queries = Queries()
            with psycopg.connect(db_dsn, autocommit=True, row_factory=dict_row) as conn:
                stmt = next(op)
                stmt = op.send(conn.execute(queries[stmt.name], stmt.params).fetchall())
                # between the rotation's read and its write, an app still on k1
                # puts item a again
                app.put(("u",), "a", {"kind": "fact", "v": 777})
                updated = conn.execute(queries[stmt.name], stmt.params).fetchall()
                with pytest.raises(StopIteration) as done:
                    op.send(updated)
    assert done.value.value == (1, 1, None)
    rows = _items(db_dsn)
    assert rows[("u", "a")]["type"].endswith(":k1") and rows[("u", "b")]["type"].endswith(":k2")
    with PostgresStore.from_conn_string(db_dsn, serde=both, filterable=["kind"]) as reader:
        assert reader.get(("u",), "a").value == {"kind": "fact", "v": 777}
        assert reader.get(("u",), "b").value == {"kind": "pref", "v": 2}


def test_an_interrupted_rotation_of_items_resumes(db_dsn: str) -> None:
    with PostgresStore.from_conn_string(db_dsn, serde=enc(), filterable=["kind"]) as app:
        expected = _fill(app, 3)
    both = enc(keys={"k2": K2, "k1": K1})

    def stop_after_first_batch(done: int, total: int) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rotate_key(db_dsn, both, batch_size=4, progress=stop_after_first_batch)
    second = rotate_key(db_dsn, both, batch_size=4)
    assert second.counts["k2"]["items"] == 4 and second.counts["k1"]["items"] == 5
    assert second.rotated == second.to_rotate == 5 and second.remaining == {}
    with PostgresStore.from_conn_string(db_dsn, serde=enc(keys={"k2": K2})) as reader:
        for (*ns, key), value in expected.items():
            assert reader.get(tuple(ns), key).value == value

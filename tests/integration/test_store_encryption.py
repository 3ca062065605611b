"""The store with a key: values sealed as checkpoint values are, filters over declared fields."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from support.savers import VARIANTS
from support.stores import Store, StoreApi, open_store

from pgcheckpoint import DecryptionError, EncryptedSerde, InvalidInputError

K1 = bytes(range(32))
SECRET = "MARKER-41c9e0"


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

"""The store on a real Postgres, over both drivers and three kinds of connection.

Each test runs on `sync|async` x `conn|pool|pipeline`; connections the test
hands over keep psycopg's defaults (no autocommit), which the store must cope
with. Filters are checked against `InMemoryStore`, LangGraph's reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from support.pgvector import pgvector_version
from support.savers import VARIANTS
from support.stores import Store, StoreApi, open_store

from pgcheckpoint import AsyncPostgresStore, PostgresStore
from pgcheckpoint.errors import InvalidInputError, SchemaOutOfDateError
from pgcheckpoint.store.vectors import PgvectorMissingError


@pytest.fixture(params=VARIANTS)
async def store(request: pytest.FixtureRequest, db_dsn: str) -> AsyncIterator[Store]:
    async with open_store(request.param, db_dsn) as opened:
        yield opened


@pytest.fixture
def api(store: Store) -> StoreApi:
    return StoreApi(store)


ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("docs",), "a", {"score": 10, "name": "bob", "flag": True, "meta": {"lang": "en", "n": 2}}),
    (("docs",), "b", {"score": 9, "name": "Alice", "flag": False, "meta": {"lang": "fr"}}),
    (("docs",), "c", {"score": 9.5, "name": "carol", "tags": ["x", "y"]}),
    (("docs",), "d", {"name": None, "big": 2**70}),
    (("docs",), "e", {"score": 100, "meta": {"lang": "en", "n": 10}}),
]

# (filter, the keys it keeps); InMemoryStore raises on an ordered comparison
# with an item that lacks the field, so those are checked against the list only
FILTERS: list[tuple[dict[str, Any], set[str]]] = [
    ({"score": {"$gt": 9}}, {"a", "c", "e"}),
    ({"score": {"$gte": 9.5}}, {"a", "c", "e"}),
    ({"score": {"$lt": 10}}, {"b", "c"}),
    ({"score": {"$lte": 10}}, {"a", "b", "c"}),
    ({"score": {"$gt": 9, "$lt": 100}}, {"a", "c"}),
    ({"meta": {"n": {"$gt": 5}}}, {"e"}),
    ({"name": {"$ne": "bob"}}, {"b", "c", "d", "e"}),
    ({"name": None}, {"d", "e"}),
    ({"name": {"$eq": None}}, {"d", "e"}),
    ({"meta": {"lang": "en"}}, {"a", "e"}),
    ({"tags": ["x", "y"]}, {"c"}),
    ({"tags": ["x"]}, set()),
    ({"flag": True}, {"a"}),
    ({"flag": {"$ne": True}}, {"b", "c", "d", "e"}),
    ({"big": 2**70}, {"d"}),
    ({"score": 10, "meta": {"lang": "en"}}, {"a"}),
]
_ORDERED = ("$gt", "$gte", "$lt", "$lte")


@pytest.mark.parametrize(("filter", "keys"), FILTERS, ids=[str(f) for f, _ in FILTERS])
async def test_filters_mean_what_they_say(
    api: StoreApi, filter: dict[str, Any], keys: set[str]
) -> None:
    memory = InMemoryStore()
    for ns, key, value in ITEMS:
        await api.put(ns, key, value)
        memory.put(ns, key, value)
    got = {i.key for i in await api.search(("docs",), filter=filter)}
    assert got == keys
    if not any(op in str(filter) for op in _ORDERED):
        assert got == {i.key for i in memory.search(("docs",), filter=filter)}


async def test_comparisons_keep_types_apart(api: StoreApi) -> None:
    await api.put(("t",), "num", {"v": 10})
    await api.put(("t",), "text", {"v": "9"})
    await api.put(("t",), "yes", {"v": True})
    assert {i.key for i in await api.search(("t",), filter={"v": {"$gt": 9}})} == {"num"}
    assert {i.key for i in await api.search(("t",), filter={"v": {"$gt": "10"}})} == {"text"}
    assert {i.key for i in await api.search(("t",), filter={"v": {"$gt": False}})} == {"yes"}
    assert {i.key for i in await api.search(("t",), filter={"v": 1})} == set()


LABELS = [
    ("user_1",),
    ("userX1",),
    ("a%b",),
    ("axxb",),
    ("back\\slash",),
    ("ünï", "cødé"),
    ("user_10",),
]


async def test_namespaces_match_labels_literally(api: StoreApi) -> None:
    for ns in LABELS:
        await api.put(ns, "k", {"v": 1})
        await api.put((*ns, "child"), "k", {"v": 1})
    for ns in LABELS:
        found = {i.namespace for i in await api.search(ns, limit=100)}
        assert found == {ns, (*ns, "child")}
        listed = set(await api.list_namespaces(prefix=ns, limit=100))
        assert listed == {ns, (*ns, "child")}
    assert set(await api.list_namespaces(suffix=("cødé",))) == {("ünï", "cødé")}
    assert set(await api.list_namespaces(prefix=("*", "child"), max_depth=1)) == {
        (ns[0],) for ns in LABELS if len(ns) == 1
    }


LISTED = [
    ("a",),
    ("a", "x"),
    ("a", "x", "y"),
    ("a", "y"),
    ("a-b",),
    ("a-b", "x"),
    ("a/b",),
    ("a/", "x", "y"),
    ("a b", "x"),
    ("a%", "x"),
    ("ab", "x", "z"),
    ("b", "x"),
    ("b", "y", "z"),
    ("ü", "x"),
]
# (prefix, suffix, max_depth, limit, offset)
LISTINGS: list[tuple[Any, Any, int | None, int, int]] = [
    (None, None, None, 100, 0),
    (None, None, 1, 100, 0),
    (None, None, 2, 100, 0),
    (None, None, None, 5, 3),
    (("a",), None, None, 100, 0),
    (("a",), None, 1, 100, 0),
    (("a",), None, 2, 100, 0),
    (("a", "x"), None, None, 100, 0),
    (None, ("x",), None, 100, 0),
    (None, ("x",), 1, 100, 0),
    (("*", "x"), None, None, 100, 0),
    (("*", "x"), None, 1, 100, 0),
    (("a", "*"), None, 2, 100, 0),
    (("a", "*", "y"), None, 1, 100, 0),
    (("many",), None, 1, 100, 0),
    (("many",), None, 2, 7, 990),
    (("many",), None, None, 100, 50),
    (("many",), ("deep",), None, 100, 0),
    (("many",), ("deep",), 2, 100, 0),
]


@pytest.mark.parametrize("many", [0, 1100], ids=["few namespaces", "1100 namespaces more"])
async def test_listings_match_in_memory_store(api: StoreApi, many: int) -> None:
    """Each listing as InMemoryStore's, whether the store walks its namespaces,
    jumps past those cut to the same labels, or reads every item (past 1000)."""
    namespaces = [*LISTED, *(("many", f"n{i}") for i in range(many))]
    namespaces += [("many", f"n{i}", "deep") for i in range(0, many, 97)]
    ops = [PutOp(ns, f"k{j}", {"j": j}) for ns in namespaces for j in range(2)]
    reference = InMemoryStore()
    reference.batch(ops)
    await api.batch(ops)
    for prefix, suffix, depth, limit, offset in LISTINGS:
        args = {"prefix": prefix, "suffix": suffix, "max_depth": depth}
        args.update(limit=limit, offset=offset)
        assert await api.list_namespaces(**args) == reference.list_namespaces(**args), args


async def test_search_pages_are_a_total_order(api: StoreApi) -> None:
    await api.batch([PutOp(("p",), f"k{i:03}", {"i": i}) for i in range(120)])
    seen: list[str] = []
    for offset in range(0, 120, 7):
        seen += [i.key for i in await api.search(("p",), limit=7, offset=offset)]
    assert sorted(seen) == [f"k{i:03}" for i in range(120)]


async def test_values_read_back_as_put(api: StoreApi) -> None:
    value = {"z": 1, "a": "x\x00y", "big": -(2**90), "u": "雪\u2603", "nested": {"b": 2, "a": 1}}
    await api.put(("v",), "k", value)
    item = await api.get(("v",), "k")
    assert item.value == value
    assert list(item.value) == list(value) and list(item.value["nested"]) == ["b", "a"]
    assert {i.key for i in await api.search(("v",), filter={"a": "x\x00y"})} == {"k"}


async def test_reads_in_a_batch_see_the_store_before_its_writes(api: StoreApi) -> None:
    await api.put(("b",), "old", {"v": 1})
    results = await api.batch(
        [
            PutOp(("b",), "new", {"v": 2}),
            PutOp(("b",), "old", None),
            GetOp(("b",), "old"),
            SearchOp(("b",)),
            ListNamespacesOp(),
        ]
    )
    assert results[2].value == {"v": 1}
    assert [i.key for i in results[3]] == ["old"]
    assert await api.get(("b",), "old") is None
    assert (await api.get(("b",), "new")).value == {"v": 2}


@pytest.mark.parametrize(
    "bad",
    [
        PutOp(("x.y",), "k", {"v": 1}),
        PutOp((), "k", {"v": 1}),
        PutOp(("x",), "k", ["ab", "cd"]),  # type: ignore[arg-type]
        PutOp(("x",), "k", {"v": float("nan")}),
        PutOp(("x",), "k\x00", {"v": 1}),
        SearchOp(("x",), filter={"v": {"$like": 1}}),
    ],
)
async def test_bad_input_changes_nothing(api: StoreApi, bad: Any) -> None:
    await api.put(("x",), "k", {"v": "original"})
    with pytest.raises((InvalidInputError, InvalidNamespaceError)):
        await api.batch([PutOp(("x",), "k", {"v": "changed"}), PutOp(("y",), "k", {"v": 1}), bad])
    assert (await api.get(("x",), "k")).value == {"v": "original"}
    assert await api.get(("y",), "k") is None


async def test_ttl_in_fractional_minutes_and_expired_items_stay_expired(
    api: StoreApi, db_dsn: str
) -> None:
    await api.put(("ttl",), "short", {"v": 1}, ttl=0.005)  # 0.3 s
    await api.put(("ttl",), "long", {"v": 1}, ttl=0.5)
    with psycopg.connect(db_dsn) as raw:
        minutes = dict(raw.execute("SELECT key, ttl_minutes FROM pgc_store").fetchall())
        assert minutes == {"short": 0.005, "long": 0.5}
        time.sleep(0.5)
        before = dict(raw.execute("SELECT key, expires_at FROM pgc_store").fetchall())
        assert await api.get(("ttl",), "short") is None
        assert [i.key for i in await api.search(("ttl",))] == ["long"]
        assert ("ttl",) in await api.list_namespaces()
        after = dict(raw.execute("SELECT key, expires_at FROM pgc_store").fetchall())
    assert after["short"] == before["short"]  # a read never extends an expired item
    assert after["long"] > before["long"]  # but it does a live one
    assert await api.sweep_ttl() == 1
    assert await api.get(("ttl",), "long") is not None


async def test_a_put_on_a_connection_without_autocommit_is_committed(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        store = PostgresStore(conn)
        store.setup()
        store.put(("c",), "k", {"v": 1})
    with psycopg.connect(db_dsn) as other:
        assert other.execute("SELECT count(*) FROM pgc_store").fetchone() == (1,)


@contextlib.asynccontextmanager
async def _from_conn_string(variant: str, dsn: str) -> AsyncIterator[Store]:
    # the store's own connection, in autocommit, and a pipeline on it when asked
    driver, kind = variant.split("-", 1)
    options: dict[str, Any] = {"pipeline": kind == "pipeline"}
    if kind == "pool":
        options = {"pool_config": {"min_size": 1, "max_size": 2}}
    if driver == "sync":
        with PostgresStore.from_conn_string(dsn, **options) as store:
            yield store
    else:
        async with AsyncPostgresStore.from_conn_string(dsn, **options) as astore:
            yield astore


@pytest.mark.parametrize("opened", ["handed", "own"])
@pytest.mark.parametrize("variant", VARIANTS)
async def test_a_failed_op_leaves_the_store_working(
    variant: str, opened: str, empty_db_dsn: str
) -> None:
    # before setup() every op fails; in a pipeline in autocommit the failure left the
    # pipeline aborted, so the schema check and every later op failed with PipelineAborted
    opening = open_store if opened == "handed" else _from_conn_string
    async with opening(variant, empty_db_dsn) as store:
        api = StoreApi(store)
        with pytest.raises(SchemaOutOfDateError, match="pgcheckpoint migrate"):
            await api.get(("f",), "k")
        await api.setup()
        await api.put(("f",), "k", {"v": 1})
        item = await api.get(("f",), "k")
        assert item is not None and item.value == {"v": 1}


async def test_setup_from_many_processes_at_once(empty_db_dsn: str) -> None:
    def setup() -> None:
        with PostgresStore.from_conn_string(empty_db_dsn) as store:
            store.setup()

    await asyncio.gather(*(asyncio.to_thread(setup) for _ in range(8)))
    with PostgresStore.from_conn_string(empty_db_dsn) as store:
        store.put(("s",), "k", {"v": 1})
        assert store.get(("s",), "k") is not None


async def test_without_pgvector_an_index_fails_setup_clearly_and_the_rest_works(
    db_dsn: str,
) -> None:
    if pgvector_version(db_dsn) is not None:
        pytest.skip("the test server has pgvector: test_store_vectors covers the index")
    index = {"dims": 3, "embed": lambda texts: [[1.0, 0.0, 0.0] for _ in texts]}
    with (
        PostgresStore.from_conn_string(db_dsn, index=index) as store,
        pytest.raises(PgvectorMissingError, match="apt-get install"),
    ):
        store.setup()
    with PostgresStore.from_conn_string(db_dsn) as plain:
        plain.put(("n",), "k", {"v": 1})
        assert plain.get(("n",), "k") is not None

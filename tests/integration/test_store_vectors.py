"""Semantic search with pgvector, halfvec included, on the server `vector_db_dsn` gives.

That is the test server when its pgvector is 0.7 or later, else the one
`PGCHECKPOINT_VECTOR_DSN` names, else an embedded PostgreSQL 18 with pgvector
0.8 (tests/conftest.py); they skip, saying why, only where none can be had.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from langgraph.store.base import PutOp
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from support.pgvector import HALFVEC, pgvector_version
from support.stores import Store, StoreApi, open_store

from pgcheckpoint import AsyncPostgresStore, PostgresStore
from pgcheckpoint.errors import InvalidInputError
from pgcheckpoint.store.vectors import PgvectorMissingError


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: letter counts of a, b, c, d (and 1 so none is zero)."""
    return [[t.count("a") + 0.1, t.count("b") + 0.1, t.count("c") + 0.1, 1.0] for t in texts]


INDEX = {"dims": 4, "embed": embed, "fields": ["text"]}


def skip_without_halfvec(dsn: str) -> None:
    """Skip where pgvector is older than 0.7.0 (a `PGCHECKPOINT_VECTOR_DSN` may name one)."""
    version = pgvector_version(dsn)
    if (version or (0,)) < HALFVEC:
        pytest.skip(f"this server's pgvector ({version}) has no halfvec (0.7+)")


@pytest.fixture(params=["sync-conn", "async-pool", "async-pipeline"])
async def api(request: pytest.FixtureRequest, vector_db_dsn: str) -> AsyncIterator[StoreApi]:
    store: Store
    async with open_store(request.param, vector_db_dsn, index=INDEX) as store:
        api = StoreApi(store)
        await api.setup()
        yield api


async def test_search_ranks_by_the_closest_vector_and_honours_offset(api: StoreApi) -> None:
    await api.batch([PutOp(("d",), f"k{i}", {"text": "a" * i + "b" * (9 - i)}) for i in range(10)])
    ranked = [i.key for i in await api.search(("d",), query="aaaaaaaaa", limit=10)]
    assert ranked[0] == "k9" and sorted(ranked) == [f"k{i}" for i in range(10)]
    paged = [
        (await api.search(("d",), query="aaaaaaaaa", limit=1, offset=o))[0].key for o in range(10)
    ]
    assert paged == ranked


async def test_a_filter_with_a_query_finds_every_match(api: StoreApi) -> None:
    await api.batch([PutOp(("f",), f"k{i}", {"text": "abc"[i % 3] * 3, "n": i}) for i in range(30)])
    found = await api.search(("f",), query="ccc", filter={"n": {"$gt": 20}}, limit=100)
    assert sorted(i.value["n"] for i in found) == list(range(21, 30))


async def test_a_put_without_index_removes_the_old_vectors(api: StoreApi) -> None:
    await api.put(("r",), "k", {"text": "aaaa"})
    await api.put(("r",), "other", {"text": "bbbb"})
    assert (await api.search(("r",), query="aaaa"))[0].key == "k"
    await api.put(("r",), "k", {"text": "aaaa"}, index=False)
    results = await api.search(("r",), query="aaaa")
    assert [(i.key, i.score is None) for i in results] == [("other", False), ("k", True)]


async def test_scores_follow_the_distance(vector_db_dsn: str) -> None:
    skip_without_halfvec(vector_db_dsn)
    for distance in ("cosine", "inner_product", "l2"):
        index = {**INDEX, "distance_type": distance, "ann_index_config": {"vector_type": "halfvec"}}
        with psycopg.connect(vector_db_dsn, autocommit=True) as raw:
            raw.execute("DROP TABLE IF EXISTS pgc_store_vectors")
        with PostgresStore.from_conn_string(vector_db_dsn, index=index) as store:
            store.setup()
            store.put(("s",), "k", {"text": "ab"})
            score = store.search(("s",), query="abc")[0].score
        a, b = embed(["ab"])[0], embed(["abc"])[0]
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        want = {
            "cosine": dot / math.hypot(*a) / math.hypot(*b),
            "inner_product": dot,
            "l2": -math.dist(a, b),
        }[distance]
        assert score == pytest.approx(want, abs=1e-2)


async def test_other_dims_are_refused_at_setup(vector_db_dsn: str) -> None:
    with PostgresStore.from_conn_string(vector_db_dsn, index=INDEX) as store:
        store.setup()
    with (
        PostgresStore.from_conn_string(vector_db_dsn, index={**INDEX, "dims": 8}) as other,
        pytest.raises(PgvectorMissingError, match=r"vector\(4\).*vector\(8\)"),
    ):
        other.setup()


async def test_an_embedding_of_the_wrong_size_changes_nothing(vector_db_dsn: str) -> None:
    def short(texts: list[str]) -> list[list[float]]:
        return [[1.0, 2.0] for _ in texts]

    with PostgresStore.from_conn_string(vector_db_dsn, index=INDEX) as store:
        store.setup()
        store.put(("w",), "k", {"text": "original"})
    with PostgresStore.from_conn_string(vector_db_dsn, index={**INDEX, "embed": short}) as bad:
        with pytest.raises(InvalidInputError, match="dimensions"):
            bad.put(("w",), "k", {"text": "changed"})
        assert bad.get(("w",), "k").value == {"text": "original"}


async def test_an_embedding_call_holds_no_connection(vector_db_dsn: str) -> None:
    # a pool of one connection: a read made while the embedding runs gets it
    stores: list[Any] = []
    reads: list[Any] = []

    def embed_and_read(texts: list[str]) -> list[list[float]]:
        reads.append(stores[0].get(("e",), "seen"))
        return embed(texts)

    with ConnectionPool(vector_db_dsn, min_size=1, max_size=1, timeout=5) as pool:
        stores.append(PostgresStore(pool, index={**INDEX, "embed": embed_and_read}))
        stores[0].setup()
        stores[0].put(("e",), "seen", {"text": "x"}, index=False)
        stores[0].put(("e",), "k", {"text": "abc"})
    astores: list[Any] = []

    async def aembed_and_read(texts: list[str]) -> list[list[float]]:
        reads.append(await astores[0].aget(("e",), "seen"))
        return embed(texts)

    async with AsyncConnectionPool(
        vector_db_dsn, min_size=1, max_size=1, timeout=5, open=False
    ) as apool:
        astores.append(AsyncPostgresStore(apool, index={**INDEX, "embed": aembed_and_read}))
        await asyncio.wait_for(astores[0].aput(("e",), "k2", {"text": "abc"}), 20)
    assert len(reads) == 2 and all(r is not None for r in reads)


@pytest.mark.parametrize(
    "ann",
    [
        {"kind": "flat"},
        {"kind": "hnsw", "m": 8, "ef_construction": 32},
        {"kind": "ivfflat", "nlist": 4, "vector_type": "halfvec"},
    ],
)
async def test_every_index_kind_sets_up_and_searches(
    vector_db_dsn: str, ann: dict[str, Any]
) -> None:
    if ann.get("vector_type") == "halfvec":
        skip_without_halfvec(vector_db_dsn)
    async with AsyncPostgresStore.from_conn_string(
        vector_db_dsn, index={**INDEX, "ann_index_config": ann}
    ) as store:
        await store.setup()
        await store.setup()  # again: nothing to do
        await store.aput(("k",), "a", {"text": "aaa"})
        await store.aput(("k",), "b", {"text": "bbb"})
        assert [i.key for i in await store.asearch(("k",), query="bb")] == ["b", "a"]
    with psycopg.connect(vector_db_dsn) as raw:
        indexes = [
            r[0]
            for r in raw.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'pgc_store_vectors'"
                " AND indexname <> 'pgc_store_vectors_pkey'"
            ).fetchall()
        ]
    if ann["kind"] == "flat":
        assert indexes == []
    else:
        assert len(indexes) == 1 and f"USING {ann['kind']}" in indexes[0]

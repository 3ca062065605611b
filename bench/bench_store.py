"""The store workload: pgcheckpoint's `PostgresStore` against the official one, same run.

Both stores get the same items (namespaces `("users", "u<n>", "memories")`,
values of ~200 bytes with a `kind` and a `score`) at 10k and 100k items, over a
pool of 8, and are timed interleaved: `put`, `get`, `search` with a filter,
`search` with a query (a deterministic fake embedding; only on a server with
pgvector), `list_namespaces`, a batch of 50 gets over 50 namespaces, and
batches of 1, 10 and 100 puts. The filter
is an equality: the official store compares `$gt` as text, so a range filter
would not ask both for the same items.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
from bench_db import POOL_SIZE, ROOT, Databases
from bench_timing import Plan, Results, log, row, timed
from langgraph.store.base import GetOp, PutOp
from langgraph.store.postgres import PostgresStore as OfficialStore

from pgcheckpoint import PostgresStore

KINDS = ("ours", "official")
USERS = 200
DIMS = 16


def fake_embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: bytes of a digest of the text, scaled."""
    out = []
    for text in texts:
        digest = hashlib.sha256(text.encode()).digest()
        out.append([b / 255 + 0.01 for b in digest[:DIMS]])
    return out


def _item(i: int) -> tuple[tuple[str, ...], str, dict[str, Any]]:
    value = {
        "text": f"memory {i}: " + "x" * 150,
        "kind": ("preference", "fact", "event")[i % 3],
        "score": i % 50,
    }
    return ("users", f"u{i % USERS}", "memories"), f"m{i}", value


def _has_pgvector(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row_ = conn.execute(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    return bool(row_ and row_[0])


@contextlib.contextmanager
def _stores(dbs: Databases, index: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    pool = {"min_size": POOL_SIZE, "max_size": POOL_SIZE}
    ours_dsn, official_dsn = dbs.fresh("ours", "store"), dbs.fresh("official", "store")
    try:
        with (
            PostgresStore.from_conn_string(ours_dsn, pool_config=pool, index=index) as ours,
            OfficialStore.from_conn_string(
                official_dsn,
                pool_config=pool,
                index=index,  # type: ignore[arg-type]
            ) as official,
        ):
            ours.setup()
            official.setup()
            yield {"ours": ours, "official": official}
    finally:
        dbs.drop(ours_dsn)
        dbs.drop(official_dsn)


def _fill(stores: dict[str, Any], start: int, stop: int) -> None:
    for first in range(start, stop, 1000):
        ops = [PutOp(*_item(i)) for i in range(first, min(first + 1000, stop))]
        for store in stores.values():
            store.batch(ops)


@contextlib.contextmanager
def _vector_databases(dbs: Databases, results: Results) -> Iterator[Databases | None]:
    """The bench server when it has pgvector, else the embedded pgvector server, else None."""
    if _has_pgvector(dbs.dsn("postgres")):
        yield dbs
        return
    try:
        from pgcheckpoint.contrib.embedded import embedded_dsn

        server = embedded_dsn(ROOT / ".pgcheckpoint" / "pgdata-pgvector", pgvector=True)
    except ImportError as exc:
        results.notes.append(f"store: no pgvector ({exc}), so no `search` with a query")
        yield None
        return
    results.notes.append(
        "store: the bench server has no pgvector; both stores ran on the embedded "
        "PostgreSQL 18 with pgvector (`embedded_dsn(pgvector=True)`)"
    )
    with Databases(server) as vector_dbs:
        yield vector_dbs


def run_store(dbs: Databases, plan: Plan, modes: Sequence[str], results: Results) -> None:
    sizes = (10_000, 100_000) if plan.samples >= 90 else (2_000,)
    with _vector_databases(dbs, results) as vector_dbs:
        vectors = vector_dbs is not None
        index = {"dims": DIMS, "embed": fake_embed, "fields": ["text"]} if vectors else None
        _run_store(vector_dbs or dbs, plan, sizes, index, results)


def _run_store(
    dbs: Databases,
    plan: Plan,
    sizes: Sequence[int],
    index: dict[str, Any] | None,
    results: Results,
) -> None:
    vectors = index is not None
    with _stores(dbs, index) as stores:
        filled = 0
        for size in sizes:
            _fill(stores, filled, size)
            filled = size
            log(f"store: {size} items in each store")
            _time(stores, plan, size, results, vectors)


def _time(stores: dict[str, Any], plan: Plan, size: int, results: Results, vectors: bool) -> None:
    rng = random.Random(size)
    n, warmup, block = plan.samples, plan.warmup, plan.block
    label = f"{size // 1000}k items"

    def each(call: Callable[[Any, int], object]) -> dict[str, list[float]]:
        return timed(KINDS, n, warmup, block, lambda kind, i: call(stores[kind], i))

    def user(i: int) -> tuple[str, ...]:
        return ("users", f"u{(i * 7919) % USERS}", "memories")

    measured = {
        "put": each(lambda s, i: s.put(user(i), f"new{rng.randrange(10**9)}", _item(i)[2])),
        "get": each(lambda s, i: s.get(*_item((i * 7919) % size)[:2])),
        "search with a filter": each(
            lambda s, i: s.search(user(i)[:2], filter={"kind": "fact"}, limit=10)
        ),
        "list_namespaces": each(lambda s, i: s.list_namespaces(prefix=("users",), max_depth=2)),
    }
    if vectors:
        measured["search with a query"] = each(
            lambda s, i: s.search(user(i)[:2], query=f"memory {i}", limit=10)
        )
    # the official store runs one SELECT per namespace of a batch's gets
    measured["batch of 50 gets over 50 namespaces"] = each(
        lambda s, i: s.batch([GetOp(*_item((i * 7919 + j * 101) % size)[:2]) for j in range(50)])
    )
    for batch in (1, 10, 100):
        measured[f"batch of {batch} puts"] = each(
            lambda s, i, batch=batch: s.batch(
                [PutOp(user(i), f"b{i}-{j}", _item(j)[2]) for j in range(batch)]
            )
        )
    notes = {"search with a query": _query_note(stores)} if vectors else {}
    for name, times in measured.items():
        target = 0.5 if name in ("batch of 10 puts", "batch of 100 puts") else 1.0
        results.rows += row(
            "store", f"{name}, {label}", "sync", times, target=target, note=notes.get(name, "")
        )


def _query_note(stores: dict[str, Any]) -> str:
    """How many of the items each store's searches with a query found, when they differ.

    pgcheckpoint ranks every item in scope (an exact search); the official
    store asks the HNSW index for its nearest vectors first and then drops
    those of other namespaces, which in a large store can leave a page empty.
    """
    found = {
        kind: sum(
            len(store.search(("users", f"u{u}"), query=f"memory {u}", limit=10))
            for u in range(0, USERS, USERS // 10)
        )
        for kind, store in stores.items()
    }
    if found["ours"] == found["official"]:
        return ""
    return (
        f"of 10 searches for 10 items each: pgcheckpoint found {found['ours']}, "
        f"the official store {found['official']}"
    )

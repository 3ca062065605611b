"""Many writers of the store at once: tasks over an async pool, threads over a pool.

Each worker runs mixed batches (puts, deletes, gets, searches, listings) over
keys the others touch too, as the official store's users saw DeadlockDetected
do (5 to 62 times in 5 s, with 32 tasks). The store takes no lock of its own:
every batch locks its items in key order. Each worker also writes a key of its
own in sequence, which must end at its last write.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgcheckpoint import AsyncPostgresStore, PostgresStore

ROUNDS = 40
SHARED = [f"k{i}" for i in range(12)]


def _batch(rng: random.Random, worker: int, round_: int) -> list[Any]:
    keys = rng.sample(SHARED, 6)
    ops: list[Any] = []
    for key in keys:
        ns = ("shared", str(rng.randrange(2)))
        if rng.random() < 0.3:
            ops.append(PutOp(ns, key, None))
        else:
            ops.append(PutOp(ns, key, {"worker": worker, "round": round_}, ttl=5))
        ops.append(GetOp(ns, key))
    ops += [
        SearchOp(("shared",), filter={"round": {"$gte": 0}}, limit=5),
        ListNamespacesOp(max_depth=1),
        PutOp(("own",), f"w{worker}", {"round": round_}),
    ]
    return ops


async def test_32_tasks_over_an_async_pool(db_dsn: str) -> None:
    async with AsyncConnectionPool(db_dsn, min_size=2, max_size=8, open=False) as pool:
        store = AsyncPostgresStore(pool)

        async def worker(n: int) -> None:
            rng = random.Random(n)
            for round_ in range(ROUNDS):
                await store.abatch(_batch(rng, n, round_))

        await asyncio.gather(*(worker(n) for n in range(32)))
        for n in range(32):
            item = await store.aget(("own",), f"w{n}")
            assert item is not None and item.value == {"round": ROUNDS - 1}


def test_16_threads_over_a_pool(db_dsn: str) -> None:
    errors: list[BaseException] = []
    with ConnectionPool(db_dsn, min_size=2, max_size=8) as pool:
        store = PostgresStore(pool)

        def worker(n: int) -> None:
            rng = random.Random(100 + n)
            try:
                for round_ in range(ROUNDS):
                    store.batch(_batch(rng, n, round_))
            except BaseException as exc:  # reported below, with the others
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for n in range(16):
            item = store.get(("own",), f"w{n}")
            assert item is not None and item.value == {"round": ROUNDS - 1}

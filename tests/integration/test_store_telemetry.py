"""The store is traced as the savers are: a span per batch read, batch write and sweep."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from langgraph.store.base import GetOp, PutOp

from pgcheckpoint import AsyncPostgresStore, PostgresStore

from .test_telemetry import Recorded, otel  # noqa: F401  (the fixture)


async def test_store_batches_have_spans(otel: Recorded, db_dsn: str) -> None:  # noqa: F811
    with PostgresStore.from_conn_string(db_dsn, telemetry=otel.telemetry) as store:
        store.batch([PutOp(("t",), "k", {"v": 1}), GetOp(("t",), "k")])
        store.sweep_ttl()
    async with AsyncPostgresStore.from_conn_string(db_dsn, telemetry=otel.telemetry) as astore:
        await astore.aget(("t",), "k")
    names = [s.name.removeprefix("pgcheckpoint.") for s in otel.spans()]
    assert names.count("store_read") == 2
    assert names.count("store_write") == 1 and names.count("store_sweep") == 1

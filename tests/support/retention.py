"""Threads of several ages, for the retention sweeps and the `prune` and `stats` commands.

Checkpoint ids are made in the past (`uuid6` at a past clock, as LangGraph
makes them) and `created_at` is set to the same moments, so a thread is as
idle as `AGES` says. `table_rows` takes a digest of every row, to compare what
a sweep left with what its rule says.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any
from unittest import mock

import psycopg
from langgraph.checkpoint.base import id as checkpoint_id_module
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from psycopg import sql

from support.savers import SaverApi

DAY = timedelta(days=1)
# Rows of a table as (primary key, digest of the row): what "nothing else changed" compares.
Rows = dict[str, dict[tuple[Any, ...], str]]


def past_id(when: datetime) -> str:
    """A checkpoint id LangGraph would have made at `when` (uuid6 at a past clock)."""
    clock = SimpleNamespace(time_ns=lambda: int(when.timestamp() * 1_000_000_000))
    last = checkpoint_id_module._last_v6_timestamp
    checkpoint_id_module._last_v6_timestamp = None
    try:
        with mock.patch.object(checkpoint_id_module, "time", clock):
            return str(checkpoint_id_module.uuid6(clock_seq=-1))
    finally:
        checkpoint_id_module._last_v6_timestamp = last


async def write_thread(
    api: SaverApi,
    db_dsn: str,
    thread_id: str,
    *,
    age: timedelta,
    steps: int = 4,
    ns: str = "",
    parents: dict[str, str] | None = None,
) -> str:
    """A history of `steps` checkpoints a minute apart, the newest `age` old.

    Channel `doc` is written at the first step only (later checkpoints read it
    from there), `log` grows every step (long enough to be stored as deltas),
    and every checkpoint gets one task's writes. `parents` is LangGraph's
    metadata of a subgraph's checkpoints: the checkpoint of each enclosing
    namespace it ran from. Returns the id of the newest checkpoint.
    """
    saver = api.saver
    newest = datetime.now(timezone.utc) - age
    config = generate_config(thread_id, checkpoint_ns=ns)
    versions: dict[str, str] = {}
    values: dict[str, Any] = {}
    stamps = []
    for step in range(steps):
        when = newest - timedelta(minutes=steps - 1 - step)
        new: dict[str, str] = {}
        if step == 0:
            new["doc"] = saver.get_next_version(None, None)
            values["doc"] = {"title": f"{thread_id} doc", "body": "b" * 300}
        new["log"] = saver.get_next_version(versions.get("log"), None)
        values["log"] = [f"{thread_id} entry {i}: " + "x" * 40 for i in range(step + 1)]
        versions.update(new)
        checkpoint = generate_checkpoint(
            checkpoint_id=past_id(when),
            channel_values=dict(values),
            channel_versions=dict(versions),
        )
        metadata = generate_metadata(step=step, parents=dict(parents or {}))
        config = await api.put(config, checkpoint, metadata, new)
        await api.put_writes(config, [("log", f"write {step}")], f"task-{step}", "")
        stamps.append((checkpoint["id"], when))
    update = sql.SQL(
        "UPDATE {}.pgc_checkpoints SET created_at = %s"
        " WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
    ).format(sql.Identifier(saver.schema))
    with psycopg.connect(db_dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(update, [(when, thread_id, ns, cid) for cid, when in stamps])
    return str(config["configurable"]["checkpoint_id"])


# thread -> namespace -> age of its newest checkpoint
AGES: dict[str, dict[str, timedelta]] = {
    "fresh": {"": timedelta(0)},
    "week": {"": 7 * DAY, "sub:1": 8 * DAY},
    "idle": {"": 40 * DAY, "sub:1": 45 * DAY},
    "mixed": {"": 40 * DAY, "sub:1": DAY},  # a subgraph ran yesterday: not idle
    "ancient": {"": 400 * DAY},
}
IDLE = {"idle", "ancient"}


async def write_threads(api: SaverApi, db_dsn: str) -> dict[str, str]:
    """The threads of AGES under unique ids: name -> thread id.

    A subgraph namespace ran from its thread's newest root checkpoint (an
    interrupted subgraph waits there), so pruning keeps it as long as that stays.
    """
    ids = {name: f"{name}-{uuid.uuid4()}" for name in AGES}
    for name, namespaces in AGES.items():
        heads: dict[str, str] = {}
        for ns, age in namespaces.items():
            parents = {"": heads[""]} if ns else None
            heads[ns] = await write_thread(api, db_dsn, ids[name], age=age, ns=ns, parents=parents)
    return ids


def table_rows(db_dsn: str, schema: str = "public") -> Rows:
    """Every row of the three tables: key -> digest of the row.

    A checkpoint's parent link is left out: pruning unlinks a kept checkpoint
    from a deleted parent (the retention tests check the links on their own).
    """
    keys = {
        "pgc_checkpoints": "thread_id, checkpoint_ns, checkpoint_id",
        "pgc_blobs": "thread_id, checkpoint_ns, channel, version",
        "pgc_writes": "thread_id, checkpoint_ns, checkpoint_id, task_id, idx",
    }
    out: Rows = {}
    with psycopg.connect(db_dsn) as conn:
        for table, key in keys.items():
            query = sql.SQL(
                "SELECT {key}, (to_jsonb(t) - 'parent_checkpoint_id')::text"
                " FROM {table} t ORDER BY {key}"
            ).format(key=sql.SQL(key), table=sql.Identifier(schema, table))
            rows = conn.execute(query).fetchall()
            out[table] = {tuple(r[:-1]): hashlib.sha256(r[-1].encode()).hexdigest() for r in rows}
    return out

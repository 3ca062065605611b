"""No statement on a hot or batch path costs enough for Postgres to JIT-compile it.

With `jit = on` (the default) Postgres JIT-compiles any plan whose estimated
cost passes `jit_above_cost` (100,000), and past 500,000 it also inlines and
optimises: 50 ms to 1 s per call, on statements that run in a few ms. Recursive
walks are where estimates explode (the planner guesses ten rounds of ten times
the rows), so each statement is checked on a thread with delta chains, among
other threads, in its custom and its generic plan.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base.id import uuid6
from psycopg.rows import dict_row

from pgcheckpoint import PostgresSaver
from pgcheckpoint.core.deletes import needed_for_op
from pgcheckpoint.core.delta_history import delta_history_op
from pgcheckpoint.core.reads import get_tuple_op, list_op
from pgcheckpoint.core.rows import checkpoint_keys
from pgcheckpoint.ops import Stmt

from .test_listing import grow_chat

# Postgres's default: plans costing more are JIT-compiled when jit is on.
JIT_ABOVE_COST = 100_000


@pytest.fixture
def populated(db_dsn: str) -> tuple[str, PostgresSaver]:
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        grow_chat(saver, "chat", 300)
        for turn in range(30):
            grow_chat(saver, f"other-{turn}", 3)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        # a database of many threads: 20,000 more checkpoints and values, so a
        # plan that scans a table instead of looking a thread up costs what it would
        conn.execute(
            "INSERT INTO pgc_checkpoints (thread_id, checkpoint_ns, checkpoint_id, type,"
            " checkpoint, channel_versions, inline_channels, metadata_type, metadata_blob,"
            " metadata)"
            " SELECT 'filler-' || (n / 100), '', lpad(n::text, 12, '0'), 'msgpack', '\\x80',"
            " jsonb_build_object('messages', lpad(n::text, 32, '0')), '{}', 'msgpack',"
            " '\\x80', '{}' FROM generate_series(1, 20000) AS n"
        )
        conn.execute(
            "INSERT INTO pgc_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
            " SELECT 'filler-' || (n / 100), '', 'messages', lpad(n::text, 32, '0'),"
            " 'msgpack', '\\x90' FROM generate_series(1, 20000) AS n"
        )
        conn.execute("ANALYZE")
    return db_dsn, saver


def assert_cheap(dsn: str, saver: PostgresSaver, stmts: list[Stmt]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stmt in stmts:
            for mode in ("force_custom_plan", "force_generic_plan"):
                conn.execute(f"SET plan_cache_mode = {mode}")
                plan = conn.execute(
                    "EXPLAIN (FORMAT JSON) " + saver.queries[stmt.name], stmt.params
                ).fetchone()
                assert plan is not None
                cost = plan[0][0]["Plan"]["Total Cost"]
                assert cost < JIT_ABOVE_COST, (stmt.name, mode, cost)


def statements_of_list(
    dsn: str, saver: PostgresSaver, config: Any, limit: int | None
) -> list[Stmt]:
    op = list_op(saver, config, limit=limit)
    stmt = next(op)
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor(row_factory=dict_row, binary=True)
        rows = cur.execute(saver.queries[stmt.name], stmt.params).fetchall()
    return [stmt, op.send(rows)]


@pytest.mark.parametrize("limit", [10, 100, None])
def test_reads(populated: tuple[str, PostgresSaver], limit: int | None) -> None:
    dsn, saver = populated
    stmts = [next(get_tuple_op(saver, {"configurable": {"thread_id": "chat"}}))]
    for config in ({"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}, None):
        stmts += statements_of_list(dsn, saver, config, limit)
    assert_cheap(dsn, saver, stmts)


def test_maintenance(populated: tuple[str, PostgresSaver]) -> None:
    dsn, saver = populated
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = (
            conn.cursor(row_factory=dict_row)
            .execute(
                "SELECT thread_id, checkpoint_ns, checkpoint_id FROM pgc_checkpoints"
                " WHERE thread_id = 'chat' ORDER BY checkpoint_id"
            )
            .fetchall()
        )
    doomed, kept = rows[:-50], rows[-50:]
    rebuild = next(needed_for_op(saver, kept))
    stmts = [
        rebuild,
        Stmt("delete_checkpoints", checkpoint_keys(doomed)),
        Stmt("measure_checkpoints", checkpoint_keys(doomed)),
    ]
    assert_cheap(dsn, saver, stmts)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


def _rows_read(conn: psycopg.Connection[Any], sql: str, params: Any, table: str) -> int:
    """The rows of `table` that running `sql` read, by EXPLAIN ANALYZE."""
    row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    return sum(
        n["Actual Rows"] * n["Actual Loops"] + n.get("Rows Removed by Filter", 0)
        for n in _nodes(row[0][0]["Plan"])
        if n.get("Relation Name") == table
    )


def test_delta_walk_reads_only_the_walked_writes_without_statistics(db_dsn: str) -> None:
    """A thread written faster than autovacuum analyzes it: the walk still reads by key.

    Without statistics the planner took the thread's writes for one row and read
    all of them once for each checkpoint of the walk (20 ms at turn 500 of a chat).
    """
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for table in ("pgc_checkpoints", "pgc_writes", "pgc_blobs"):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    config: dict[str, Any] = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        for step in range(240):
            # a snapshot at step 120 bounds the walk from the last checkpoint
            values = {"messages": [f"m{step}"]} if step == 120 else {}
            checkpoint = {
                "v": 4,
                "id": str(uuid6()),
                "ts": datetime.now(timezone.utc).isoformat(),
                "channel_values": values,
                "channel_versions": {"messages": f"{step + 1:032}.0"},
                "versions_seen": {},
                "updated_channels": ["messages"],
            }
            new = {"messages": f"{step + 1:032}.0"}
            config = saver.put(config, checkpoint, {"step": step}, new)  # type: ignore[arg-type]
            saver.put_writes(config, [("messages", f"w{step}"), ("other", step)], f"task-{step}")
        stmt = next(delta_history_op(saver, config, ["messages"]))
        history = saver.get_delta_channel_history(config=config, channels=["messages"])
        assert [w[2] for w in history["messages"]["writes"]] == [f"w{s}" for s in range(120, 239)]
    walked_writes = 2 * 120
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        read = _rows_read(conn, saver.queries[stmt.name], stmt.params, "pgc_writes")
    assert read <= walked_writes, read


def test_hot_reads_settle_on_a_generic_plan(populated: tuple[str, PostgresSaver]) -> None:
    """Past its five custom plans, `get_tuple` runs a cached generic plan.

    Postgres keeps planning a prepared statement at every call when its generic
    plan looks costlier than the custom ones: the latest checkpoint, read by
    ORDER BY ... LIMIT 1 over its joined values, was planned anew every time.
    (A list page stays planned per call: its generic plan cannot see the limit.)
    """
    dsn, _ = populated
    config: dict[str, Any] = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        saver = PostgresSaver(conn)
        for _ in range(8):
            latest = saver.get_tuple(config)
            assert latest is not None
            saver.get_tuple(latest.config)
            list(saver.list(config, limit=10))
        plans = {
            str(name): (generic, custom)
            for name, generic, custom in conn.execute(
                "SELECT split_part(statement, E'\\n', 1), generic_plans, custom_plans"
                " FROM pg_prepared_statements WHERE statement LIKE '-- pgcheckpoint: %'"
            )
        }
    for name in ("get_latest_checkpoint", "get_checkpoint_by_id", "listed_values"):
        assert plans[f"-- pgcheckpoint: {name}"][0] > 0, (name, plans)


def test_latest_checkpoint_reads_one_index_entry_without_statistics(db_dsn: str) -> None:
    """A thread written faster than autovacuum analyzes it: `get_tuple` reads its newest row only.

    With `max(checkpoint_id)` the planner, taking the thread for a few rows,
    aggregated every checkpoint of it instead of reading the index backwards
    (0.7 ms at 650 checkpoints, growing with the thread).
    """
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for table in ("pgc_checkpoints", "pgc_writes", "pgc_blobs"):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    config: dict[str, Any] = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        grow_chat(saver, "long", 300)  # in tables never analyzed
        latest = saver.get_tuple(config)
        assert latest is not None
        stmt = next(get_tuple_op(saver, config))
    assert stmt.name == "get_latest_checkpoint"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for mode in ("force_custom_plan", "force_generic_plan"):
            conn.execute(f"SET plan_cache_mode = {mode}")
            read = _rows_read(conn, saver.queries[stmt.name], stmt.params, "pgc_checkpoints")
            assert read <= 2, (mode, read)

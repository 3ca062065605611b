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
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from psycopg.rows import dict_row

from pgcheckpoint import PostgresSaver, PostgresStore
from pgcheckpoint.core.deletes import delete_for_runs_op, prune_op
from pgcheckpoint.core.delta_history import delta_history_op
from pgcheckpoint.core.reads import get_tuple_op, list_op
from pgcheckpoint.core.sends import parent_sends_op
from pgcheckpoint.maintenance.retention import _trim_batch_op
from pgcheckpoint.ops import Stmt
from pgcheckpoint.store.batch import prepare_batch, read_op

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


def test_the_sends_of_pre_v4_checkpoints_are_read_by_key(
    populated: tuple[str, PostgresSaver],
) -> None:
    """`parent_sends`, for a page of parents (a listing of pre-v4 checkpoints), is cheap."""
    dsn, saver = populated
    with psycopg.connect(dsn, autocommit=True) as conn:
        keys = conn.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM pgc_checkpoints"
            " WHERE thread_id = 'chat' ORDER BY checkpoint_id DESC LIMIT 100"
        ).fetchall()
    assert len(keys) == 100
    stmt = next(parent_sends_op(saver, keys))
    assert stmt.name == "parent_sends"
    assert_cheap(dsn, saver, [stmt])


# The maintenance statements run under bounded_plans, without JIT whatever they cost.
BOUNDED = {"delta_links", "hanging_calls", "delete_checkpoints", "measure_checkpoints"}


def test_maintenance(populated: tuple[str, PostgresSaver]) -> None:
    """A prune's other statements are cheap; its costly ones run without JIT."""
    dsn, saver = populated
    with psycopg.connect(dsn, autocommit=True) as conn:
        plans = explained_statements(conn, saver, prune_op(saver, ["chat"]), BOUNDED)
    assert "delete_checkpoints" in plans
    for name, plan in plans.items():
        assert "JIT" not in plan, name
    ran = statements_run(dsn, saver, prune_op(saver, ["chat"]))
    assert {s.name for s in ran} >= {"delta_links", "delete_checkpoints"}
    assert_cheap(
        dsn, saver, [s for s in ran if s.name in ("thread_heads", "thread_checkpoint_ids")]
    )


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


# -- maintenance of a fanned-out thread without statistics -----------------------------

FANNED_OUT = 2_000  # subgraph namespaces of one checkpoint each
ROOT = "1f000000-0000-6000-8000-000000000000"
OLD_ROOT = "1e000000-0000-6000-8000-000000000000"
# Looped scans: a nested loop that reads one of these again for each row of its other side.
LOOPED = {"CTE Scan", "WorkTable Scan", "Seq Scan", "Materialize"}


def fan_out(dsn: str, *, from_root: str, run_id: str | None = None) -> None:
    """Thread `fan`: two root checkpoints and FANNED_OUT subgraph calls, one checkpoint
    each, that ran from `from_root`; written after the last ANALYZE, which saw
    another thread of three checkpoints."""
    insert = (
        "INSERT INTO pgc_checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint,"
        " metadata_type, metadata_blob, metadata, run_id, created_at)"
        " SELECT %(thread)s, CASE WHEN n = 0 THEN '' ELSE 'research:' || n END,"
        " CASE WHEN n = 0 THEN %(root)s"
        "      ELSE '1f000001-0000-6000-8000-' || lpad(n::text, 12, '0') END,"
        " 'msgpack', '\\x80', 'msgpack', '\\x80',"
        " CASE WHEN n = 0 THEN '{}'::jsonb"
        "      ELSE jsonb_build_object('parents', jsonb_build_object('', %(from_root)s::text)) END,"
        " CASE WHEN n = 1 THEN %(run_id)s END, now() - interval '40 days'"
        " FROM generate_series(0, %(n)s) AS n"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("pgc_checkpoints", "pgc_writes", "pgc_blobs"):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        conn.execute(
            insert, {"thread": "seen", "root": ROOT, "from_root": ROOT, "run_id": None, "n": 2}
        )
        conn.execute("ANALYZE")
        params = {"thread": "fan", "root": ROOT, "from_root": from_root, "run_id": run_id}
        conn.execute(insert, {**params, "n": FANNED_OUT})
        conn.execute(
            "INSERT INTO pgc_checkpoints (thread_id, checkpoint_ns, checkpoint_id, type,"
            " checkpoint, metadata_type, metadata_blob, created_at) VALUES ('fan', '', %s,"
            " 'msgpack', '\\x80', 'msgpack', '\\x80', now() - interval '41 days')",
            [OLD_ROOT],
        )


def statements_run(dsn: str, saver: PostgresSaver, op: Any) -> list[Stmt]:
    """The statements an op runs, run for real in one transaction, rolled back."""
    with psycopg.connect(dsn) as conn:
        return list(explained_statements(conn, saver, op, set(), keep=True).values())


def explained_statements(
    conn: psycopg.Connection[Any],
    saver: PostgresSaver,
    op: Any,
    names: set[str],
    keep: bool = False,
) -> dict[str, Any]:
    """Run an op (or a sweep's ops) statement by statement in one transaction, rolled
    back; each statement in `names` is first run by EXPLAIN (ANALYZE, FORMAT JSON) in a
    savepoint rolled back. Returns each one's plan (`keep`: every statement run)."""
    out: dict[str, Any] = {}
    cur = conn.cursor(row_factory=dict_row)
    with conn.transaction(force_rollback=True):
        stmt = next(op)
        try:
            while True:
                query = saver.queries[stmt.name]
                if stmt.name in names:
                    with conn.transaction(force_rollback=True):
                        plan = cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, stmt.params)
                        out[stmt.name] = plan.fetchone()["QUERY PLAN"][0]  # type: ignore[index]
                elif keep:
                    out[f"{len(out)}"] = stmt
                cur.execute(query, stmt.params, prepare=False)
                rows = (
                    [{}] * cur.rowcount
                    if stmt.count
                    else (cur.fetchall() if cur.description else [])
                )
                stmt = op.send(rows)
        except StopIteration:
            pass
    return out


def work(plan: dict[str, Any]) -> int:
    """The rows each node of a plan produced or filtered out, summed over its loops."""
    return sum(
        (n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)
         + n.get("Rows Removed by Join Filter", 0)) * n.get("Actual Loops", 1)
        for n in _nodes(plan["Plan"])
    )  # fmt: skip


def looped_scans(plan: dict[str, Any]) -> list[str]:
    return [
        f"{n['Plans'][1]['Node Type']} under a nested loop, {n['Plans'][1]['Actual Loops']} times"
        for n in _nodes(plan["Plan"])
        if n["Node Type"] == "Nested Loop"
        and n["Plans"][1]["Node Type"] in LOOPED
        and n["Plans"][1].get("Actual Loops", 0) > 1
    ]


@pytest.mark.parametrize("hanging", [False, True], ids=["nothing-hangs", "every-call-hangs"])
@pytest.mark.parametrize("maintenance", ["prune", "retention", "delete_for_runs"])
def test_maintenance_of_a_fanned_out_thread_reads_each_row_a_few_times_without_statistics(
    db_dsn: str, maintenance: str, hanging: bool
) -> None:
    """12,000 subgraph calls of one checkpoint, written after the last ANALYZE: taking
    the thread for a few rows, the planner looped over one set of its rows for each
    row of another (7.4 s finding the calls that hang, under the thread's lock; 5k/10k/20k
    namespaces took 1.4/5.2/21 s). Every maintenance statement now reads a row a
    bounded number of times: no scan looped, and a plan's work grows with the thread."""
    fan_out(db_dsn, from_root=OLD_ROOT if hanging else ROOT, run_id="run-1")
    with psycopg.connect(db_dsn) as conn:
        saver = PostgresSaver(conn)
        op: Any = {
            "prune": lambda: prune_op(saver, ["fan"]),
            "retention": lambda: _trim_batch_op(saver, ["fan"], None, 1, saver.schema, False),
            "delete_for_runs": lambda: delete_for_runs_op(saver, ["run-1"]),
        }[maintenance]()
        plans = explained_statements(conn, saver, op, BOUNDED)
    assert "delete_checkpoints" in plans
    rows = FANNED_OUT + 2
    for name, plan in plans.items():
        assert looped_scans(plan) == [], name
        # a quadratic plan works FANNED_OUT times as much: 2,000 rows a row
        assert work(plan) <= 50 * rows, (name, work(plan))


def test_store_reads_refresh_ttls_by_key_whatever_the_statistics_say(db_dsn: str) -> None:
    """Items that got their TTLs after the last ANALYZE: a read's refresh finds each by key.

    With the expiry as a plain comparison, the partial index on expires_at looked
    as cheap as the key to a planner that had seen no TTL, and the refresh read
    every item with a TTL for each item found (290 ms a search, 30 ms a get, at
    100k items).
    """
    with PostgresStore.from_conn_string(db_dsn, ttl={"refresh_on_read": True}) as store:
        store.setup()
        store.batch([PutOp(("users", f"u{i % 10}"), f"k{i}", {"n": i}) for i in range(2000)])
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE pgc_store SET (autovacuum_enabled = false)")
            conn.execute("ANALYZE pgc_store")
            conn.execute(
                "UPDATE pgc_store SET ttl_minutes = 60, expires_at = now() + interval '1 hour'"
            )
            batches = {
                "store_get_one": ([GetOp(("users", "u1"), "k1")], 5),
                "store_get": ([GetOp(("users", "u1"), "k1"), GetOp(("users", "u2"), "k2")], 10),
                # the namespace's 200 items, then the page's 10 refreshed
                "store_search_one": ([SearchOp(("users", "u1"), filter={"n": 1}, limit=10)], 250),
                "store_search": ([SearchOp(("users", "u1"), filter={"n": {"$gt": 5}})], 250),
            }
            for name, (ops, most) in batches.items():
                prepared = prepare_batch(store.state, ops)
                stmt = next(read_op(store.state, prepared, omit_expired=True))
                assert stmt.name == name
                read = _rows_read(conn, store.queries[stmt.name], stmt.params, "pgc_store")
                assert read <= most, (name, read)


def test_a_namespace_listing_reads_a_row_per_namespace_not_every_item(db_dsn: str) -> None:
    """`store_list_namespaces` walks the namespaces down the key, one probe each, and
    jumps past those cut to the same labels; it read every item in range before."""
    with PostgresStore.from_conn_string(db_dsn) as store:
        store.setup()
        store.batch(
            [PutOp(("users", f"u{i % 50}", "memories"), f"k{i}", {"n": i}) for i in range(2000)]
        )
        users = (MatchCondition("prefix", ("users",)),)
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute("ANALYZE pgc_store")
            # (listing, rows it may read): 50 namespaces, then one label for all
            for op, most in (
                (ListNamespacesOp(users, max_depth=2), 55),
                (ListNamespacesOp(users, max_depth=1), 5),
                (ListNamespacesOp(), 55),
            ):
                prepared = prepare_batch(store.state, [op])
                stmt = next(read_op(store.state, prepared, omit_expired=True))
                read = _rows_read(conn, store.queries[stmt.name], stmt.params, "pgc_store")
                assert read <= most, (op, read)


def test_a_lone_search_settles_on_a_generic_plan_in_a_large_store(db_dsn: str) -> None:
    """`store_search_one` is planned five times on a connection, then runs its generic plan.

    With the parameters read into the namespace range, custom plans estimated the
    range from the column's histogram (a few rows of a large store) and always
    looked cheaper than the generic plan, so Postgres planned every search anew.
    """
    with PostgresStore.from_conn_string(db_dsn) as store:
        store.setup()
        for first in range(0, 20_000, 2000):
            store.batch(
                [
                    PutOp(("users", f"u{i % 200}", "memories"), f"k{i}", {"kind": i % 3})
                    for i in range(first, first + 2000)
                ]
            )
    with psycopg.connect(db_dsn, autocommit=True, prepare_threshold=0) as conn:
        conn.execute("ANALYZE pgc_store")
        store = PostgresStore(conn)
        for i in range(8):
            assert len(store.search(("users", f"u{i}"), filter={"kind": 1}, limit=10)) == 10
        row = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '-- pgcheckpoint: store_search_one%'"
        ).fetchone()
    assert row is not None and row[0] >= 2, row

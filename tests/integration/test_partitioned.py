"""Ready for Citus: tables keyed by thread, each statement of one thread on one partition.

Citus shards a table by a distribution column and sends a statement to one
shard when it filters on that column by equality. pgcheckpoint's column is
`thread_id`. Without a Citus build here, these tests prove the same layout
with PostgreSQL's own hash partitioning:
- every primary and foreign key of the three tables leads with `thread_id`
  (a distributed table's keys must include the distribution column);
- the tables rebuilt `PARTITION BY HASH (thread_id)` from the migrations' DDL
  (`sql/schema.sql`, which CI keeps equal to them) pass LangGraph's
  conformance suite, on both drivers;
- every statement pgcheckpoint runs for one thread touches one partition of
  each table: its plan (EXPLAIN ANALYZE, through auto_explain, of the very
  statement with the parameters the saver gave it) scans no other. Statements
  on a set of threads (a page of `list`, a prune, a retention batch) touch
  only those threads' partitions. A statement whose thread is a plain
  equality (`thread_id = %(thread_id)s`) does so in its generic plan too, the
  plan a prepared statement may settle on: the partitions are pruned when it
  runs ("Subplans Removed");
- the statements that name no thread are the ones the README lists as spanning
  threads, with their cost (`SPANNING`).
The workload is the conformance suite plus what the suite does not cover:
DeltaChannel chats, encrypted copies, prune, delete_for_runs, retention, key
rotation, stats, thread locks and the thread view.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from support.chat import chat_graph
from support.retention import write_threads
from support.savers import SaverApi, ThreadedSaver

from pgcheckpoint import AsyncPostgresSaver, EncryptedSerde, PostgresSaver
from pgcheckpoint.core.official import official_threads_op
from pgcheckpoint.errors import MissingCheckpointError, MissingParentError
from pgcheckpoint.maintenance.rotation import rotation_sweep
from pgcheckpoint.maintenance.stats import storage_stats_op
from pgcheckpoint.ops import Stmt
from pgcheckpoint.resources import sql_dir
from pgcheckpoint.statements.queries import Queries, statement_names
from pgcheckpoint.telemetry.activity import Activity
from pgcheckpoint.telemetry.config import Telemetry
from pgcheckpoint.threadview.ops import (
    checkpoint_values_op,
    recent_threads_op,
    resolve_checkpoint_op,
    thread_page_op,
)
from pgcheckpoint.threadview.search import sealed_search_op

PARTITIONS = 4
SAMPLES = 2  # runs of each statement explained, per number of threads it names
TABLES = ("pgc_checkpoints", "pgc_blobs", "pgc_writes")
_PARTITION = re.compile(rf"^({'|'.join(TABLES)})_p\d+$")

# The statements that name no thread, each with what it reads (README, "High
# availability and scaling"). On Citus each runs on every shard.
SPANNING = {
    "list_checkpoints": "`list` without a thread: the newest checkpoints of every thread",
    "list_checkpoints_sealed": "`list_checkpoints` of an encrypting saver",
    "run_checkpoints": "delete_for_runs: the run_id index of every partition",
    "retention_count_candidates": "retention progress: one pass over the checkpoints",
    "retention_candidates": "retention: a walk of the primary key, thread by thread",
    "count_values_by_cipher": "rotate-key: one pass over the three tables",
    "rotation_checkpoints_page": "rotate-key: a page of the checkpoints in key order",
    "rotation_blobs_page": "rotate-key: a page of the values in key order",
    "rotation_writes_page": "rotate-key: a page of the writes in key order",
    "storage_counts": "stats: one pass over the three tables",
    "storage_largest_threads": "stats: one pass over the three tables, grouped by thread",
    "storage_unreachable": "stats: one pass over the three tables, rows no read reaches",
    "inspect_recent_threads": "threads: the created_at index, newest first",
    "inspect_metadata_page": "threads --metadata with a key: the created_at index, a page",
    "storage_damaged": "stats: one pass over the checkpoints and the values",
    "official_threads_missing": "switch warning: the official table's last rows, a lookup each",
}


def partitioned_schema(partitions: int = PARTITIONS) -> str:
    """`sql/schema.sql` with the saver's tables `PARTITION BY HASH (thread_id)` in parts."""

    def partitioned(table: re.Match[str]) -> str:
        name = table[1]
        parts = "".join(
            f"\nCREATE TABLE {name}_p{n} PARTITION OF {name}"
            f" FOR VALUES WITH (MODULUS {partitions}, REMAINDER {n});"
            for n in range(partitions)
        )
        return table[0].removesuffix(";") + " PARTITION BY HASH (thread_id);" + parts

    # the saver's tables, keyed by thread; the store's is keyed by namespace
    schema, count = re.subn(
        rf"^CREATE TABLE ({'|'.join(TABLES)}) \(.*?^\);",
        partitioned,
        (sql_dir() / "schema.sql").read_text(),
        flags=re.MULTILINE | re.DOTALL,
    )
    assert count == len(TABLES), "sql/schema.sql no longer has the three tables"
    return schema


@pytest.fixture
def partitioned_dsn(empty_db_dsn: str) -> str:
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        conn.execute(partitioned_schema())  # type: ignore[arg-type]
        (kinds,) = conn.execute(
            "SELECT array_agg(DISTINCT relkind::text) FROM pg_class WHERE relname = ANY(%s)",
            [list(TABLES)],
        ).fetchone() or ([],)
    assert kinds == ["p"]
    return empty_db_dsn


# -- keys -------------------------------------------------------------------------------


def test_every_key_of_the_tables_leads_with_thread_id(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute(
            "SELECT c.conname, c.contype::text,"
            " (SELECT attname FROM pg_attribute WHERE attrelid = c.conrelid"
            "  AND attnum = c.conkey[1]) AS first,"
            " (SELECT attname FROM pg_attribute WHERE attrelid = c.confrelid"
            "  AND attnum = c.confkey[1]) AS referenced_first"
            " FROM pg_constraint c WHERE c.conrelid = ANY(%s::regclass[])"
            " AND c.contype IN ('p', 'u', 'f')",
            [list(TABLES)],
        ).fetchall()
    assert {kind for _, kind, _, _ in rows} == {"p", "f"}
    assert len([r for r in rows if r[1] == "p"]) == len(TABLES)
    off = [(name, first, ref) for name, kind, first, ref in rows
           if first != "thread_id" or (kind == "f" and ref != "thread_id")]  # fmt: skip
    assert off == []


# -- the conformance suite on partitioned tables ------------------------------------------


async def conformance_problems(subject: BaseCheckpointSaver[str]) -> dict[str, Any]:
    @checkpointer_test(name="partitioned")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        yield subject

    report = await validate(factory)
    return {
        name: result.failures or "not detected"
        for name, result in report.results.items()
        if not (result.detected and result.passed and result.tests_passed > 0)
    }


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_conformance_on_tables_partitioned_by_thread(
    partitioned_dsn: str, driver: str
) -> None:
    if driver == "async":
        async with AsyncConnectionPool(partitioned_dsn, max_size=4, open=False) as apool:
            problems = await conformance_problems(AsyncPostgresSaver(apool))
    else:
        with ConnectionPool(partitioned_dsn, max_size=4, open=True) as pool:
            problems = await conformance_problems(ThreadedSaver(PostgresSaver(pool)))
    assert problems == {}


# -- every statement of one thread on one partition ---------------------------------------


class _Recording(Activity):
    def __init__(self, seen: list[Stmt], name: str | None, subject: Any) -> None:
        super().__init__(name, subject)
        self.seen = seen

    def starting(self, stmt: Stmt) -> None:
        super().starting(stmt)
        self.seen.append(stmt)


class StatementLog(Telemetry):
    """Telemetry that keeps every statement the savers run, with its parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.statements: list[Stmt] = []

    def observe(self, subject: Any = None, name: str | None = None, **_: Any) -> Activity:
        return _Recording(self.statements, name, subject)


def workload(dsn: str, log: StatementLog) -> None:
    """What the conformance suite leaves out, on one pool: every other statement."""
    keys = {"k1": bytes(32)}
    with ConnectionPool(dsn, max_size=4, open=True) as pool:
        plain = PostgresSaver(pool, telemetry=log)
        sealed = PostgresSaver(pool, telemetry=log, serde=EncryptedSerde(keys=keys))
        # reads across threads meet both kinds of rows
        reader = PostgresSaver(
            pool, telemetry=log, serde=EncryptedSerde(keys=keys, allow_plaintext=True)
        )
        threads = asyncio.run(write_threads(SaverApi(plain), dsn))
        list(plain.list(None, limit=3))  # before any sealed row: a plain saver refuses those
        chats = {}
        for saver in (plain, sealed):
            graph = chat_graph(saver, snapshot_frequency=3)
            config = {"configurable": {"thread_id": f"chat-{uuid.uuid4()}"}}
            for turn in range(7):
                graph.invoke({"messages": [f"human {turn}"], "turn": turn}, config)
            list(graph.get_state_history(config))
            chats[saver] = config["configurable"]["thread_id"]
        chat = chats[plain]
        list(reader.list(None, limit=3))
        list(plain.list({"configurable": {"thread_id": chat}}))
        list(sealed.list({"configurable": {"thread_id": chats[sealed]}}))
        latest = plain.get_tuple({"configurable": {"thread_id": chat}})
        assert latest is not None
        plain.put_writes(latest.config, [("__error__", "boom")], "failed-task")  # upsert_write
        sealed_latest = sealed.get_tuple({"configurable": {"thread_id": chats[sealed]}})
        assert sealed_latest is not None
        assert sealed.get_tuple(sealed_latest.config) is not None
        plain.copy_thread(chat, f"{chat}-copy")
        sealed.copy_thread(chats[sealed], f"{chats[sealed]}-copy")
        plain.prune([f"{chat}-copy"])
        plain.prune([chat, chats[sealed]])
        plain.delete_for_runs([str(latest.metadata.get("run_id") or "no-run")])
        plain.prune([threads["fresh"]], strategy="delete")
        plain.delete_thread(f"{chat}-copy")
        # a run that goes on after its thread was deleted under it saves nothing more
        orphan = {"configurable": {"thread_id": f"orphan-{uuid.uuid4()}", "checkpoint_ns": ""}}
        first = plain.put(orphan, empty_checkpoint(), {"source": "input", "step": -1}, {})
        plain.delete_thread(orphan["configurable"]["thread_id"])
        with pytest.raises(MissingParentError):
            plain.put(first, empty_checkpoint(), {"source": "loop", "step": 0}, {})
        for writes in ([("__error__", "boom")], [("a", 1), ("b", 2)]):
            with pytest.raises(MissingCheckpointError):  # one write, and several
                plain.put_writes(first, writes, "task")
        with pytest.raises(MissingCheckpointError):
            plain.put_writes(first, [("__error__", "boom"), ("__interrupt__", "why")], "task")
        week = threads["week"]
        reader.run(recent_threads_op(reader), atomic=True)
        sealed.run(sealed_search_op(sealed, metadata=[{"source": "loop"}], limit=2), atomic=True)
        page = plain.run(thread_page_op(plain, week, ""), atomic=True)
        plain.run(thread_page_op(plain, week, "", until=page.nodes[-1].checkpoint_id))
        plain.run(thread_page_op(plain, week, "no-such-namespace"))
        plain.run(resolve_checkpoint_op(plain, week, "", page.nodes[0].checkpoint_id[-8:]))
        plain.run(checkpoint_values_op(plain, week, "", page.nodes[0].checkpoint_id))
        stats = plain.run(storage_stats_op())
        assert all(sizes["table_bytes"] > 0 for sizes in stats.tables.values()), stats.tables
        plain.prune_older_than(timedelta(days=30), dry_run=True, progress=lambda _: None)
        plain.prune_keep_last(2, dry_run=True)
        plain.prune_keep_last(3)
        plain.prune_older_than(timedelta(days=30))
        rotating = EncryptedSerde(keys={"k2": bytes(range(32)), **keys}, allow_plaintext=True)
        rotator = PostgresSaver(pool, telemetry=log, serde=rotating)
        rotator.run_each(rotation_sweep(rotator))
        with plain.lock_thread(week):
            pass
        # the switch warning's check, with the official saver's tables there
        with pool.connection() as conn:
            conn.execute(
                "CREATE TABLE checkpoints (thread_id text, checkpoint_ns text,"
                " checkpoint_id text, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))"
            )
            conn.execute("CREATE TABLE checkpoint_migrations (v int PRIMARY KEY)")
            conn.execute(
                "INSERT INTO checkpoints VALUES (%s, '', 'c1'), ('only-official', '', 'c1')",
                [week],
            )
        found = plain.run(official_threads_op("public"))
        assert found is not None and found.missing == 1


def threads_named(params: dict[str, Any]) -> set[str]:
    """The threads a statement's parameters name (none: it spans threads)."""
    named: set[str] = set()
    for key in ("thread_id", "source_thread_id", "target_thread_id", "thread_ids", "scope_ids"):
        value = params.get(key)
        if isinstance(value, str):
            named.add(value)
        elif value is not None:
            named.update(value)
    return named


@dataclass
class Plan:
    """The partitions a plan ran scans on, per table, and how many it pruned at run time."""

    touched: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    removed: int = 0

    def add(self, node: dict[str, Any]) -> None:
        match = _PARTITION.match(node.get("Relation Name", ""))
        if match and node.get("Actual Loops", 0) > 0:
            self.touched[match[1]].add(node["Relation Name"])
        self.removed += int(node.get("Subplans Removed", 0))
        for child in node.get("Plans", ()):
            self.add(child)

    def widest(self) -> int:
        return max((len(parts) for parts in self.touched.values()), default=0)


class Explainer:
    """Runs statements as the saver does, in transactions rolled back, and reads their plans.

    auto_explain logs the plan of every statement the session runs, with
    `ANALYZE` (which nodes ran); at `client_min_messages = log` the log
    line comes back as a notice.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.queries = Queries()
        self.notices: list[str] = []
        conn.add_notice_handler(lambda diag: self.notices.append(diag.message_primary or ""))
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_analyze = on",
            "auto_explain.log_timing = off",
            "auto_explain.log_format = json",
            "client_min_messages = log",
        ):
            conn.execute(f"SET {setting}")  # type: ignore[arg-type]

    def plan(self, stmt: Stmt, *, generic: bool) -> Plan | None:
        """The plan of `stmt` run now, or None if it failed (what it names may be gone)."""
        mode = "force_generic_plan" if generic else "force_custom_plan"
        self.conn.execute(f"SET plan_cache_mode = {mode}")  # type: ignore[arg-type]
        self.notices.clear()
        try:
            with (
                self.conn.transaction(force_rollback=True),
                self.conn.cursor(row_factory=dict_row, binary=True) as cur,
            ):
                query = self.queries[stmt.name]
                cur.execute(query, stmt.params, prepare=generic)  # type: ignore[arg-type]
        except psycopg.Error:
            return None
        plan = Plan()
        for notice in self.notices:
            _, found, text = notice.partition("plan:\n")
            if found:
                plan.add(json.loads(text)["Plan"])
        return plan


def on_tables() -> set[str]:
    """The statements that read or write the three tables."""
    queries = Queries()
    return {name for name in queries if any(table in queries[name] for table in TABLES)}


async def test_each_statement_of_one_thread_reads_one_partition(partitioned_dsn: str) -> None:
    log = StatementLog()
    async with AsyncConnectionPool(partitioned_dsn, max_size=4, open=False) as apool:
        assert await conformance_problems(AsyncPostgresSaver(apool, telemetry=log)) == {}
    await asyncio.to_thread(workload, partitioned_dsn, log)

    tables = on_tables()
    assert tables <= statement_names()
    assert tables - {stmt.name for stmt in log.statements} == set(), (
        "the workload no longer runs every statement on the tables"
    )
    with psycopg.connect(partitioned_dsn, autocommit=True) as conn:
        try:
            conn.execute("LOAD 'auto_explain'")
        except psycopg.Error as exc:
            pytest.skip(f"auto_explain cannot be loaded here: {exc}")
        explainer = Explainer(conn)
        # statement and plan -> (threads named, most partitions of one table scanned)
        wide: dict[str, tuple[int, int]] = {}
        spanning: set[str] = set()
        explained: dict[tuple[str, int], int] = defaultdict(int)
        runtime_pruned = 0
        for stmt in log.statements:
            threads = threads_named(dict(stmt.params))
            kind = (stmt.name, len(threads))
            if stmt.name not in tables or explained[kind] >= SAMPLES:
                continue
            if not threads:
                spanning.add(stmt.name)
                explained[kind] = SAMPLES
                continue
            bound = min(len(threads), PARTITIONS)
            custom = explainer.plan(stmt, generic=False)
            if custom is None:
                continue  # another run of it will do
            explained[kind] += 1
            if custom.widest() > bound:
                wide[f"{stmt.name} (custom plan)"] = (len(threads), custom.widest())
            if isinstance(stmt.params.get("thread_id"), str):  # a plain equality
                generic = explainer.plan(stmt, generic=True)
                assert generic is not None
                runtime_pruned += generic.removed
                if generic.widest() > 1:
                    wide[f"{stmt.name} (generic plan)"] = (1, generic.widest())
    assert tables - {name for name, _ in explained} == set()
    assert wide == {}
    assert runtime_pruned > 0  # generic plans prune when they run, not when planned
    assert spanning == set(SPANNING)

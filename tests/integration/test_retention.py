"""Retention: prune_older_than, prune_keep_last, the pg_cron procedure.

Threads of several ages are written through the saver with checkpoint ids
made in the past (see `support.retention`). Each option must remove exactly
what it says: the rows left are compared, table by table, with a model of the
rule, and the counts it reports with the rows that went. Threads that use a
`DeltaChannel` (a real compiled graph) must read back as `InMemorySaver` reads
the same conversation, and go on from there. The `prune` and `stats` commands
are tested in tests/cli.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import PutOp
from support.chat import chat_graph
from support.retention import AGES, DAY, IDLE, Rows, table_rows, write_thread, write_threads
from support.rows import TABLES
from support.savers import SaverApi

from pgcheckpoint import InvalidInputError, MissingParentError, PostgresSaver, PostgresStore
from pgcheckpoint.core.locks import maintenance_lock_key, thread_lock_key
from pgcheckpoint.maintenance.retention import PruneReport
from pgcheckpoint.resources import sql_dir
from pgcheckpoint.schema.migrate import upgrade
from pgcheckpoint.store.batch import SWEEP_BATCH

MONTH = timedelta(days=30)


@pytest.fixture
async def threads(api: SaverApi, db_dsn: str) -> dict[str, str]:
    """The threads of AGES under unique ids: name -> thread id."""
    return await write_threads(api, db_dsn)


def assert_parents_exist(db_dsn: str) -> None:
    """No checkpoint names a parent that is gone."""
    with psycopg.connect(db_dsn) as conn:
        dangling = conn.execute(
            "SELECT c.thread_id, c.checkpoint_id FROM pgc_checkpoints c"
            " WHERE c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS ("
            "  SELECT 1 FROM pgc_checkpoints p WHERE p.thread_id = c.thread_id"
            "  AND p.checkpoint_ns = c.checkpoint_ns"
            "  AND p.checkpoint_id = c.parent_checkpoint_id)"
        ).fetchall()
    assert dangling == []


def checkpoint_rows(db_dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(db_dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, channel_versions FROM pgc_checkpoints"
        ).fetchall()


def base_versions(db_dsn: str) -> dict[tuple[str, str, str, str], str | None]:
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute(
            "SELECT thread_id, checkpoint_ns, channel, version, base_version FROM pgc_blobs"
        ).fetchall()
    return {tuple(r[:4]): r[4] for r in rows}  # type: ignore[misc]


def expected_after(db_dsn: str, before: Rows, doomed: set[tuple[str, str, str]]) -> Rows:
    """The rows left once `doomed` checkpoints go, by the rule: their writes go, and the
    values no remaining checkpoint reads (directly or as a delta's base)."""
    bases = base_versions(db_dsn)
    kept_refs: set[tuple[str, str, str, str]] = set()
    for row in checkpoint_rows(db_dsn):
        key = (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])
        if key not in doomed:
            for channel, version in row["channel_versions"].items():
                kept_refs.add((row["thread_id"], row["checkpoint_ns"], channel, version))
    frontier = list(kept_refs)
    while frontier:
        t, ns, ch, v = frontier.pop()
        base = bases.get((t, ns, ch, v))
        if base is not None and (t, ns, ch, base) not in kept_refs:
            kept_refs.add((t, ns, ch, base))
            frontier.append((t, ns, ch, base))
    touched = {(t, ns) for t, ns, _ in doomed}
    return {
        "pgc_checkpoints": {k: d for k, d in before["pgc_checkpoints"].items() if k not in doomed},
        "pgc_writes": {k: d for k, d in before["pgc_writes"].items() if k[:3] not in doomed},
        "pgc_blobs": {
            k: d for k, d in before["pgc_blobs"].items() if k[:2] not in touched or k in kept_refs
        },
    }


def newest_per_namespace(db_dsn: str, keep: int, thread_ids: set[str] | None = None) -> set:
    """Checkpoints beyond the newest `keep` of each namespace (of the given threads)."""
    by_ns: dict[tuple[str, str], list[str]] = {}
    for row in checkpoint_rows(db_dsn):
        if thread_ids is None or row["thread_id"] in thread_ids:
            by_ns.setdefault((row["thread_id"], row["checkpoint_ns"]), []).append(
                row["checkpoint_id"]
            )
    return {
        (t, ns, cid) for (t, ns), ids in by_ns.items() for cid in sorted(ids, reverse=True)[keep:]
    }


def went(before: Rows, after: Rows) -> dict[str, int]:
    return {table: len(before[table]) - len(after[table]) for table in TABLES}


def assert_counts(report: PruneReport, gone: dict[str, int], threads: int) -> None:
    assert report.threads == threads
    assert report.checkpoints == gone["pgc_checkpoints"]
    assert report.writes == gone["pgc_writes"]
    assert report.blobs == gone["pgc_blobs"]
    assert report.bytes > 0
    assert report.skipped == [] and report.failed == []
    assert report.complete


async def tuples(api: SaverApi, thread_id: str) -> dict[tuple[str, str], Any]:
    """Every checkpoint of a thread as `get_tuple` reads it, by (namespace, id)."""
    out = {}
    for listed in await api.list({"configurable": {"thread_id": thread_id}}):
        tup = await api.get_tuple(listed.config)
        assert tup is not None
        conf = tup.config["configurable"]
        out[(conf["checkpoint_ns"], conf["checkpoint_id"])] = (
            tup.checkpoint,
            tup.metadata,
            sorted(tup.pending_writes or [], key=repr),
        )
    return out


# -- prune_older_than, prune_keep_last ------------------------------------------------


async def test_delete_removes_idle_threads_whole_and_nothing_else(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    before = table_rows(db_dsn)
    idle_ids = {threads[name] for name in IDLE}
    expected = {
        table: {k: d for k, d in rows.items() if k[0] not in idle_ids}
        for table, rows in before.items()
    }
    seen: list[tuple[int, int | None]] = []

    dry = await api.prune_older_than(
        MONTH, dry_run=True, progress=lambda r: seen.append((r.examined, r.total))
    )
    assert table_rows(db_dsn) == before
    assert dry.dry_run
    assert_counts(dry, went(before, expected), threads=len(IDLE))
    assert seen[0] == (0, len(IDLE)) and seen[-1] == (len(IDLE), len(IDLE))

    report = await api.prune_older_than(MONTH, batch_size=1)
    assert table_rows(db_dsn) == expected
    assert_counts(report, went(before, expected), threads=len(IDLE))
    assert (report.bytes, report.examined) == (dry.bytes, len(IDLE))
    for name in IDLE:
        assert await api.list({"configurable": {"thread_id": threads[name]}}) == []

    again = await api.prune_older_than(MONTH)
    assert (again.threads, again.examined, again.checkpoints) == (0, 0, 0)
    # a longer cutoff reaches only the ancient thread, which is gone already
    assert (await api.prune_older_than(5 * DAY)).threads == 1  # "week"


async def test_keep_latest_keeps_each_namespace_head_of_idle_threads(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    idle_ids = {threads[name] for name in IDLE}
    heads_before = {t: await tuples(api, t) for t in idle_ids}
    before = table_rows(db_dsn)
    doomed = newest_per_namespace(db_dsn, 1, idle_ids)
    expected = expected_after(db_dsn, before, doomed)

    dry = await api.prune_older_than(MONTH, strategy="keep_latest", dry_run=True)
    assert table_rows(db_dsn) == before
    assert_counts(dry, went(before, expected), threads=len(IDLE))

    report = await api.prune_older_than(MONTH, strategy="keep_latest", batch_size=1)
    assert table_rows(db_dsn) == expected
    assert_parents_exist(db_dsn)
    assert_counts(report, went(before, expected), threads=len(IDLE))
    assert report.bytes == dry.bytes
    for thread_id in idle_ids:
        left = await tuples(api, thread_id)
        # one per namespace, each read back as before (`doc` was written by a
        # checkpoint that is gone, its value must not be)
        assert len(left) == len(AGES["idle" if thread_id == threads["idle"] else "ancient"])
        assert all(heads_before[thread_id][key] == value for key, value in left.items())
    assert (await api.prune_older_than(MONTH, strategy="keep_latest")).threads == 0


async def test_keep_last_trims_every_thread_whatever_its_age(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    everything = {t: await tuples(api, t) for t in threads.values()}
    before = table_rows(db_dsn)
    doomed = newest_per_namespace(db_dsn, 2)
    expected = expected_after(db_dsn, before, doomed)

    dry = await api.prune_keep_last(2, dry_run=True)
    assert table_rows(db_dsn) == before
    assert_counts(dry, went(before, expected), threads=len(threads))

    report = await api.prune_keep_last(2, batch_size=2)
    assert table_rows(db_dsn) == expected
    assert_parents_exist(db_dsn)
    assert_counts(report, went(before, expected), threads=len(threads))
    for thread_id, was in everything.items():
        left = await tuples(api, thread_id)
        assert len(left) == 2 * len({ns for ns, _ in was})
        assert all(was[key] == value for key, value in left.items())
    assert (await api.prune_keep_last(2)).examined == 0  # nothing left to trim
    assert (await api.prune_keep_last(4)).threads == 0


async def test_max_threads_and_max_seconds_bound_a_run(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    # three threads are idle for 5 days: "ancient", "idle" and "week"
    # max_seconds is checked before each batch but the first: one batch runs
    first = await api.prune_older_than(5 * DAY, batch_size=1, max_seconds=1e-9)
    assert (first.examined, first.threads, first.complete) == (1, 1, False)
    second = await api.prune_older_than(5 * DAY, batch_size=1, max_threads=1)
    assert (second.examined, second.threads, second.complete) == (1, 1, False)
    rest = await api.prune_older_than(5 * DAY, max_threads=50)
    assert (rest.examined, rest.threads, rest.complete) == (1, 1, True)
    left = {row[0] for row in table_rows(db_dsn)["pgc_checkpoints"]}
    assert left == {threads["fresh"], threads["mixed"]}


async def test_bad_arguments_are_refused(api: SaverApi) -> None:
    for kwargs, message in [
        ({"older_than": timedelta(0)}, "older_than must be a positive timedelta"),
        ({"older_than": 30}, "older_than must be a positive timedelta"),
        ({"older_than": MONTH, "strategy": "all"}, "unknown retention strategy 'all'"),
        ({"older_than": MONTH, "batch_size": 0}, "batch_size must be a positive int"),
        ({"older_than": MONTH, "max_threads": 0}, "max_threads must be a positive int"),
        ({"older_than": MONTH, "max_seconds": -1}, "max_seconds must be a positive number"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            await api.prune_older_than(**kwargs)
    with pytest.raises(InvalidInputError, match="keep must be a positive int"):
        await api.prune_keep_last(0)


async def test_threads_in_use_are_skipped_then_taken_by_the_next_sweep(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    pruning, guarded = threads["idle"], threads["ancient"]
    with psycopg.connect(db_dsn) as other:
        # another maintenance run (prune, delete_for_runs, a sweep) holds one thread
        other.execute("SELECT pg_advisory_xact_lock(%s::int8)", (maintenance_lock_key(pruning),))
        # a guarded run holds the other (lock_thread's session lock)
        with psycopg.connect(db_dsn, autocommit=True) as runner:
            runner.execute(
                "SELECT pg_advisory_lock(%s::int8)", (thread_lock_key(guarded, "public"),)
            )
            report = await api.prune_older_than(MONTH)
            assert sorted(report.skipped) == sorted([pruning, guarded])
            assert (report.threads, report.examined) == (0, 2)
            for thread_id, checkpoints in ((pruning, 8), (guarded, 4)):
                listed = await api.list({"configurable": {"thread_id": thread_id}})
                assert len(listed) == checkpoints
            # released here, not by closing: a closed session may outlive close()
            runner.execute(
                "SELECT pg_advisory_unlock(%s::int8)", (thread_lock_key(guarded, "public"),)
            )
        other.rollback()
    report = await api.prune_older_than(MONTH)
    assert (report.threads, report.skipped) == (2, [])


async def test_a_put_whose_parent_was_deleted_is_refused(api: SaverApi, db_dsn: str) -> None:
    thread_id = f"gone-{uuid.uuid4()}"
    await write_thread(api, db_dsn, thread_id, age=40 * DAY)
    latest = await api.get_tuple(generate_config(thread_id))
    assert latest is not None
    assert (await api.prune_older_than(MONTH)).threads == 1
    # a run that read the thread before the sweep saves its next checkpoint after
    with pytest.raises(MissingParentError, match=r"its parent .* was deleted") as caught:
        await api.put(latest.config, generate_checkpoint(), generate_metadata(step=9), {})
    assert caught.value.parent_checkpoint_id == latest.config["configurable"]["checkpoint_id"]
    assert table_rows(db_dsn) == {table: {} for table in TABLES}
    # a new run on the same thread id starts afresh
    await api.put(generate_config(thread_id), generate_checkpoint(), generate_metadata(), {})
    assert len(await api.list({"configurable": {"thread_id": thread_id}})) == 1


async def test_a_tenant_schema_is_swept_on_its_own(db_dsn: str) -> None:
    upgrade(db_dsn, schema="tenant_a")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        tenant = SaverApi(PostgresSaver(conn, schema="tenant_a"))
        public = SaverApi(PostgresSaver(conn))
        for api in (tenant, public):
            await write_thread(api, db_dsn, "same-id", age=40 * DAY)
        report = await tenant.prune_older_than(MONTH)
    assert (report.threads, report.checkpoints) == (1, 4)
    assert table_rows(db_dsn, "tenant_a")["pgc_checkpoints"] == {}
    assert len(table_rows(db_dsn)["pgc_checkpoints"]) == 4


# -- DeltaChannel threads: a real graph --------------------------------------------------


class Chat:
    """The same conversation on a saver and on InMemorySaver, LangGraph's reference."""

    def __init__(self, api: SaverApi, thread_id: str) -> None:
        self.api = api
        self.graph = chat_graph(api.saver)
        self.reference = chat_graph(InMemorySaver())
        self.config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        self.turns = 0

    async def say(self, turns: int) -> None:
        for _ in range(turns):
            self.turns += 1
            message = {"messages": [f"human {self.turns}"], "turn": self.turns}
            self.reference.invoke(message, self.config)
            if self.api.is_async:
                await self.graph.ainvoke(message, self.config)
            else:
                self.graph.invoke(message, self.config)

    async def state(self, config: RunnableConfig | None = None) -> Any:
        config = config or self.config
        if self.api.is_async:
            return (await self.graph.aget_state(config)).values
        return self.graph.get_state(config).values

    async def assert_equal(self) -> None:
        expected = self.reference.get_state(self.config).values
        assert await self.state() == expected
        assert len(expected["messages"]) == 2 * self.turns


@pytest.mark.parametrize("saver", ["sync-pool", "async-conn"], indirect=True)
async def test_delta_channel_threads_read_back_equal_after_each_strategy(
    api: SaverApi, db_dsn: str
) -> None:
    old, young, trimmed = (Chat(api, f"{name}-{uuid.uuid4()}") for name in "oyt")
    for chat in (old, young, trimmed):
        await chat.say(8)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgc_checkpoints SET created_at = created_at - interval '40 days'"
            " WHERE thread_id = ANY(%s)",
            [[chat.config["configurable"]["thread_id"] for chat in (old, trimmed)]],
        )

    # keep_latest on the idle ones: the head needs its DeltaChannel history
    report = await api.prune_older_than(MONTH, strategy="keep_latest")
    assert report.threads == 2 and report.checkpoints > 0
    for chat in (old, young, trimmed):
        await chat.assert_equal()

    # keep_last everywhere: the second newest checkpoint still reads back too
    history = old.reference.get_state_history(old.config)
    second_newest = [h for h in history][1]
    assert (await api.prune_keep_last(2)).threads == 1  # young; the others are trimmed
    for chat in (old, young, trimmed):
        await chat.assert_equal()
    listed = await api.list(old.config, limit=2)
    assert await old.state(listed[1].config) == second_newest.values

    # the trimmed threads go on from where they were, deltas and all
    for chat in (old, young, trimmed):
        await chat.say(4)
        await chat.assert_equal()

    # delete: the idle one goes whole
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgc_checkpoints SET created_at = created_at - interval '40 days'"
            " WHERE thread_id = %s",
            [trimmed.config["configurable"]["thread_id"]],
        )
    assert (await api.prune_older_than(MONTH)).threads == 1
    rows = table_rows(db_dsn)
    gone = trimmed.config["configurable"]["thread_id"]
    assert all(key[0] != gone for table in TABLES for key in rows[table])
    for chat in (old, young):
        await chat.assert_equal()


# -- the store's expired items ------------------------------------------------------------


def expire_items(db_dsn: str, expired: int, live: int = 1) -> None:
    """`expired` items past their TTL in namespace ("old",), `live` with time left."""
    with PostgresStore.from_conn_string(db_dsn) as store:
        store.batch([PutOp(("old",), f"k{i:05}", {"i": i}, ttl=0.001) for i in range(expired)])
        store.batch([PutOp(("live",), f"k{i}", {"i": i}, ttl=60) for i in range(live)])
        store.put(("forever",), "k", {"v": 1})
    time.sleep(0.2)


def item_keys(db_dsn: str) -> dict[str, int]:
    """Items per namespace."""
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute("SELECT ns, count(*) FROM pgc_store GROUP BY ns").fetchall()
    return {ns: int(n) for ns, n in rows}


async def test_a_sweep_with_sweep_store_deletes_the_expired_items_too(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    expire_items(db_dsn, 3, live=2)
    assert (await api.prune_older_than(MONTH, dry_run=True)).store_items is None
    dry = await api.prune_older_than(MONTH, dry_run=True, sweep_store=True)
    assert (dry.threads, dry.store_items) == (2, 3)
    assert item_keys(db_dsn) == {"old": 3, "live": 2, "forever": 1}
    # an item a writer holds (a put renewing it) is skipped, not waited for
    with psycopg.connect(db_dsn) as writer:
        writer.execute("SELECT 1 FROM pgc_store WHERE key = 'k00001' FOR UPDATE")
        report = await api.prune_older_than(MONTH, sweep_store=True)
        assert (report.threads, report.store_items, report.complete) == (2, 2, True)
        assert item_keys(db_dsn) == {"old": 1, "live": 2, "forever": 1}
    report = await api.prune_keep_last(1, sweep_store=True)
    assert report.store_items == 1
    assert item_keys(db_dsn) == {"live": 2, "forever": 1}
    with pytest.raises(InvalidInputError, match="sweep_store"):
        await api.prune_keep_last(1, sweep_store="yes")


async def test_max_seconds_stops_the_store_sweep_between_pages(api: SaverApi, db_dsn: str) -> None:
    expire_items(db_dsn, SWEEP_BATCH + 5)
    # the first page always runs; then the time is up: the next run goes on
    first = await api.prune_older_than(MONTH, sweep_store=True, max_seconds=1e-9)
    assert (first.store_items, first.complete) == (SWEEP_BATCH, False)
    second = await api.prune_older_than(MONTH, sweep_store=True, max_seconds=1e-9)
    assert (second.store_items, second.complete) == (5, True)
    assert item_keys(db_dsn) == {"live": 1, "forever": 1}


# -- the pg_cron procedure ----------------------------------------------------------------


def install_procedure(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute((sql_dir() / "retention.sql").read_text(encoding="utf-8"))


def call_prune(db_dsn: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    named = [f"{name} => %s" for name in kwargs]
    placeholders = ", ".join(["%s"] * len(args) + named)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        row = conn.execute(
            f"CALL pgcheckpoint_prune({placeholders})", [*args, *kwargs.values()]
        ).fetchone()
    assert row is not None
    return dict(row[0])


@pytest.mark.parametrize("saver", ["sync-conn"], indirect=True)
async def test_the_procedure_deletes_as_the_sweep_does(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    install_procedure(db_dsn)
    before = table_rows(db_dsn)
    dry = await api.prune_older_than(MONTH, dry_run=True)

    report = call_prune(db_dsn, "30 days")

    assert {k: report[k] for k in ("threads", "checkpoints", "writes", "blobs")} == {
        "threads": dry.threads,
        "checkpoints": dry.checkpoints,
        "writes": dry.writes,
        "blobs": dry.blobs,
    }
    assert (report["skipped"], report["failed"], report["strategy"]) == (0, 0, "delete")
    idle_ids = {threads[name] for name in IDLE}
    assert table_rows(db_dsn) == {
        table: {k: d for k, d in rows.items() if k[0] not in idle_ids}
        for table, rows in before.items()
    }
    assert call_prune(db_dsn, "30 days")["examined"] == 0


@pytest.mark.parametrize("saver", ["sync-conn"], indirect=True)
async def test_the_procedure_keep_latest_matches_the_sweep_and_skips_delta_threads(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    install_procedure(db_dsn)
    chat = Chat(api, f"delta-{uuid.uuid4()}")
    await chat.say(5)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgc_checkpoints SET created_at = created_at - interval '40 days'"
            " WHERE thread_id = %s",
            [chat.config["configurable"]["thread_id"]],
        )
    idle_ids = {threads[name] for name in IDLE}
    before = table_rows(db_dsn)
    expected = expected_after(db_dsn, before, newest_per_namespace(db_dsn, 1, idle_ids))

    report = call_prune(db_dsn, "30 days", "keep_latest", max_threads=100)

    assert table_rows(db_dsn) == expected
    gone = went(before, expected)
    assert (report["threads"], report["checkpoints"], report["writes"], report["blobs"]) == (
        len(IDLE),
        gone["pgc_checkpoints"],
        gone["pgc_writes"],
        gone["pgc_blobs"],
    )
    assert report["delta_threads_not_pruned"] == 1
    await chat.assert_equal()


@pytest.mark.parametrize("saver", ["sync-conn"], indirect=True)
async def test_the_procedure_skips_threads_in_use_and_refuses_bad_calls(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    install_procedure(db_dsn)
    with psycopg.connect(db_dsn) as other:
        other.execute(
            "SELECT pg_advisory_xact_lock(%s::int8)", (maintenance_lock_key(threads["idle"]),)
        )
        report = call_prune(db_dsn, "30 days")
        assert (report["examined"], report["skipped"], report["threads"]) == (2, 1, 1)
        other.rollback()
    assert call_prune(db_dsn, "30 days")["threads"] == 1
    await write_thread(api, db_dsn, threads["idle"], age=40 * DAY)
    with psycopg.connect(db_dsn, autocommit=True) as runner:
        runner.execute(
            "SELECT pg_advisory_lock(%s::int8)", (thread_lock_key(threads["idle"], "public"),)
        )
        report = call_prune(db_dsn, "30 days")
        assert (report["threads"], report["skipped"]) == (0, 1)
    assert call_prune(db_dsn, "30 days", max_threads=1)["threads"] == 1

    for args, message in [
        (("30 days", "everything"), "unknown strategy 'everything'"),
        (("-1 day",), "older_than must be a positive interval"),
        (("1 day", "delete", 0), "max_threads must be at least 1"),
        (("1 day", "delete", 10, "nowhere"), "schema 'nowhere' has no pgcheckpoint tables"),
    ]:
        with pytest.raises(psycopg.errors.RaiseException, match=message):
            call_prune(db_dsn, *args)
    # one transaction per thread: it cannot run inside the caller's transaction
    with (
        psycopg.connect(db_dsn) as conn,
        pytest.raises(psycopg.errors.InvalidTransactionTermination),
    ):
        conn.execute("CALL pgcheckpoint_prune('1 day')")


@pytest.mark.parametrize("saver", ["sync-conn"], indirect=True)
async def test_the_procedure_sweeps_the_store_with_the_stores_statement(
    api: SaverApi, db_dsn: str, threads: dict[str, str]
) -> None:
    # the procedure of an earlier release, without sweep_store, is replaced, not
    # left beside the new one for a CALL to find ambiguous
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE PROCEDURE pgcheckpoint_prune(older_than interval, strategy text DEFAULT"
            " 'delete', max_threads int DEFAULT 1000, schema_name text DEFAULT 'public',"
            " INOUT report jsonb DEFAULT NULL) LANGUAGE plpgsql AS $$BEGIN report := '{}'; END$$"
        )
    install_procedure(db_dsn)
    expire_items(db_dsn, SWEEP_BATCH + 2)
    kept = call_prune(db_dsn, "30 days", sweep_store=False)
    assert (kept["threads"], kept["store_items"]) == (2, None)
    assert item_keys(db_dsn)["old"] == SWEEP_BATCH + 2
    with psycopg.connect(db_dsn) as writer:
        writer.execute("SELECT 1 FROM pgc_store WHERE key = 'k00000' FOR UPDATE")
        report = call_prune(db_dsn, "30 days")
        assert (report["threads"], report["store_items"]) == (0, SWEEP_BATCH + 1)
    assert item_keys(db_dsn) == {"old": 1, "live": 1, "forever": 1}
    assert call_prune(db_dsn, "30 days")["store_items"] == 1
    assert item_keys(db_dsn) == {"live": 1, "forever": 1}
    with pytest.raises(psycopg.errors.RaiseException, match="sweep_store must be true or false"):
        call_prune(db_dsn, "30 days", sweep_store=None)
    with psycopg.connect(db_dsn) as conn:
        (count,) = conn.execute(  # type: ignore[misc]
            "SELECT count(*) FROM pg_proc WHERE proname = 'pgcheckpoint_prune'"
        ).fetchone()
    assert count == 1

"""Retention: prune_older_than, prune_keep_last, the pg_cron procedure, the CLI.

Threads of several ages are written through the saver with checkpoint ids
made in the past (`uuid6` at a past clock, as LangGraph makes them) and their
`created_at` set to the same moments. Each option must remove exactly what it
says: the rows left are compared, table by table, with a model of the rule,
and the counts it reports with the rows that went. Threads that use a
`DeltaChannel` (a real compiled graph) must read back as `InMemorySaver` reads
the same conversation, and go on from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, TypedDict
from unittest import mock

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import id as checkpoint_id_module
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgcheckpoint import InvalidInputError, MissingParentError, PostgresSaver
from pgcheckpoint.locking import LOCK_CLASS_MAINTENANCE, thread_lock_key
from pgcheckpoint.maintenance.retention import PruneReport
from pgcheckpoint.migrate import upgrade
from pgcheckpoint.resources import sql_dir

from .conftest import SaverApi

TABLES = ("pgc_checkpoints", "pgc_blobs", "pgc_writes")
DAY = timedelta(days=1)
MONTH = timedelta(days=30)
# Rows of a table as (primary key, digest of the row): what "nothing else changed" compares.
Rows = dict[str, dict[tuple[Any, ...], str]]


# -- data ---------------------------------------------------------------------------


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
    api: SaverApi, db_dsn: str, thread_id: str, *, age: timedelta, steps: int = 4, ns: str = ""
) -> None:
    """A history of `steps` checkpoints a minute apart, the newest `age` old.

    Channel `doc` is written at the first step only (later checkpoints read it
    from there), `log` grows every step (long enough to be stored as deltas),
    and every checkpoint gets one task's writes.
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
        config = await api.put(config, checkpoint, generate_metadata(step=step), new)
        await api.put_writes(config, [("log", f"write {step}")], f"task-{step}", "")
        stamps.append((checkpoint["id"], when))
    update = sql.SQL(
        "UPDATE {}.pgc_checkpoints SET created_at = %s"
        " WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
    ).format(sql.Identifier(saver.schema))
    with psycopg.connect(db_dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(update, [(when, thread_id, ns, cid) for cid, when in stamps])


# thread -> namespace -> age of its newest checkpoint
AGES: dict[str, dict[str, timedelta]] = {
    "fresh": {"": timedelta(0)},
    "week": {"": 7 * DAY, "sub:1": 8 * DAY},
    "idle": {"": 40 * DAY, "sub:1": 45 * DAY},
    "mixed": {"": 40 * DAY, "sub:1": DAY},  # a subgraph ran yesterday: not idle
    "ancient": {"": 400 * DAY},
}
IDLE = {"idle", "ancient"}


@pytest.fixture
async def threads(api: SaverApi, db_dsn: str) -> dict[str, str]:
    """The threads of AGES under unique ids: name -> thread id."""
    ids = {name: f"{name}-{uuid.uuid4()}" for name in AGES}
    for name, namespaces in AGES.items():
        for ns, age in namespaces.items():
            await write_thread(api, db_dsn, ids[name], age=age, ns=ns)
    return ids


def table_rows(db_dsn: str, schema: str = "public") -> Rows:
    """Every row of the three tables: key -> digest of the row.

    A checkpoint's parent link is left out: pruning unlinks a kept checkpoint
    from a deleted parent (`assert_parents_exist` checks the links).
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
        other.execute(
            "SELECT pg_advisory_xact_lock(%s::int4, hashtext(%s))",
            (LOCK_CLASS_MAINTENANCE, pruning),
        )
        # a guarded run holds the other (lock_thread's session lock)
        with psycopg.connect(db_dsn, autocommit=True) as runner:
            runner.execute(
                "SELECT pg_advisory_lock(%s::int4, %s::int4)",
                (0x7067636C, thread_lock_key(guarded, "public")),
            )
            report = await api.prune_older_than(MONTH)
            assert sorted(report.skipped) == sorted([pruning, guarded])
            assert (report.threads, report.examined) == (0, 2)
            for thread_id, checkpoints in ((pruning, 8), (guarded, 4)):
                listed = await api.list({"configurable": {"thread_id": thread_id}})
                assert len(listed) == checkpoints
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
    with pytest.raises(MissingParentError, match=r"its parent .* does not exist") as caught:
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


def append(state: list[Any], writes: list[list[Any]]) -> list[Any]:
    out = list(state)
    for w in writes:
        out.extend(w)
    return out


class ChatState(TypedDict):
    messages: Annotated[list, DeltaChannel(append, snapshot_frequency=3)]
    turn: int


def chat_graph(checkpointer: Any) -> Any:
    def agent(state: ChatState) -> dict[str, Any]:
        return {"messages": [f"ai {state['turn']}: " + "y" * 30], "turn": state["turn"]}

    builder = StateGraph(ChatState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=checkpointer)


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
            "SELECT pg_advisory_xact_lock(%s::int4, hashtext(%s))",
            (LOCK_CLASS_MAINTENANCE, threads["idle"]),
        )
        report = call_prune(db_dsn, "30 days")
        assert (report["examined"], report["skipped"], report["threads"]) == (2, 1, 1)
        other.rollback()
    assert call_prune(db_dsn, "30 days")["threads"] == 1
    await write_thread(api, db_dsn, threads["idle"], age=40 * DAY)
    with psycopg.connect(db_dsn, autocommit=True) as runner:
        runner.execute(
            "SELECT pg_advisory_lock(%s::int4, %s::int4)",
            (0x7067636C, thread_lock_key(threads["idle"], "public")),
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


# -- the command line ----------------------------------------------------------------------


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PGCHECKPOINT_DSN", "DATABASE_URL")}
    src = Path(__file__).resolve().parents[2] / "src"
    if src.is_dir():  # a checkout: run the live source, as the tests do
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgcheckpoint", *args],
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_cli_on_terminal(*args: str, **env: str) -> tuple[int, str]:
    """Run the command with stdout and stderr on a pseudo-terminal; its exit code and output."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "pgcheckpoint", *args],
            env=cli_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=terminal,
            stderr=terminal,
        )
    finally:
        os.close(terminal)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(controller)
    return process.wait(timeout=120), b"".join(chunks).decode()


CLI = pytest.mark.parametrize("saver", ["sync-conn"], indirect=True)


@CLI
async def test_the_cron_command_without_a_terminal(db_dsn: str, threads: dict[str, str]) -> None:
    before = table_rows(db_dsn)
    dry = run_cli("prune", "--older-than", "30d", "--dry-run", "--dsn", db_dsn)
    assert dry.returncode == 0, dry.stderr
    assert table_rows(db_dsn) == before
    assert dry.stdout.startswith("would delete 2 threads: 12 checkpoints, 12 writes, ")
    # a log gets plain lines, no terminal control characters
    assert "\r" not in dry.stderr and "\x1b" not in dry.stderr
    assert dry.stderr.splitlines()[-1] == (
        "dry run: deleting threads idle for 30d: 2/2 (100%) done"
    )

    done = run_cli("prune", "--older-than", "30d", "--json", PGCHECKPOINT_DSN=db_dsn)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["threads"], report["checkpoints"], report["dry_run"]) == (2, 12, False)
    left = {key[0] for key in table_rows(db_dsn)["pgc_checkpoints"]}
    assert left == {threads[name] for name in AGES if name not in IDLE}

    # DATABASE_URL as frameworks write it; --keep-last; a batch per thread
    url = "postgresql+psycopg://{user}@{host}:{port}/{dbname}".format(
        **{"port": 5432, **conninfo_to_dict(db_dsn)}
    )
    env = {"DATABASE_URL": url}
    trim = run_cli("prune", "--keep-last", "3", "--batch-size", "1", **env)
    assert trim.returncode == 0, trim.stderr
    assert trim.stdout.startswith("trimmed 3 threads: 5 checkpoints, 5 writes, ")


@CLI
async def test_the_cron_command_on_a_terminal_draws_a_progress_bar(
    db_dsn: str, threads: dict[str, str]
) -> None:
    code, output = run_cli_on_terminal(
        "prune", "--older-than", "5d", "--batch-size", "1", PGCHECKPOINT_DSN=db_dsn
    )
    assert code == 0, output
    bar = "deleting threads idle for 5d ["
    assert bar in output and "#" in output.split(bar)[-1]
    assert "\r" in output and "\x1b[2K" in output  # redrawn in place, then cleared
    lines = output.replace("\r\n", "\n").split("\n")
    assert "deleting threads idle for 5d: 3/3 (100%) done" in output
    assert any(line.startswith("deleted 3 threads: ") for line in lines)


async def test_the_cron_command_fails_clearly(db_dsn: str, empty_db_dsn: str) -> None:
    for args, env, code, message in [
        (["prune", "--older-than", "30d"], {}, 2, "no database given: pass --dsn"),
        (["prune", "--older-than", "30x", "--dsn", db_dsn], {}, 2, "'30x' is not a duration"),
        (["prune", "--older-than", "0d", "--dsn", db_dsn], {}, 2, "is no time at all"),
        (["prune", "--dsn", db_dsn], {}, 2, "one of the arguments --older-than --keep-last"),
        (
            ["prune", "--older-than", "1d", "--keep-last", "2", "--dsn", db_dsn],
            {},
            2,
            "not allowed with argument",
        ),
        (
            ["prune", "--keep-last", "2", "--strategy", "delete", "--dsn", db_dsn],
            {},
            2,
            "--strategy goes with --older-than",
        ),
        (
            ["prune", "--older-than", "1d"],
            {"PGCHECKPOINT_DSN": db_dsn + "_missing"},
            1,
            "cannot use the database",
        ),
        (
            ["prune", "--older-than", "1d", "--dsn", empty_db_dsn],
            {},
            1,
            "has no pgcheckpoint tables: run `pgcheckpoint migrate`",
        ),
        (["stats", "--dsn", empty_db_dsn], {}, 1, "has no pgcheckpoint tables"),
    ]:
        result = run_cli(*args, **env)
        assert result.returncode == code, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


@CLI
async def test_stats_shows_rows_bytes_activity_and_the_largest_threads(
    db_dsn: str, threads: dict[str, str]
) -> None:
    result = run_cli("stats", "--json", "--top", "2", "--dsn", db_dsn)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    rows = table_rows(db_dsn)
    assert (stats["threads"], stats["checkpoints"], stats["blobs"], stats["writes"]) == (
        len(AGES),
        len(rows["pgc_checkpoints"]),
        len(rows["pgc_blobs"]),
        len(rows["pgc_writes"]),
    )
    assert set(stats["tables"]) == set(TABLES)
    assert all(t["total_bytes"] >= t["table_bytes"] > 0 for t in stats["tables"].values())
    oldest = datetime.fromisoformat(stats["oldest"])
    newest = datetime.fromisoformat(stats["newest"])
    assert newest - oldest > 399 * DAY
    # the two-namespace threads hold the most
    assert [t["checkpoints"] for t in stats["largest"]] == [8, 8]
    assert {t["thread_id"] for t in stats["largest"]} <= {
        threads[name] for name in ("week", "idle", "mixed")
    }

    text = run_cli("stats", "--dsn", db_dsn)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0] == f"threads      {len(AGES)}"
    assert "pgc_checkpoints" in text.stdout and "largest threads" in text.stdout

"""Deletes against a graph that is running on the thread: nothing of the thread survives.

Each round runs a real graph for several super-steps on a thread that has a
history, and deletes the thread at a random moment of the run. A trigger
makes every saved checkpoint sleep in its insert, which widens the window in
which a put is in flight (it holds its parent and what it stores) while the
delete runs. Triggers also log, for each row of the three tables, when it was
inserted, and for each deleting statement when it ran. When `delete_thread`
returns, no row of the thread inserted before its deleting statement is left
in any table; the run stops with `MissingParentError` (or
`MissingCheckpointError`) at its next save; and its later writes are removed
or refused, so once it stopped nothing of the thread is left at all.

Both drivers, with the append deltas on and off (a delta's base is deleted
under a put that stores a delta on it: a raw ForeignKeyViolation before).
"""

from __future__ import annotations

import asyncio
import operator
import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from support.activity import waiting_on_a_lock

from pgcheckpoint import (
    AsyncPostgresSaver,
    MissingCheckpointError,
    MissingParentError,
    PostgresSaver,
)

ROUNDS = 50
STEPS = 8
TABLE_KEYS = {
    "pgc_checkpoints": "checkpoint_ns || '/' || checkpoint_id",
    "pgc_blobs": "checkpoint_ns || '/' || channel || '/' || version",
    "pgc_writes": "checkpoint_ns || '/' || checkpoint_id || '/' || task_id || '/' || idx",
}
# The run stops at its first save after the delete with one of these.
STOPPED = (MissingParentError, MissingCheckpointError)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _triggers() -> str:
    log_rows = "\n".join(
        f"CREATE TRIGGER race_log AFTER INSERT OR UPDATE ON {table} FOR EACH ROW "
        f"EXECUTE FUNCTION race_log_{table}();"
        for table in TABLE_KEYS
    )
    functions = "\n".join(
        f"""
        CREATE FUNCTION race_log_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO race_inserts VALUES (
                NEW.thread_id, '{table}',
                (SELECT {key} FROM (SELECT NEW.*) AS r), clock_timestamp());
            RETURN NEW;
        END $$;"""
        for table, key in TABLE_KEYS.items()
    )
    return f"""
        CREATE TABLE race_inserts (thread_id text, tbl text, key text, at timestamptz);
        CREATE TABLE race_deletes (thread_id text, at timestamptz);
        {functions}
        {log_rows}
        CREATE FUNCTION race_slow_put() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_sleep(random() * 0.004); RETURN NEW; END $$;
        CREATE TRIGGER race_slow_put BEFORE INSERT ON pgc_checkpoints
            FOR EACH ROW EXECUTE FUNCTION race_slow_put();
        CREATE FUNCTION race_log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO race_deletes SELECT DISTINCT thread_id, clock_timestamp() FROM gone;
            RETURN NULL;
        END $$;
        CREATE TRIGGER race_log_delete AFTER DELETE ON pgc_checkpoints
            REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
            EXECUTE FUNCTION race_log_delete();
    """


@pytest.fixture
def race_dsn(db_dsn: str) -> Iterator[str]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(_triggers())
    yield db_dsn


def survivors(dsn: str, thread_id: str) -> list[tuple[str, str]]:
    """Rows of the thread inserted before the last statement that deleted from it."""
    with psycopg.connect(dsn) as conn:
        (deleted_at,) = conn.execute(
            "SELECT max(at) FROM race_deletes WHERE thread_id = %s", [thread_id]
        ).fetchone()  # type: ignore[misc]
        assert deleted_at is not None, "the delete deleted nothing"
        found = []
        for table, key in TABLE_KEYS.items():
            rows = conn.execute(
                f"SELECT {key}, (SELECT max(l.at) FROM race_inserts l WHERE l.thread_id ="
                f" t.thread_id AND l.tbl = %s AND l.key = {key}) FROM {table} t"
                " WHERE t.thread_id = %s",
                [table, thread_id],
            ).fetchall()
            found += [(table, k) for k, at in rows if at is None or at <= deleted_at]
    return found


def leftovers(dsn: str, thread_id: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        counts = {
            t: conn.execute(
                f"SELECT count(*) FROM {t} WHERE thread_id = %s", [thread_id]
            ).fetchone()[0]  # type: ignore[index]
            for t in TABLE_KEYS
        }
    return {t: n for t, n in counts.items() if n}


class State(TypedDict, total=False):
    messages: Annotated[list[str], operator.add]
    step: int


def build(saver: Any, started: dict[str, Any]) -> Any:
    """A graph that appends a message per super-step, STEPS times, then stops."""

    def step(state: State, config: RunnableConfig) -> State:
        signal = started.get(config["configurable"]["thread_id"])
        if signal is not None:
            signal.set()
        return {
            "messages": [f"message {state.get('step', 0)}: " + "x" * 40],
            "step": state.get("step", 0) + 1,
        }

    def route(state: State) -> str:
        return "step" if state.get("step", 0) % STEPS else END

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route, ["step", END])
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("append_deltas", [True, False], ids=["deltas", "whole-values"])
def test_delete_thread_racing_a_sync_run_leaves_nothing(race_dsn: str, append_deltas: bool) -> None:
    rng = random.Random(1)
    started: dict[str, threading.Event] = {}
    with PostgresSaver.from_conn_string(race_dsn, pool={"max_size": 4}) as saver:
        saver.append_deltas = append_deltas
        graph = build(saver, started)
        outcomes: list[str] = []
        for round_ in range(ROUNDS):
            thread_id = f"race-{round_}-{uuid.uuid4()}"
            config = {"configurable": {"thread_id": thread_id}}
            graph.invoke({"messages": ["hello"], "step": 0}, config)  # a history to resume on
            started[thread_id] = threading.Event()
            errors: list[BaseException | None] = []

            def run() -> None:
                try:
                    graph.invoke({"messages": ["again"]}, config)  # noqa: B023
                    errors.append(None)  # noqa: B023
                except BaseException as exc:
                    errors.append(exc)  # noqa: B023

            runner = threading.Thread(target=run)
            runner.start()
            assert started[thread_id].wait(30)
            time.sleep(rng.uniform(0, 0.03))
            saver.delete_thread(thread_id)
            assert survivors(race_dsn, thread_id) == [], f"round {round_}"
            runner.join(60)
            (error,) = errors
            assert error is None or isinstance(error, STOPPED), repr(error)
            outcomes.append("stopped" if error else "finished")
            assert leftovers(race_dsn, thread_id) == {}, f"round {round_}"
            assert graph.get_state(config).values == {}
    assert "stopped" in outcomes  # the rounds did race the run


@pytest.mark.parametrize("append_deltas", [True, False], ids=["deltas", "whole-values"])
async def test_delete_thread_racing_an_async_run_leaves_nothing(
    race_dsn: str, append_deltas: bool
) -> None:
    rng = random.Random(2)
    started: dict[str, asyncio.Event] = {}
    async with AsyncPostgresSaver.from_conn_string(race_dsn, pool={"max_size": 4}) as saver:
        saver.append_deltas = append_deltas
        graph = build(saver, started)
        outcomes: list[str] = []
        for round_ in range(ROUNDS):
            thread_id = f"race-{round_}-{uuid.uuid4()}"
            config: Any = {"configurable": {"thread_id": thread_id}}
            await graph.ainvoke({"messages": ["hello"], "step": 0}, config)
            started[thread_id] = asyncio.Event()
            run = asyncio.create_task(graph.ainvoke({"messages": ["again"]}, config))
            await asyncio.wait_for(started[thread_id].wait(), 30)
            await asyncio.sleep(rng.uniform(0, 0.03))
            await saver.adelete_thread(thread_id)
            assert await asyncio.to_thread(survivors, race_dsn, thread_id) == [], f"round {round_}"
            try:
                await asyncio.wait_for(run, 60)
                outcomes.append("finished")
            except STOPPED:
                outcomes.append("stopped")
            assert await asyncio.to_thread(leftovers, race_dsn, thread_id) == {}, f"round {round_}"
            assert (await graph.aget_state(config)).values == {}
    assert "stopped" in outcomes


# -- the protocol, one interleaving at a time -------------------------------------------
#
# A test connection plays the delete: it takes the thread's maintenance lock as a
# delete does, so the save starts while the delete holds it and waits; the test
# deletes what it deletes and commits once the save is seen waiting.


def _history(saver: PostgresSaver, thread_id: str) -> Any:
    config = {"configurable": {"thread_id": thread_id}}
    build(saver, {}).invoke({"messages": ["hello"], "step": 0}, config)
    latest = saver.get_tuple(config)
    assert latest is not None
    return latest.config


def _while_a_delete_holds_the_thread(
    dsn: str, thread_id: str, save: Any, delete_sql: str
) -> BaseException | None:
    """Run `save` while a delete holds the thread; let the delete run `delete_sql`, commit."""
    from pgcheckpoint.core.locks import maintenance_lock_key

    errors: list[BaseException | None] = []

    def run() -> None:
        try:
            save()
            errors.append(None)
        except BaseException as exc:
            errors.append(exc)

    with psycopg.connect(dsn) as deleting:
        deleting.execute("SELECT pg_advisory_xact_lock(%s)", [maintenance_lock_key(thread_id)])
        saving = threading.Thread(target=run)
        saving.start()
        deadline = time.monotonic() + 30
        while not waiting_on_a_lock(dsn, "saver-under-test"):
            assert time.monotonic() < deadline, "the save never waited for the delete"
            time.sleep(0.02)
        deleting.execute(delete_sql, [thread_id])
        deleting.commit()
    saving.join(30)
    (error,) = errors
    return error


@pytest.mark.parametrize("what", ["put", "put_writes"])
def test_a_save_that_waited_for_a_delete_of_its_thread_is_refused(race_dsn: str, what: str) -> None:
    from psycopg.conninfo import make_conninfo

    dsn = make_conninfo(race_dsn, application_name="saver-under-test")
    with PostgresSaver.from_conn_string(dsn) as saver:
        head = _history(saver, "doomed")
        if what == "put":
            tup = saver.get_tuple(head)
            assert tup is not None

            def save() -> Any:
                return saver.put(head, tup.checkpoint | {"id": str(uuid.uuid4())}, {}, {})
        else:

            def save() -> Any:
                return saver.put_writes(head, [("messages", ["late"])], "task")

        error = _while_a_delete_holds_the_thread(race_dsn, "doomed", save, DELETE_THREAD_SQL)
    assert isinstance(error, STOPPED), repr(error)
    assert leftovers(race_dsn, "doomed") == {}


DELETE_THREAD_SQL = (
    "WITH t AS (SELECT %s::text AS id),"
    " w AS (DELETE FROM pgc_writes USING t WHERE thread_id = t.id),"
    " b AS (DELETE FROM pgc_blobs USING t WHERE thread_id = t.id)"
    " DELETE FROM pgc_checkpoints USING t WHERE thread_id = t.id"
)


# a prune of the thread: its newest checkpoint stays
PRUNE_SQL = (
    "WITH t AS (SELECT %s::text AS id) DELETE FROM pgc_checkpoints c USING t"
    " WHERE c.thread_id = t.id AND c.checkpoint_id <> ("
    "SELECT max(checkpoint_id) FROM pgc_checkpoints WHERE thread_id = t.id)"
)


def test_writes_that_waited_for_a_prune_are_saved(race_dsn: str) -> None:
    from psycopg.conninfo import make_conninfo

    dsn = make_conninfo(race_dsn, application_name="saver-under-test")
    with PostgresSaver.from_conn_string(dsn) as saver:
        head = _history(saver, "trimmed")
        error = _while_a_delete_holds_the_thread(
            race_dsn,
            "trimmed",
            lambda: saver.put_writes(head, [("messages", ["kept"])], "task"),
            PRUNE_SQL,
        )
        assert error is None
        tup = saver.get_tuple(head)
        assert tup is not None and ("task", "messages", ["kept"]) in tup.pending_writes


@pytest.mark.parametrize("delete", ["prune", "delete_thread"])
def test_a_subgraphs_first_writes_that_waited_for_a_delete(race_dsn: str, delete: str) -> None:
    """LangGraph may save a subgraph's first writes before any checkpoint of its
    namespace: after a prune they are saved, after a delete of the thread refused."""
    from psycopg.conninfo import make_conninfo

    dsn = make_conninfo(race_dsn, application_name="saver-under-test")
    with PostgresSaver.from_conn_string(dsn) as saver:
        _history(saver, "nested")
        checkpoint = empty_checkpoint()
        sub: Any = {"configurable": {"thread_id": "nested", "checkpoint_ns": "sub:1"}}
        at = {"configurable": {**sub["configurable"], "checkpoint_id": checkpoint["id"]}}
        error = _while_a_delete_holds_the_thread(
            race_dsn,
            "nested",
            lambda: saver.put_writes(at, [("messages", ["early"])], "task"),
            PRUNE_SQL if delete == "prune" else DELETE_THREAD_SQL,
        )
        if delete == "delete_thread":
            assert isinstance(error, MissingCheckpointError), repr(error)
            assert leftovers(race_dsn, "nested") == {}
            return
        assert error is None
        saver.put(sub, checkpoint, {"source": "input", "step": -1}, {})
        tup = saver.get_tuple(at)
        assert tup is not None and ("task", "messages", ["early"]) in tup.pending_writes

"""A put whose parent is missing: stored when it was never saved here, refused when deleted.

The official saver stores any put as named, so a thread copied newest-first
from another saver, or a config built by hand, saves. pgcheckpoint does the
same, but refuses a parent that a delete removed (`delete_thread`, `prune`,
`delete_for_runs`, retention, the pg_cron procedure, a hand-written DELETE):
a run that went on from it would leave a history that stops short. What
tells the two apart is `pgc_deletions`, which the deleting transaction writes,
so a worker that started after the delete refuses as well (a new process
here), and a put that waited for the delete refuses what the delete took.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
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
from support.chat import chat_graph
from support.retention import DAY, write_thread
from support.savers import SaverApi

from pgcheckpoint import MissingParentError
from pgcheckpoint.core.locks import maintenance_lock_key
from pgcheckpoint.resources import sql_dir


async def test_a_parent_never_saved_is_stored_as_named(api: SaverApi) -> None:
    thread_id = f"hand-{uuid.uuid4()}"
    by_hand = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": "1"}}
    checkpoint = generate_checkpoint()
    saved = await api.put(by_hand, checkpoint, generate_metadata(source="input"), {})
    got = await api.get_tuple(saved)
    assert got is not None and got.checkpoint["id"] == checkpoint["id"]
    assert got.parent_config is not None
    assert got.parent_config["configurable"]["checkpoint_id"] == "1"
    listed = await api.list({"configurable": {"thread_id": thread_id}})
    assert [t.checkpoint["id"] for t in listed] == [checkpoint["id"]]
    # and a child of it saves as usual
    await api.put(saved, generate_checkpoint(), generate_metadata(), {})
    assert len(await api.list({"configurable": {"thread_id": thread_id}})) == 2


async def copy_newest_first(source: InMemorySaver, api: SaverApi, thread_id: str) -> int:
    """Copy a thread checkpoint by checkpoint as `list` hands them out: newest first."""
    copied = 0
    for item in source.list({"configurable": {"thread_id": thread_id}}):
        conf = item.config["configurable"]
        parent = item.parent_config or {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": conf["checkpoint_ns"]}
        }
        saved = await api.put(
            parent, item.checkpoint, item.metadata, item.checkpoint["channel_versions"]
        )
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in item.pending_writes or ():
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            await api.put_writes(saved, writes, task_id)
        copied += 1
    return copied


async def test_a_thread_copied_newest_first_reads_back_and_goes_on(api: SaverApi) -> None:
    thread_id = f"copied-{uuid.uuid4()}"
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    memory = InMemorySaver()
    source = chat_graph(memory)
    for turn in range(5):
        source.invoke({"messages": [f"human {turn}"], "turn": turn}, config)

    assert await copy_newest_first(memory, api, thread_id) == len(list(memory.list(config)))

    target = chat_graph(api.saver)
    if api.is_async:
        state = await target.aget_state(config)
    else:
        state = await asyncio.to_thread(target.get_state, config)
    assert state.values == source.get_state(config).values
    # the graph goes on from the copy as it does from the original
    turn = {"messages": ["human 5"], "turn": 5}
    if api.is_async:
        went_on = await target.ainvoke(turn, config)
    else:
        went_on = await asyncio.to_thread(target.invoke, turn, config)
    assert went_on == source.invoke(turn, config)


# -- parents a delete removed ---------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import json, sys
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
    from pgcheckpoint import MissingParentError, PostgresSaver

    dsn, config = sys.argv[1], json.loads(sys.argv[2])
    with PostgresSaver.from_conn_string(dsn) as saver:
        try:
            saver.put(config, generate_checkpoint(), {}, {})
        except MissingParentError as e:
            print("refused", e.parent_checkpoint_id)
        else:
            print("stored")
    """
)


def new_worker_puts(db_dsn: str, parent: RunnableConfig) -> str:
    """What a worker process started now answers to a put naming `parent`."""
    done = subprocess.run(
        [sys.executable, "-c", WORKER, db_dsn, json.dumps(parent)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def delete_by(how: str, api: SaverApi, db_dsn: str, thread_id: str, run_id: str) -> None:
    if how == "delete_thread":
        await api.delete_thread(thread_id)
    elif how == "prune":
        await api.prune([thread_id], strategy="keep_latest")
    elif how == "delete_for_runs":
        await api.delete_for_runs([run_id])
    elif how == "retention":
        assert (await api.prune_older_than(timedelta(days=30))).threads == 1
    elif how == "procedure":
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute((sql_dir() / "retention.sql").read_text(encoding="utf-8"))
            conn.execute("CALL pgcheckpoint_prune('30 days')")
    else:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute(
                "DELETE FROM pgc_checkpoints WHERE thread_id = %s AND run_id = %s",
                (thread_id, run_id),
            )


@pytest.mark.parametrize(
    "how", ["delete_thread", "prune", "delete_for_runs", "retention", "procedure", "by_hand"]
)
async def test_a_parent_a_delete_removed_is_refused_by_every_worker(
    api: SaverApi, db_dsn: str, how: str
) -> None:
    thread_id, run_id = f"gone-{how}-{uuid.uuid4()}", str(uuid.uuid4())
    # an old thread, idle for the sweeps, which take it whole
    await write_thread(api, db_dsn, thread_id, age=40 * DAY)
    latest = await api.get_tuple(generate_config(thread_id))
    assert latest is not None
    doomed = latest.config
    if how in ("prune", "delete_for_runs", "by_hand"):
        # a run's checkpoint on top: keep_latest keeps it and takes what is below,
        # the others take the run's
        top = await api.put(
            latest.config, generate_checkpoint(), generate_metadata(run_id=run_id), {}
        )
        doomed = latest.config if how == "prune" else top
    await delete_by(how, api, db_dsn, thread_id, run_id)
    assert await api.get_tuple(doomed) is None

    with pytest.raises(MissingParentError, match="was deleted") as caught:
        await api.put(doomed, generate_checkpoint(), generate_metadata(), {})
    assert caught.value.parent_checkpoint_id == doomed["configurable"]["checkpoint_id"]
    gone = doomed["configurable"]["checkpoint_id"]
    assert new_worker_puts(db_dsn, doomed) == f"refused {gone}"
    # a parent never saved, newer than anything deleted, still saves
    fresh = {**doomed["configurable"], "checkpoint_id": generate_checkpoint()["id"]}
    assert new_worker_puts(db_dsn, {"configurable": fresh}) == "stored"


async def test_a_never_saved_id_at_or_below_the_highest_deleted_counts_as_deleted(
    api: SaverApi, db_dsn: str
) -> None:
    thread_id = f"low-{uuid.uuid4()}"
    saved = await api.put(generate_config(thread_id), generate_checkpoint(), {}, {})
    await api.delete_thread(thread_id)
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT checkpoint_id FROM pgc_deletions WHERE thread_id = %s", (thread_id,)
        ).fetchone()
    assert row == (saved["configurable"]["checkpoint_id"],)
    low = {"configurable": {**saved["configurable"], "checkpoint_id": "0"}}
    with pytest.raises(MissingParentError):
        await api.put(low, generate_checkpoint(), {}, {})
    # another thread is not concerned by this one's deletes
    other = {"configurable": {**low["configurable"], "thread_id": f"other-{uuid.uuid4()}"}}
    await api.put(other, generate_checkpoint(), {}, {})


@pytest.mark.parametrize("saver", ["sync-pool", "async-pool"], indirect=True)
async def test_a_put_that_waited_for_the_delete_refuses_what_it_took(
    api: SaverApi, db_dsn: str
) -> None:
    """The put starts (its snapshot taken) before the delete commits: no row of the
    delete is visible to it, yet the parent it saw is gone, so it stores nothing."""
    api = SaverApi(api.saver, threaded=True)  # a sync put waits in a thread of its own
    thread_id = f"waited-{uuid.uuid4()}"
    saved = await api.put(generate_config(thread_id), generate_checkpoint(), {}, {})
    with psycopg.connect(db_dsn) as deleter, psycopg.connect(db_dsn, autocommit=True) as watch:
        deleter.execute(
            "SELECT pg_advisory_xact_lock(%s::int8)", (maintenance_lock_key(thread_id, "public"),)
        )
        deleter.execute("DELETE FROM pgc_checkpoints WHERE thread_id = %s", (thread_id,))
        putting = asyncio.ensure_future(
            api.put(saved, generate_checkpoint(), generate_metadata(), {})
        )
        for _ in range(600):
            waiting = watch.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchone()
            if waiting and waiting[0]:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the put never waited for the delete's lock")
        deleter.commit()
        with pytest.raises(MissingParentError):
            await putting
    assert await api.list({"configurable": {"thread_id": thread_id}}) == []

"""The `ttl` block of `langgraph.json` sweeps, with both strategies, through a running server.

The server's in-memory runtime never sweeps; the factory does, in the
background (`pgcheckpoint.agent_server.ttl`). Each strategy gets a server
whose block sets a 1-minute TTL and whose sweeper runs every second
(`PGCHECKPOINT_TTL_SWEEP_SECONDS`). A test ages one thread by moving its
checkpoints' `created_at` back, then waits for the sweep: the aged thread
goes (`delete`) or keeps only its latest checkpoint (`keep_latest`), and a
thread that was not aged stays whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from support.agent_server import AgentServer, server_env, server_folder

from .conftest import checkpoint_count, table_rows


@pytest.fixture(scope="module", params=["delete", "keep_latest"])
def strategy(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def server(
    strategy: str, module_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AgentServer]:
    block = {
        "path": "pgcheckpoint.agent_server.checkpointer",
        "ttl": {"strategy": strategy, "default_ttl": 1, "sweep_interval_minutes": 1},
    }
    folder = server_folder(tmp_path_factory.mktemp(f"ttl-{strategy}"), checkpointer=block)
    server = AgentServer(folder, server_env(module_dsn, PGCHECKPOINT_TTL_SWEEP_SECONDS="1"))
    server.start()
    yield server
    server.stop()


def age(dsn: str, thread_id: str) -> None:
    """Make a thread look idle for two hours."""
    table_rows(
        dsn,
        "UPDATE pgc_checkpoints SET created_at = created_at - interval '2 hours'"
        " WHERE thread_id = %s RETURNING 1",
        (thread_id,),
    )


async def until(check: Any, what: str) -> None:
    for _ in range(300):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the sweep did not {what}")


async def test_a_thread_idle_past_the_ttl_is_swept_and_a_fresh_one_stays(
    client: Any, strategy: str, module_dsn: str, server: AgentServer
) -> None:
    finished = (await client.threads.create())["thread_id"]
    await client.runs.wait(finished, "refunds", input={"amount": 20})
    waiting = (await client.threads.create())["thread_id"]
    await client.runs.wait(waiting, "refunds", input={"amount": 500})
    fresh = (await client.threads.create())["thread_id"]
    await client.runs.wait(fresh, "refunds", input={"amount": 30})
    counts = {t: checkpoint_count(module_dsn, t) for t in (finished, waiting, fresh)}
    age(module_dsn, finished)
    age(module_dsn, waiting)

    if strategy == "delete":
        await until(
            lambda: (
                checkpoint_count(module_dsn, finished) == 0
                and checkpoint_count(module_dsn, waiting) == 0
            ),
            "delete the idle threads",
        )
        for table in ("pgc_blobs", "pgc_writes"):
            assert not table_rows(
                module_dsn,
                f"SELECT 1 FROM {table} WHERE thread_id = ANY(%s)",
                ([finished, waiting],),
            )
        state = await client.threads.get_state(finished)
        assert state["values"] == {} and state["checkpoint"] is None
    else:
        await until(
            lambda: (
                checkpoint_count(module_dsn, finished, "") == 1
                and checkpoint_count(module_dsn, waiting, "") == 1
            ),
            "trim the idle threads",
        )
        # the latest state stays, the history before it goes
        state = await client.threads.get_state(finished)
        assert state["values"] == {
            "amount": 20,
            "risk": "low",
            "decision": "approved",
            "paid": True,
        }
        assert len(await client.threads.get_history(finished)) == 1
        # the interrupted thread still waits for its answer, and takes it
        waiting_state = await client.threads.get_state(waiting)
        assert waiting_state["next"] == ["review"]
        done = await client.runs.wait(waiting, "refunds", command={"resume": "approved"})
        assert done["paid"] is True
    assert checkpoint_count(module_dsn, fresh) == counts[fresh]
    said = "ttl sweep: deleted" if strategy == "delete" else "ttl sweep: trimmed"
    await until(lambda: said in server.output(), "log what it did")

"""A server stopped (SIGTERM) or killed (SIGKILL) and started again keeps every thread.

The threads' checkpoints are pgcheckpoint's, in PostgreSQL; the server's own
records of them (a thread's status, its runs) are the in-memory runtime's,
written to `.langgraph_api/` every 10 s, so before the kill the test waits
for that write, as a server that ran for a while has done. After each start
every thread reads as before: its state, its interrupt, its whole history;
an interrupted one resumes.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.agent_server import AgentServer, interrupt_values, server_env, server_folder

from .conftest import client_of


@pytest.fixture(scope="module")
def server(module_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    server = AgentServer(server_folder(tmp_path_factory.mktemp("restart")), server_env(module_dsn))
    server.start()
    yield server
    server.stop()


async def snapshot(server: AgentServer, thread_ids: list[str]) -> dict[str, Any]:
    """What the server says of each thread: status, values, interrupts, whole history."""
    seen = {}
    async with client_of(server.url) as client:
        for thread_id in thread_ids:
            state = await client.threads.get_state(thread_id, subgraphs=True)
            history = await client.threads.get_history(thread_id, limit=100)
            seen[thread_id] = {
                "status": (await client.threads.get(thread_id))["status"],
                "values": state["values"],
                "next": state["next"],
                "interrupts": interrupt_values(state),
                "history": [(h["checkpoint"], h["values"], h["next"]) for h in history],
            }
    return seen


async def new_threads(server: AgentServer) -> list[str]:
    """A thread waiting at its interrupt and one that finished."""
    async with client_of(server.url) as client:
        waiting = (await client.threads.create())["thread_id"]
        await client.runs.wait(waiting, "refunds", input={"amount": 700})
        finished = (await client.threads.create())["thread_id"]
        await client.runs.wait(finished, "refunds", input={"amount": 70})
    return [waiting, finished]


async def test_threads_outlive_a_stop_and_a_kill_of_the_server(server: AgentServer) -> None:
    threads = await new_threads(server)
    before = await snapshot(server, threads)
    assert before[threads[0]]["interrupts"] == ["refund 700 EUR?"]
    assert len(before[threads[1]]["history"]) == 4

    server.stop(signal.SIGTERM)  # uvicorn shuts down, then ends by the signal it caught
    assert server.output().count("pgcheckpoint checkpointer closed its pool") == 1
    server.start()
    assert await snapshot(server, threads) == before

    threads += await new_threads(server)
    written = time.time()
    before = await snapshot(server, threads)
    server.wait_for_flush(since=written)
    server.stop(signal.SIGKILL)
    server.start()
    assert await snapshot(server, threads) == before

    async with client_of(server.url) as client:
        for waiting in (threads[0], threads[2]):
            done = await client.runs.wait(waiting, "refunds", command={"resume": "approved"})
            assert done["paid"] is True

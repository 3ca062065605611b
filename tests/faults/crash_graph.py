"""The graph the crash tests kill, and the child process that runs it.

START fans out to three nodes, `a`, `b` and `c`, which run in parallel in one
super-step and each append their name to `results`. Every call of a node is
recorded in `crash_calls` in the test database (on its own autocommit
connection, so a killed run leaves its rows), and marked finished when the node
returns. The node named by `block` hangs until the process is killed.

Run as a script, it is the child the test kills:
`python crash_graph.py DSN THREAD_ID DURABILITY DRIVER BLOCK`.
"""

from __future__ import annotations

import asyncio
import operator
import sys
import time
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

NODES = ("a", "b", "c")
HANG_LIMIT = 300.0  # a child nobody killed still ends
POOL = {"min_size": 1, "max_size": 4, "timeout": 60}

CALLS_DDL = """
CREATE TABLE IF NOT EXISTS crash_calls (
    id serial PRIMARY KEY,
    thread_id text NOT NULL,
    node text NOT NULL,
    pid int NOT NULL,
    finished boolean NOT NULL DEFAULT false
)
"""


class State(TypedDict):
    results: Annotated[list[str], operator.add]


def build_graph(saver: Any, dsn: str, *, block: str | None = None) -> Any:
    """START -> a, b, c in parallel -> END, each call counted in `crash_calls`."""

    def make(name: str) -> Any:
        def node(state: State, config: RunnableConfig) -> dict[str, list[str]]:
            import os

            thread_id = config["configurable"]["thread_id"]
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(
                    "INSERT INTO crash_calls (thread_id, node, pid) VALUES (%s, %s, %s)"
                    " RETURNING id",
                    [thread_id, name, os.getpid()],
                ).fetchone()
                assert row is not None
                if name == block:
                    deadline = time.monotonic() + HANG_LIMIT
                    while time.monotonic() < deadline:
                        time.sleep(0.05)
                    raise RuntimeError(f"node {name!r} was never killed")
                conn.execute("UPDATE crash_calls SET finished = true WHERE id = %s", [row[0]])
            return {"results": [name]}

        return node

    builder = StateGraph(State)
    for name in NODES:
        builder.add_node(name, make(name))
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    return builder.compile(checkpointer=saver)


def run(dsn: str, thread_id: str, durability: str, driver: str, block: str | None) -> None:
    """Run the graph once on a new thread, as the child the test kills does."""
    from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

    config = {"configurable": {"thread_id": thread_id}}
    if driver == "sync":
        with PostgresSaver.from_conn_string(dsn, pool=POOL) as saver:
            build_graph(saver, dsn, block=block).invoke(
                {"results": []}, config, durability=durability
            )
        return

    async def arun() -> None:
        async with AsyncPostgresSaver.from_conn_string(dsn, pool=POOL) as asaver:
            await build_graph(asaver, dsn, block=block).ainvoke(
                {"results": []}, config, durability=durability
            )

    asyncio.run(arun())


if __name__ == "__main__":
    dsn_, thread_, durability_, driver_, block_ = sys.argv[1:6]
    run(dsn_, thread_, durability_, driver_, block_ or None)

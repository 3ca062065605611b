"""A process killed mid-run: a new process resumes the thread, as LangGraph promises.

A child process (`crash_graph.py`, started with `subprocess`, so it shares
nothing with the test) runs a graph whose three nodes run in parallel; the
test SIGKILLs it once two nodes have finished and the third hangs. What the
new process (the test's) may then expect depends on the durability mode, as
LangGraph documents it:

- `sync` and `async`: the checkpoint a super-step starts from, and the writes
  of each task that finished, are saved while the run goes on (with `async`,
  in the background, so a task's writes may be lost if the crash comes first;
  the test kills only once they are stored). Resuming (`invoke(None)`) runs
  the unfinished node alone.
- `exit`: nothing is saved until the run ends ("you cannot recover from
  system failures ... that occur mid-execution"). The killed run leaves no
  trace: the thread is as the previous run left it, resuming runs nothing,
  and sending the input again runs every node again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

from .crash_graph import CALLS_DDL, NODES, build_graph

CHILD = Path(__file__).with_name("crash_graph.py")
WAIT = 120.0  # bounds waits for what takes seconds (the child imports LangGraph)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def calls(dsn: str, thread_id: str) -> list[tuple[str, int, bool]]:
    """(node, pid, finished) of every call, in order."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT node, pid, finished FROM crash_calls WHERE thread_id = %s ORDER BY id",
            [thread_id],
        ).fetchall()
    return [(node, pid, finished) for node, pid, finished in rows]


def stored_rows(dsn: str, thread_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every key the thread has stored, table by table."""
    with psycopg.connect(dsn) as conn:
        return {
            "checkpoints": conn.execute(
                "SELECT checkpoint_ns, checkpoint_id FROM pgc_checkpoints WHERE thread_id = %s"
                " ORDER BY 1, 2",
                [thread_id],
            ).fetchall(),
            "writes": conn.execute(
                "SELECT checkpoint_id, task_id, idx FROM pgc_writes WHERE thread_id = %s"
                " ORDER BY 1, 2, 3",
                [thread_id],
            ).fetchall(),
        }


def finished_tasks_stored(dsn: str, thread_id: str) -> int:
    """How many tasks have writes stored on the thread's latest checkpoint."""
    with PostgresSaver.from_conn_string(dsn) as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": thread_id}})
    if latest is None:
        return 0
    return len({task for task, channel, _ in latest.pending_writes if channel == "results"})


class Child:
    """The child process that runs the graph until the test kills it."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.log = tmp / f"child-{uuid.uuid4().hex[:8]}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(CHILD), *args], stdout=out, stderr=subprocess.STDOUT
            )

    def wait_for(self, what: str, ready: Any) -> None:
        deadline = time.monotonic() + WAIT
        while not ready():
            if self.proc.poll() is not None:
                pytest.fail(
                    f"the child ended ({self.proc.returncode}) before {what}:\n{self.output}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"the child never got to {what}:\n{self.output}")
            time.sleep(0.05)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(WAIT) == -signal.SIGKILL

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT)


async def resume(dsn: str, thread_id: str, driver: str, inputs: Any, durability: str) -> Any:
    """Run the graph on the thread in this process (another process than the child's)."""
    config = {"configurable": {"thread_id": thread_id}}
    if driver == "sync":
        with PostgresSaver.from_conn_string(dsn, pool={"min_size": 1}) as saver:
            graph = build_graph(saver, dsn)
            graph.invoke(inputs, config, durability=durability)
            return graph.get_state(config)
    async with AsyncPostgresSaver.from_conn_string(dsn, pool={"min_size": 1}) as asaver:
        graph = build_graph(asaver, dsn)
        await graph.ainvoke(inputs, config, durability=durability)
        return await graph.aget_state(config)


@pytest.fixture
def calls_table(db_dsn: str) -> str:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(CALLS_DDL)
    return db_dsn


def other(driver: str) -> str:
    return "async" if driver == "sync" else "sync"


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_killed_run_resumes_with_only_the_unfinished_node(
    calls_table: str, tmp_path: Path, durability: str, driver: str
) -> None:
    dsn = calls_table
    thread_id = f"crash-{durability}-{uuid.uuid4()}"
    child = Child(tmp_path, dsn, thread_id, durability, driver, "c")
    try:
        # a and b returned and their writes are stored; c is inside the node
        child.wait_for("two finished nodes", lambda: finished_tasks_stored(dsn, thread_id) == 2)
        child.wait_for(
            "the third node", lambda: any(node == "c" for node, _, _ in calls(dsn, thread_id))
        )
        child.kill()
    finally:
        child.close()
    before = calls(dsn, thread_id)
    assert sorted((node, done) for node, _, done in before) == [
        ("a", True),
        ("b", True),
        ("c", False),
    ]

    state = await resume(dsn, thread_id, other(driver), None, durability)

    after = calls(dsn, thread_id)
    assert after[: len(before)] == before
    new_calls = after[len(before) :]
    assert [(node, done) for node, _, done in new_calls] == [("c", True)]
    assert {pid for _, pid, _ in new_calls} == {os.getpid()}
    assert Counter(node for node, _, _ in after) == {"a": 1, "b": 1, "c": 2}
    assert sorted(state.values["results"]) == list(NODES)
    assert state.next == ()


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_killed_run_with_exit_durability_leaves_no_trace(
    calls_table: str, tmp_path: Path, driver: str
) -> None:
    dsn = calls_table
    thread_id = f"crash-exit-{uuid.uuid4()}"
    # a first run completes: with `exit`, saved when it ends
    first = await resume(dsn, thread_id, driver, {"results": []}, "exit")
    assert sorted(first.values["results"]) == list(NODES)
    stored = stored_rows(dsn, thread_id)
    assert stored["checkpoints"] != []

    child = Child(tmp_path, dsn, thread_id, "exit", driver, "c")
    try:

        def two_done_one_started() -> bool:
            mine = [(node, done) for node, pid, done in calls(dsn, thread_id) if pid != os.getpid()]
            return sorted(mine) == [("a", True), ("b", True), ("c", False)]

        child.wait_for("two finished nodes and the third started", two_done_one_started)
        child.kill()
    finally:
        child.close()

    # nothing of the killed run was stored
    assert stored_rows(dsn, thread_id) == stored
    runs = Counter(node for node, _, _ in calls(dsn, thread_id))
    assert runs == {"a": 2, "b": 2, "c": 2}
    # resuming finds the first run's end: nothing to run
    state = await resume(dsn, thread_id, other(driver), None, "exit")
    assert Counter(node for node, _, _ in calls(dsn, thread_id)) == runs
    assert sorted(state.values["results"]) == list(NODES)
    # the killed run's work is redone only by sending its input again
    state = await resume(dsn, thread_id, other(driver), {"results": []}, "exit")
    assert Counter(node for node, _, _ in calls(dsn, thread_id)) == {"a": 3, "b": 3, "c": 3}
    assert sorted(state.values["results"]) == sorted(list(NODES) * 2)

"""Retention sweeps against live writers, each other, and being killed half-way.

The interleavings that matter are forced, not hoped for: a test holds a row
lock that stops a sweep (or a put) at a known point inside its transaction,
watches `pg_stat_activity` until the other side is waiting there, then lets
go. Sweeps are told apart by `application_name`.

- A put racing a `delete` sweep on the same idle thread either commits first
  (the sweep finds the thread held by the put in flight, or sees the new
  checkpoint, and keeps the thread whole) or finds its parent deleted and fails
  with `MissingParentError` (the sweep wins: nothing of the thread is left).
- A real graph run on an idle thread, with a sweep looping beside it, ends in
  one of the states above, never with a history cut short.
- Two `pgcheckpoint prune` processes at once: one skips what the other holds,
  neither waits or fails, and between them every idle thread goes once.
- A sweep killed inside a batch leaves every thread of that batch whole.
- A foreign-key violation (a concurrent put stored a delta on a value being
  deleted) rolls the batch back; its threads go again one at a time.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from psycopg.conninfo import make_conninfo
from psycopg.errors import ForeignKeyViolation
from support.activity import waiting_on_a_lock
from support.chat import chat_graph
from support.cli import cli_env
from support.rows import TABLES, rows_of

from pgcheckpoint import MissingParentError, PostgresSaver, Telemetry
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.maintenance.retention import PruneReport, SweepLimits, older_than_sweep
from pgcheckpoint.ops import Stmt

MONTH = timedelta(days=30)
WAIT = 60.0  # an upper bound for something that takes well under a second


# -- helpers -------------------------------------------------------------------------


def named(dsn: str, name: str) -> str:
    return make_conninfo(dsn, application_name=name)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def connected(dsn: str, application_name: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            [application_name],
        ).fetchone()
    return bool(row and row[0])


def make_idle(dsn: str, thread_ids: list[str], age: str = "40 days") -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgc_checkpoints SET created_at = created_at - %s::interval"
            " WHERE thread_id = ANY(%s)",
            [age, thread_ids],
        )


def write_history(saver: PostgresSaver, thread_id: str, steps: int = 3) -> Any:
    """A few checkpoints with a growing list (stored as deltas) and writes; the head's config."""
    config = generate_config(thread_id)
    version = None
    for step in range(steps):
        version = saver.get_next_version(version, None)
        checkpoint = generate_checkpoint(
            channel_values={"log": [f"{thread_id} {i}: " + "z" * 60 for i in range(step + 1)]},
            channel_versions={"log": version},
        )
        config = saver.put(config, checkpoint, generate_metadata(step=step), {"log": version})
        saver.put_writes(config, [("log", f"w{step}")], f"task-{step}")
    return config


class Background(threading.Thread):
    """Runs a call in a thread; its result or error is kept for the test."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as exc:
            self.error = exc

    def outcome(self) -> Any:
        self.join(WAIT)
        assert not self.is_alive(), "the call did not finish"
        if self.error is not None:
            raise self.error
        return self.result


# -- a put racing a sweep -------------------------------------------------------------


def test_a_put_that_locked_its_parent_first_keeps_the_thread_whole(db_dsn: str) -> None:
    thread_id = f"race-{uuid.uuid4()}"
    with PostgresSaver.from_conn_string(db_dsn) as setup:
        head = write_history(setup, thread_id)
    make_idle(db_dsn, [thread_id])

    with (
        PostgresSaver.from_conn_string(named(db_dsn, "sweep-a")) as sweeper,
        psycopg.connect(db_dsn) as put_conn,
        put_conn.transaction(),
    ):
        # the put ran and holds its parent, and the thread's maintenance lock
        # shared; its transaction is still open: the sweep leaves the thread to
        # a later sweep, without waiting
        metadata = generate_metadata(step=9)
        new = PostgresSaver(put_conn).put(head, generate_checkpoint(), metadata, {})
        report: PruneReport = sweeper.prune_older_than(MONTH)

    assert (report.threads, report.skipped) == (0, [thread_id])
    assert rows_of(db_dsn, thread_id) == {"pgc_checkpoints": 4, "pgc_blobs": 3, "pgc_writes": 3}
    with PostgresSaver.from_conn_string(db_dsn) as reader:
        latest = reader.get_tuple(generate_config(thread_id))
        assert latest is not None and latest.config == new
        parent = reader.get_tuple(head)
        assert parent is not None and parent.checkpoint["channel_values"]["log"][-1].endswith("z")
        # next time the thread is young, and stays
        assert reader.prune_older_than(MONTH).threads == 0


def test_a_put_after_the_sweep_took_its_parent_fails_and_the_thread_goes_whole(
    db_dsn: str,
) -> None:
    thread_id = f"race-{uuid.uuid4()}"
    with PostgresSaver.from_conn_string(db_dsn) as setup:
        head = write_history(setup, thread_id)
    make_idle(db_dsn, [thread_id])

    with psycopg.connect(db_dsn) as blocker:
        # stops the sweep after it deleted the checkpoints, before the values
        blocker.execute(
            "SELECT 1 FROM pgc_blobs WHERE thread_id = %s LIMIT 1 FOR UPDATE", [thread_id]
        )
        with (
            PostgresSaver.from_conn_string(named(db_dsn, "sweep-b")) as sweeper,
            PostgresSaver.from_conn_string(named(db_dsn, "put-b")) as writer,
        ):
            sweep = Background(lambda: sweeper.prune_older_than(MONTH))
            sweep.start()
            wait_until(lambda: waiting_on_a_lock(db_dsn, "sweep-b"), "the sweep to wait")
            put = Background(
                lambda: writer.put(head, generate_checkpoint(), generate_metadata(step=9), {})
            )
            put.start()
            wait_until(lambda: waiting_on_a_lock(db_dsn, "put-b"), "the put to wait")
            blocker.rollback()
            report: PruneReport = sweep.outcome()
            with pytest.raises(MissingParentError):
                put.outcome()

    assert (report.threads, report.checkpoints, report.skipped) == (1, 3, [])
    assert rows_of(db_dsn, thread_id) == dict.fromkeys(TABLES, 0)


# -- a sweep racing a real graph run ---------------------------------------------------------


def chat(graph: Any, thread_id: str, turns: range) -> None:
    for turn in turns:
        graph.invoke({"messages": [f"human {turn}"], "turn": turn}, _config(thread_id))


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


class SweepAfterRead(PostgresSaver):
    """A saver that lets a sweep run right after the graph read its thread: the
    one moment a plain run is exposed (it saves its next checkpoint on a parent
    it read, which may be gone by then)."""

    sweeper: PostgresSaver
    report: PruneReport | None = None

    def get_tuple(self, config: Any) -> Any:
        found = super().get_tuple(config)
        if self.report is None:
            self.report = self.sweeper.prune_older_than(MONTH)
        return found


def test_a_run_whose_thread_was_deleted_after_it_read_it_fails_and_saves_nothing(
    db_dsn: str,
) -> None:
    thread_id = f"read-{uuid.uuid4()}"
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        chat(chat_graph(saver), thread_id, range(5))
    make_idle(db_dsn, [thread_id])
    with (
        psycopg.connect(db_dsn, autocommit=True) as conn,
        PostgresSaver.from_conn_string(db_dsn) as sweeper,
    ):
        racing = SweepAfterRead(conn)
        racing.sweeper = sweeper
        graph = chat_graph(racing)
        with pytest.raises(MissingParentError):
            chat(graph, thread_id, range(5, 6))
        assert racing.report is not None and racing.report.threads == 1
        counts = rows_of(db_dsn, thread_id)
        assert (counts["pgc_checkpoints"], counts["pgc_blobs"]) == (0, 0)
        assert graph.get_state(_config(thread_id)).values == {}
        # a write that raced the sweep may stay as a row no read returns, its
        # checkpoint gone; the thread id starts afresh
        chat(chat_graph(sweeper), thread_id, range(5, 6))
        assert sweeper.get_tuple(_config(thread_id)) is not None


@pytest.mark.slow
def test_a_sweep_racing_a_live_graph_run_never_cuts_a_history_short(db_dsn: str) -> None:
    old, new = range(5), range(5, 8)
    reference = chat_graph(InMemorySaver())
    chat(reference, "kept", range(8))
    chat(reference, "fresh", new)
    kept_state = reference.get_state(_config("kept")).values
    fresh_state = reference.get_state(_config("fresh")).values
    outcomes: dict[str, int] = {}
    random.seed(7)
    with (
        PostgresSaver.from_conn_string(db_dsn, pool={"max_size": 4}) as saver,
        PostgresSaver.from_conn_string(db_dsn) as sweeper,
    ):
        graph = chat_graph(saver)
        for trial in range(16):
            thread_id = f"live-{trial}-{uuid.uuid4()}"
            chat(graph, thread_id, old)
            make_idle(db_dsn, [thread_id])
            run = Background(lambda thread_id=thread_id: chat(graph, thread_id, new))
            run.start()
            time.sleep(random.uniform(0, 0.03))
            sweeper.prune_older_than(MONTH)
            try:
                run.outcome()
                state = graph.get_state(_config(thread_id)).values
                if state == kept_state:
                    outcome = "kept: the run went on from the whole history"
                else:
                    # the sweep deleted the thread before the run read it
                    assert state == fresh_state
                    outcome = "deleted first: the run started a new thread"
            except MissingParentError:
                # the sweep won: no checkpoint or value of the thread is left
                counts = rows_of(db_dsn, thread_id)
                assert (counts["pgc_checkpoints"], counts["pgc_blobs"]) == (0, 0)
                assert graph.get_state(_config(thread_id)).values == {}
                outcome = "deleted during the run: the run failed"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(outcomes)


# -- two sweeps at once, and a sweep killed half-way -------------------------------------------


def start_prune(dsn: str, name: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pgcheckpoint", "prune", "--older-than", "30d", *args],
        env=cli_env(PGCHECKPOINT_DSN=named(dsn, name)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def idle_threads(db_dsn: str) -> Iterator[list[str]]:
    """Twenty idle threads (in thread_id order) and one young one."""
    ids = sorted(f"idle-{i:02d}-{uuid.uuid4()}" for i in range(20))
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        for thread_id in [*ids, "young"]:
            write_history(saver, thread_id, steps=2)
    make_idle(db_dsn, ids)
    yield ids
    assert rows_of(db_dsn, "young")["pgc_checkpoints"] == 2


@pytest.mark.slow
def test_two_sweeps_at_once_neither_wait_nor_fail(db_dsn: str, idle_threads: list[str]) -> None:
    with psycopg.connect(db_dsn) as blocker:
        # whichever sweep takes the first batch stops there until the other is done
        blocker.execute(
            "SELECT 1 FROM pgc_checkpoints WHERE thread_id = %s LIMIT 1 FOR UPDATE",
            [idle_threads[0]],
        )
        sweeps = [start_prune(db_dsn, f"sweep-{n}", "--batch-size", "3", "--json") for n in (1, 2)]
        wait_until(lambda: any(s.poll() is not None for s in sweeps), "one sweep to finish")
        blocker.rollback()
        outputs = [s.communicate(timeout=WAIT) for s in sweeps]
    for sweep, (_, err) in zip(sweeps, outputs, strict=True):
        assert sweep.returncode == 0, err
    reports = [json.loads(out) for out, _ in outputs]
    # between them every idle thread went once; the one that ran on skipped what
    # the waiting one held (some of the first batch), and neither failed
    assert sum(r["threads"] for r in reports) == len(idle_threads)
    skipped = [set(r["skipped"]) for r in reports]
    assert skipped[0] | skipped[1] and skipped[0] | skipped[1] <= set(idle_threads[:3])
    assert not skipped[0] & skipped[1]
    assert reports[0]["failed"] == reports[1]["failed"] == []
    for thread_id in idle_threads:
        assert rows_of(db_dsn, thread_id) == dict.fromkeys(TABLES, 0)


@pytest.mark.slow
def test_a_sweep_killed_inside_a_batch_leaves_its_threads_whole(
    db_dsn: str, idle_threads: list[str]
) -> None:
    with psycopg.connect(db_dsn) as blocker:
        # the second batch (threads 3-5) waits for this row, its deletes half done
        blocker.execute(
            "SELECT 1 FROM pgc_checkpoints WHERE thread_id = %s LIMIT 1 FOR UPDATE",
            [idle_threads[4]],
        )
        sweep = start_prune(db_dsn, "sweep-killed", "--batch-size", "3")
        wait_until(lambda: waiting_on_a_lock(db_dsn, "sweep-killed"), "the sweep to wait")
        sweep.send_signal(signal.SIGKILL)
        sweep.communicate(timeout=WAIT)
        blocker.rollback()
    wait_until(lambda: not connected(db_dsn, "sweep-killed"), "the server to end its session")

    for thread_id in idle_threads[:3]:
        assert rows_of(db_dsn, thread_id) == dict.fromkeys(TABLES, 0)
    for thread_id in idle_threads[3:]:
        assert rows_of(db_dsn, thread_id) == {
            "pgc_checkpoints": 2,
            "pgc_blobs": 2,
            "pgc_writes": 2,
        }
    # the next run finishes the job
    again = start_prune(db_dsn, "sweep-again", "--json")
    out, err = again.communicate(timeout=WAIT)
    assert again.returncode == 0, err
    assert json.loads(out)["threads"] == len(idle_threads) - 3


# -- a foreign-key violation: a delta stored on a value being deleted -------------------------


def test_a_foreign_key_violation_rolls_the_batch_back_and_retries_its_threads(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    threads = [f"fk-{n}-{uuid.uuid4()}" for n in range(3)]
    with PostgresSaver.from_conn_string(db_dsn) as setup:
        for thread_id in threads:
            write_history(setup, thread_id)
    make_idle(db_dsn, threads)
    victim = threads[1]

    with psycopg.connect(db_dsn) as blocker:
        # stops the sweep after its snapshot, before it deletes the victim's rows
        blocker.execute(
            "SELECT 1 FROM pgc_checkpoints WHERE thread_id = %s LIMIT 1 FOR UPDATE", [victim]
        )
        with (
            # with ids on: retention logs the error's type as text, withheld otherwise
            PostgresSaver.from_conn_string(
                named(db_dsn, "sweep-fk"), telemetry=Telemetry(thread_ids=True)
            ) as sweeper,
            # from the start: the sweep logs from its thread as soon as the blocker is gone
            caplog.at_level("INFO", logger="pgcheckpoint"),
        ):
            sweep = Background(lambda: sweeper.prune_older_than(MONTH))
            sweep.start()
            wait_until(lambda: waiting_on_a_lock(db_dsn, "sweep-fk"), "the sweep to wait")
            # meanwhile a writer stores a value as a delta on one of the victim's
            with psycopg.connect(db_dsn, autocommit=True) as writer:
                writer.execute(
                    "INSERT INTO pgc_blobs (thread_id, checkpoint_ns, channel, version, type,"
                    " blob, base_version)"
                    " SELECT thread_id, checkpoint_ns, channel, version || '.next', type, blob,"
                    " version FROM pgc_blobs WHERE thread_id = %s ORDER BY version LIMIT 1",
                    [victim],
                )
            blocker.rollback()
            report: PruneReport = sweep.outcome()

    assert "ForeignKeyViolation" in caplog.text and "one at a time" in caplog.text
    # one at a time, the victim's values go with the delta on them
    assert (report.threads, report.failed, report.skipped) == (3, [], [])
    for thread_id in threads:
        assert rows_of(db_dsn, thread_id) == dict.fromkeys(TABLES, 0)


def test_a_thread_that_keeps_conflicting_is_reported_and_left_whole() -> None:
    """The sweep's own logic, fed rows (no database): a batch that fails goes again
    one thread at a time; the thread that fails alone is reported, the rest go."""
    sweep = older_than_sweep(SaverState(), MONTH, limits=SweepLimits(batch_size=3))
    candidates = [[{"thread_id": t} for t in ("a", "b", "c")], []]
    deleted: list[list[str]] = []

    def answer(stmt: Stmt) -> list[dict[str, Any]]:
        params = dict(stmt.params)
        if stmt.name == "retention_cutoff":
            return [{"cutoff": datetime.now(timezone.utc) - MONTH}]
        if stmt.name == "retention_candidates":
            return candidates.pop(0)
        if stmt.name == "retention_lock_threads":
            return [{"thread_id": t} for t in params["thread_ids"]]
        if stmt.name == "retention_delete_threads":
            if "b" in params["thread_ids"]:
                raise ForeignKeyViolation("update or delete on table violates pgc_blobs_base_fkey")
            deleted.append(params["thread_ids"])
            return [
                {"thread_id": t, "checkpoints": 2, "writes": 1, "blobs": 1, "bytes": 10}
                for t in params["thread_ids"]
            ]
        if stmt.name == "retention_changed_threads":
            return []
        return []

    def run(op: Any) -> Any:
        # one transaction: the op's statements, an error ends it
        try:
            stmt = next(op)
            while True:
                stmt = op.send(answer(stmt))
        except StopIteration as done:
            return done.value

    try:
        op = next(sweep)
        while True:
            try:
                result = run(op)
            except Exception as exc:
                op = sweep.throw(exc)
            else:
                op = sweep.send(result)
    except StopIteration as done:
        report: PruneReport = done.value
    assert deleted == [["a"], ["c"]]
    assert (report.threads, report.checkpoints, report.failed, report.examined) == (
        2,
        4,
        ["b"],
        3,
    )

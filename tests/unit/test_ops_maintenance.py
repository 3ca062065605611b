"""The deletes (`delete_thread_op`, `prune_op`, `delete_for_runs_op`) fed the rows the
server would send, without a database.

Rows are checkpoint keys, as `thread_heads`, `thread_checkpoint_ids`,
and `run_checkpoints` return them, namespaces (`hanging_calls`), and `delta_links` rows
(`support.ops.delta_chain`) (`sql/queries/maintenance.sql`); ids sort in the
order they were made.
"""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import errors as pg_errors
from support.ops import PLANNER_SETTINGS, bounded, delta_chain, drive, keys_of

from pgcheckpoint import InvalidInputError, ThreadConflictError
from pgcheckpoint.core.deletes import (
    conflict_retries,
    delete_for_runs_op,
    delete_thread_op,
    prune_op,
)
from pgcheckpoint.core.locks import maintenance_lock_key
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.ops import Op, Row, Stmt

LOCKED = [{"locked": 1}]


def key(thread_id: str, ns: str, checkpoint_id: str) -> Row:
    return {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}


def space(thread_id: str, ns: str) -> Row:
    """A row of hanging_calls: a namespace that goes."""
    return {"thread_id": thread_id, "checkpoint_ns": ns}


def as_keys(rows: list[Row]) -> list[tuple[str, str, str]]:
    return [(r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"]) for r in rows]


def locked(stmt: Stmt, *thread_ids: str) -> bool:
    return stmt.name == "lock_threads_for_maintenance" and dict(stmt.params) == {
        "keys": [maintenance_lock_key(t) for t in thread_ids],
    }


# Thread a: c1..c5 in the root namespace (c5 the head; c4 and c3 are what c5's
# DeltaChannel is rebuilt from: c3 stores it), and a subgraph call's namespace
# whose head is s2. Thread b: one checkpoint. c6 was saved after the heads were read.
HEADS = [key("a", "", "c5"), key("a", "sub:1", "s2"), key("b", "", "b1")]
EVERY = [
    *(key("a", "", f"c{i}") for i in range(1, 7)),
    key("a", "sub:1", "s1"),
    key("a", "sub:1", "s2"),
    key("b", "", "b1"),
]
LINKS = delta_chain(EVERY[:6], stored=["c3"])


# -- prune_op -----------------------------------------------------------------------


def test_keep_latest_deletes_exactly_what_the_heads_do_not_need() -> None:
    deleted = [{"checkpoints": 3, "writes": 0, "blobs": 0, "bytes": 0}]
    sent, _ = drive(
        prune_op(SaverState(), ["b", "a", "a"]),
        [[], LOCKED, HEADS, *bounded(LINKS), EVERY, *bounded([]), *bounded(deleted)],
    )
    isolation, lock, heads, _, needed, _, every, _, hanging, _, plans, delete, restore = sent
    assert isolation.name == "read_committed"
    assert locked(lock, "a", "b")  # once each
    assert (heads.name, list(heads.params["thread_ids"])) == ("thread_heads", ["a", "b"])
    assert (needed.name, list(needed.params["thread_ids"])) == ("delta_links", ["a", "b"])
    assert (every.name, list(every.params["thread_ids"])) == ("thread_checkpoint_ids", ["a", "b"])
    assert hanging.name == "hanging_calls"
    assert hanging.params["scope_ids"] == ["a", "b"]
    # what it reads: the subgraph call's newest checkpoint, and the checkpoints
    # of its parent namespace, with those that go
    assert list(hanging.params["heads_ids"]) == ["s2"]
    assert list(hanging.params["parent_ids"]) == [f"c{i}" for i in range(1, 7)]
    assert hanging.params["parent_doomed"] == [True, True, False, False, False, False]
    assert (plans.name, delete.name, restore.name) == (
        "bounded_plans",
        "delete_checkpoints",
        "planner_settings",
    )
    assert dict(restore.params) == PLANNER_SETTINGS[0]
    assert [s.name for s in sent].count("bounded_plans") == 3  # links, hanging, delete
    # not c3-c5 (needed), nor c6 (newer than its head): c1, c2 and s1
    assert sorted(keys_of(delete)) == [("a", "", "c1"), ("a", "", "c2"), ("a", "sub:1", "s1")]


def test_keep_latest_with_nothing_to_delete_sends_no_delete() -> None:
    heads = [key("a", "", "c2")]
    every = [key("a", "", "c1"), *heads]
    sent, _ = drive(
        prune_op(SaverState(), ["a"]),
        [[], LOCKED, heads, *bounded(delta_chain(every, stored=["c1"])), every],
    )
    # c2 needs c1; no subgraph call to look at
    assert [s.name for s in sent] == [
        "read_committed",
        "lock_threads_for_maintenance",
        "thread_heads",
        "bounded_plans",
        "delta_links",
        "planner_settings",
        "thread_checkpoint_ids",
    ]


def test_keep_latest_takes_the_subgraphs_that_ran_from_what_it_deletes() -> None:
    heads = [key("a", "", "c2")]
    every = [key("a", "", "c1"), *heads, key("a", "sub:1", "s1")]
    sent, _ = drive(
        prune_op(SaverState(), ["a"]),
        [[], LOCKED, heads, *bounded([]), every, *bounded([space("a", "sub:1")]), *bounded([])],
    )
    hanging, delete = sent[-5], sent[-2]
    assert hanging.name == "hanging_calls"
    assert hanging.params["parent_doomed"] == [True, False]
    # the namespaces it answers go whole
    assert keys_of(delete) == [("a", "", "c1"), ("a", "sub:1", "s1")]


def test_keep_latest_of_threads_without_checkpoints_deletes_nothing() -> None:
    sent, _ = drive(prune_op(SaverState(), ["a"]), [[], LOCKED, [], []])
    # no heads: nothing to rebuild, and nothing is older than a head
    assert [s.name for s in sent] == [
        "read_committed",
        "lock_threads_for_maintenance",
        "thread_heads",
        "thread_checkpoint_ids",
    ]


def test_the_delete_strategy_deletes_the_locked_threads_whole() -> None:
    sent, _ = drive(prune_op(SaverState(), ["b", "a"], strategy="delete"), [[], LOCKED, [], []])
    _, lock, delete, check = sent
    assert locked(lock, "a", "b")
    assert (delete.name, dict(delete.params)) == ("delete_threads", {"thread_ids": ["a", "b"]})
    assert check.name == "thread_rows_left"


# -- delete_thread_op -----------------------------------------------------------------


def test_delete_thread_deletes_under_the_lock_until_nothing_is_left() -> None:
    left = [{"thread_id": "a"}]
    sent, _ = drive(delete_thread_op(SaverState(), "a"), [[], LOCKED, [], left, [], []])
    assert [s.name for s in sent] == [
        "read_committed",
        "lock_threads_for_maintenance",
        "delete_threads",
        "thread_rows_left",
        "delete_threads",
        "thread_rows_left",
    ]
    assert locked(sent[1], "a")


def test_delete_thread_that_keeps_finding_rows_gives_up_with_a_conflict() -> None:
    left = [{"thread_id": "a"}]
    with pytest.raises(ThreadConflictError, match="written to again") as conflict:
        drive(delete_thread_op(SaverState(), "a"), [[], LOCKED, *[[], left] * 3])
    assert conflict.value.thread_ids == ["a"]


@pytest.mark.parametrize("thread_id", [["t"], ("t",), {"t"}, {"t": 1}, b"t", True])
def test_delete_thread_refuses_what_is_not_one_id(thread_id: Any) -> None:
    with pytest.raises(InvalidInputError, match="thread_id"):
        next(delete_thread_op(SaverState(), thread_id))


# -- conflict_retries ------------------------------------------------------------------


def _attempts(errors: list[BaseException | None]) -> tuple[int, Any]:
    """Run `conflict_retries` as `run_each` would, each attempt failing with the next error.

    Returns how many ops (attempts) the sweep asked to run, and its result.
    """

    def make() -> Op[str]:
        yield Stmt("read_committed")
        return "done"

    sweep = conflict_retries(make, "delete_thread", ["a"])
    ops = [next(sweep)]
    for error in errors:
        try:
            ops.append(sweep.send("done") if error is None else sweep.throw(error))
        except StopIteration as stop:
            return len(ops), stop.value
    raise AssertionError("the sweep asked for more attempts")


def test_a_delete_that_conflicts_runs_again() -> None:
    assert _attempts([pg_errors.DeadlockDetected("d"), None]) == (2, "done")


def test_a_delete_that_keeps_conflicting_says_so() -> None:
    with pytest.raises(ThreadConflictError, match="3 times") as conflict:
        _attempts([pg_errors.ForeignKeyViolation("fk")] * 3)
    assert conflict.value.thread_ids == ["a"]


def test_other_errors_of_a_delete_are_not_retried() -> None:
    with pytest.raises(InvalidInputError):
        _attempts([InvalidInputError("bad")])


@pytest.mark.parametrize(
    ("thread_ids", "strategy", "message"),
    [
        ("a", "keep_latest", "must be a list of"),
        (7, "keep_latest", "must be a list of"),
        ([["a"]], "keep_latest", "pass one id"),
        (["a"], "keep_newest", "unknown prune strategy 'keep_newest'"),
        (["a\x00"], "delete", "NUL"),
    ],
)
def test_prune_refuses_bad_input_before_any_statement(
    thread_ids: Any, strategy: str, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        next(prune_op(SaverState(), thread_ids, strategy=strategy))


def test_prune_of_no_threads_runs_nothing() -> None:
    assert drive(prune_op(SaverState(), []), []) == ([], None)


# -- delete_for_runs_op -------------------------------------------------------------


def test_delete_for_runs_deletes_the_runs_checkpoints_others_do_not_need() -> None:
    first_read = [key("a", "", "c2"), key("a", "", "c3")]
    # under the lock the run turns out to have saved c4 too
    under_lock = [*first_read, key("a", "", "c4")]
    every = [key("a", "", f"c{i}") for i in range(1, 6)]
    # c5 (another run's) is rebuilt from c4's stored value
    links = delta_chain(every, stored=["c1", "c4"])
    sent, _ = drive(
        delete_for_runs_op(SaverState(), ["r2", "r1", "r1"]),
        [[], first_read, LOCKED, under_lock, every, *bounded(links), *bounded([])],
    )
    _, runs, lock, runs_again, every_stmt, _, needed_stmt, _, _, delete, _ = sent
    assert (runs.name, list(runs.params["run_ids"])) == ("run_checkpoints", ["r1", "r2"])
    assert locked(lock, "a")
    assert runs_again.name == "run_checkpoints"
    assert (every_stmt.name, list(every_stmt.params["thread_ids"])) == (
        "thread_checkpoint_ids",
        ["a"],
    )
    assert (needed_stmt.name, list(needed_stmt.params["thread_ids"])) == ("delta_links", ["a"])
    assert delete.name == "delete_checkpoints"
    # c4 was saved by the run, but c5 needs it
    assert keys_of(delete) == [("a", "", "c2"), ("a", "", "c3")]


def test_delete_for_runs_locks_a_thread_the_run_saved_to_meanwhile() -> None:
    first_read = [key("a", "", "c1")]
    # under a's lock, the run turns out to have saved to thread b too
    under_lock = [*first_read, key("b", "", "b1")]
    sent, _ = drive(
        delete_for_runs_op(SaverState(), ["r1"]),
        [
            [],
            first_read,
            LOCKED,
            under_lock,
            LOCKED,
            under_lock,
            under_lock,
            PLANNER_SETTINGS,
            [],
            [],
        ],
    )
    names = [s.name for s in sent]
    assert names[:6] == [
        "read_committed",
        "run_checkpoints",
        "lock_threads_for_maintenance",
        "run_checkpoints",
        "lock_threads_for_maintenance",
        "run_checkpoints",
    ]
    assert locked(sent[2], "a") and locked(sent[4], "b")
    assert keys_of(sent[-2]) == as_keys(under_lock)  # b1 deleted under b's lock


def test_delete_for_runs_that_saved_nothing_takes_no_lock() -> None:
    sent, _ = drive(delete_for_runs_op(SaverState(), ["r1"]), [[], []])
    assert [s.name for s in sent] == ["read_committed", "run_checkpoints"]
    assert drive(delete_for_runs_op(SaverState(), []), []) == ([], None)
    with pytest.raises(InvalidInputError, match="must be a list of"):
        next(delete_for_runs_op(SaverState(), "r1"))


def test_delete_for_runs_that_own_every_checkpoint_deletes_them_all() -> None:
    mine = [key("a", "", "c1"), key("a", "", "c2")]
    sent, _ = drive(
        delete_for_runs_op(SaverState(), ["r1"]),
        [[], mine, LOCKED, mine, mine, *bounded([])],
    )
    # no survivor needs anything: no delta_links; no subgraph call to look at
    assert [s.name for s in sent] == [
        "read_committed",
        "run_checkpoints",
        "lock_threads_for_maintenance",
        "run_checkpoints",
        "thread_checkpoint_ids",
        "bounded_plans",
        "delete_checkpoints",
        "planner_settings",
    ]
    assert keys_of(sent[-2]) == as_keys(mine)

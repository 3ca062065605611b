"""The retention sweeps (`older_than_sweep`, `keep_last_sweep`) fed the rows the server
would send, without a database.

Each op a sweep yields runs on a script of its own (`support.sweeps`): the rows
of its statements as `sql/queries/retention.sql` returns them, or the error a
statement raises. Threads are walked in id order; a batch locks, deletes and
then checks that nothing was written meanwhile (`retention_changed_threads`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from psycopg import DataError
from psycopg import errors as pg_errors
from support.ops import bounded, delta_chain, keys_of
from support.sweeps import Ran, Script, run_sweep

from pgcheckpoint import InvalidInputError
from pgcheckpoint.core.locks import maintenance_lock_key, thread_lock_key
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.maintenance.retention import (
    LOCK_TIMEOUT,
    PruneReport,
    SweepLimits,
    _sweep,
    keep_last_sweep,
    older_than_sweep,
)
from pgcheckpoint.ops import Row, Stmt
from pgcheckpoint.store.batch import SWEEP_BATCH

MONTH = timedelta(days=30)
CUTOFF = datetime(2024, 1, 1, tzinfo=timezone.utc)
AT_CUTOFF: Script = [[{"cutoff": CUTOFF}]]
NO_MORE: Script = [[]]  # retention_candidates: no thread left


def threads(*thread_ids: str) -> list[Row]:
    """Rows naming threads (retention_candidates, _lock_threads, _changed_threads)."""
    return [{"thread_id": t} for t in thread_ids]


def went(thread_id: str, checkpoints: int) -> Row:
    """A row of retention_delete_threads (or _measure_threads): what went of a thread."""
    return {
        "thread_id": thread_id,
        "checkpoints": checkpoints,
        "writes": 2 * checkpoints,
        "blobs": checkpoints + 1,
        "bytes": 100 * checkpoints,
    }


def delete_batch(held: list[str], deleted: list[Row], changed: tuple[str, ...] = ()) -> Script:
    """A batch that locks `held`, deletes them, and finds `changed` written to meanwhile."""
    return [[], threads(*held), deleted, threads(*changed)]


def key(thread_id: str, ns: str, checkpoint_id: str, rank: int = 1) -> Row:
    return {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": checkpoint_id,
        "rank": rank,
    }


def candidates_params(ran: Ran) -> dict[str, Any]:
    (stmt,) = ran.stmts
    assert (stmt.name, stmt.fetch) == ("retention_candidates", True)
    return dict(stmt.params)


def lock_stmt(thread_ids: list[str], schema: str = "public") -> Stmt:
    return Stmt(
        "retention_lock_threads",
        {
            "thread_ids": thread_ids,
            "lock_keys": [maintenance_lock_key(t, schema) for t in thread_ids],
            "run_lock_keys": [thread_lock_key(t, schema) for t in thread_ids],
            "lock_timeout": LOCK_TIMEOUT,
        },
        fetch=True,
    )


def batch_threads(ran: Ran) -> list[str]:
    """The threads a batch tried to lock."""
    return list(ran.stmt("retention_lock_threads").params["thread_ids"])


def counts(report: PruneReport) -> tuple[int, int, int, int, int]:
    return (report.threads, report.checkpoints, report.writes, report.blobs, report.bytes)


# -- deleting idle threads ------------------------------------------------------------


def test_an_age_sweep_deletes_the_idle_threads_it_locked_and_reports_what_went() -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH),
        [
            AT_CUTOFF,
            [threads("a", "b")],
            delete_batch(["a", "b"], [went("a", 3), went("b", 4)]),
            NO_MORE,
        ],
    )
    cutoff, first, batch, last = ran
    assert cutoff.stmts == [Stmt("retention_cutoff", {"older_than": MONTH}, fetch=True)]
    assert candidates_params(first) == {
        "cutoff": CUTOFF,
        "keep_last": None,
        "start": "",
        "exclusive": False,
        "limit": 100,
    }
    assert batch.stmts == [
        Stmt("read_committed"),
        lock_stmt(["a", "b"]),
        Stmt("retention_delete_threads", {"thread_ids": ["a", "b"], "cutoff": CUTOFF}, fetch=True),
        Stmt(
            "retention_changed_threads",
            {"thread_ids": ["a", "b"], "checkpoints": [0, 0], "whole": True},
            fetch=True,
        ),
    ]
    # the walk goes on after the last thread of the batch
    assert candidates_params(last)["start"] == "b"
    assert candidates_params(last)["exclusive"] is True
    assert report == PruneReport(
        threads=2, checkpoints=7, writes=14, blobs=9, bytes=700, examined=2
    )
    assert report.complete and not report.dry_run and report.total is None


def test_a_thread_written_to_before_it_was_locked_is_kept_and_not_counted() -> None:
    # b got a new checkpoint after the sweep listed it: the delete finds it no longer idle
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH),
        [AT_CUTOFF, [threads("a", "b")], delete_batch(["a", "b"], [went("a", 3)]), NO_MORE],
    )
    check = ran[2].stmt("retention_changed_threads")
    assert check.params["thread_ids"] == ["a"]
    assert counts(report) == (1, 3, 6, 4, 300)
    assert report.examined == 2 and report.skipped == [] and report.failed == []


def test_threads_another_session_holds_are_skipped_and_left_whole() -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH),
        [
            AT_CUTOFF,
            [threads("a", "b", "c")],
            delete_batch(["b"], [went("b", 2)]),  # a and c are held elsewhere
            NO_MORE,
        ],
    )
    assert ran[2].stmt("retention_delete_threads").params["thread_ids"] == ["b"]
    assert report.skipped == ["a", "c"]
    assert (report.threads, report.examined) == (1, 3)


def test_a_batch_whose_threads_are_all_held_elsewhere_deletes_nothing() -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH),
        [AT_CUTOFF, [threads("a", "b")], [[], []], NO_MORE],
    )
    assert ran[2].names == ["read_committed", "retention_lock_threads"]
    assert report.skipped == ["a", "b"]
    assert counts(report) == (0, 0, 0, 0, 0)


def test_the_locks_taken_are_those_of_the_savers_schema() -> None:
    core = SaverState()
    core.schema = "tenant_a"
    ran, _ = run_sweep(
        older_than_sweep(core, MONTH),
        [AT_CUTOFF, [threads("a")], delete_batch(["a"], [went("a", 1)]), NO_MORE],
    )
    lock = ran[2].stmt("retention_lock_threads")
    assert lock == lock_stmt(["a"], "tenant_a")
    assert lock.params["lock_keys"] != [maintenance_lock_key("a")]


def test_a_batch_written_to_while_it_deleted_runs_again_without_those_threads() -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH),
        [
            AT_CUTOFF,
            [threads("a", "b", "c")],
            # a put on b committed while the delete waited: the batch rolls back
            delete_batch(["a", "b", "c"], [went(t, 5) for t in "abc"], changed=("b",)),
            delete_batch(["a", "c"], [went("a", 1), went("c", 2)]),
            NO_MORE,
        ],
    )
    assert type(ran[2].error).__name__ == "_Changed"
    assert batch_threads(ran[3]) == ["a", "c"]
    assert report.skipped == ["b"]
    # what the rolled-back attempt deleted is not reported
    assert counts(report) == (2, 3, 6, 5, 300)
    assert report.examined == 3


def test_a_batch_whose_every_thread_changed_is_not_run_again() -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH),
        [
            AT_CUTOFF,
            [threads("a", "b")],
            delete_batch(["a", "b"], [went("a", 1), went("b", 1)], changed=("b", "a")),
            NO_MORE,
        ],
    )
    assert [r.names[0] for r in ran] == [
        "retention_cutoff",
        "retention_candidates",
        "read_committed",
        "retention_candidates",
    ]
    assert report.skipped == ["b", "a"]
    assert counts(report) == (0, 0, 0, 0, 0)


@pytest.mark.parametrize(
    "race",
    [
        pg_errors.ForeignKeyViolation("a put stored a delta on a doomed value"),
        pg_errors.DeadlockDetected("deadlock detected"),
        pg_errors.LockNotAvailable("canceling statement due to lock timeout"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_batch_that_races_a_writer_is_retried_a_thread_at_a_time(race: Exception) -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH),
        [
            AT_CUTOFF,
            [threads("a", "b", "c")],
            [[], threads("a", "b", "c"), race],
            delete_batch(["a"], [went("a", 1)]),
            [[], threads("b"), race],  # b races again, alone: left for the next sweep
            delete_batch(["c"], [went("c", 2)]),
            [threads("d")],
            delete_batch(["d"], [went("d", 4)]),
            NO_MORE,
        ],
    )
    assert ran[2].error is race
    assert [batch_threads(r) for r in ran[3:6]] == [["a"], ["b"], ["c"]]
    assert report.failed == ["b"]
    assert counts(report) == (3, 7, 14, 10, 700)
    # the sweep goes on after the batch
    assert candidates_params(ran[6])["start"] == "c"
    assert report.examined == 4


def test_any_other_error_of_a_batch_ends_the_sweep() -> None:
    gone = pg_errors.UndefinedTable('relation "pgc_checkpoints" does not exist')
    with pytest.raises(pg_errors.UndefinedTable):
        run_sweep(
            older_than_sweep(SaverState(), MONTH),
            [AT_CUTOFF, [threads("a", "b")], [[], threads("a", "b"), gone]],
        )


# -- dry runs -------------------------------------------------------------------------


def test_a_dry_run_of_the_delete_measures_without_locking_or_deleting() -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH, limits=SweepLimits(dry_run=True)),
        [AT_CUTOFF, [threads("a", "b")], [[went("a", 3), went("b", 1)]], NO_MORE],
    )
    assert ran[2].stmts == [
        Stmt("retention_measure_threads", {"thread_ids": ["a", "b"], "cutoff": CUTOFF}, fetch=True)
    ]
    assert report.dry_run
    assert counts(report) == (2, 4, 8, 6, 400)


def test_a_dry_run_of_a_trim_measures_what_would_go() -> None:
    ranked = [key("a", "", "c2", 1), key("a", "", "c1", 2)]
    measured = [{"checkpoints": 1, "writes": 1, "blobs": 2, "bytes": 50}]
    ran, report = run_sweep(
        keep_last_sweep(SaverState(), 1, limits=SweepLimits(dry_run=True)),
        [[threads("a")], [ranked, *bounded([]), *bounded(measured)], NO_MORE],
    )
    assert ran[1].names == [
        "retention_ranked_checkpoints",
        "bounded_plans",
        "delta_links",
        "planner_settings",
        "bounded_plans",
        "measure_checkpoints",
        "planner_settings",
    ]
    assert keys_of(ran[1].stmt("measure_checkpoints")) == [("a", "", "c1")]
    assert report.dry_run
    assert counts(report) == (1, 1, 1, 2, 50)


# -- trimming history -----------------------------------------------------------------


def test_keep_last_deletes_what_no_kept_checkpoint_needs_and_the_subgraphs_hanging_off_it() -> None:
    # thread a: c1..c5 in the root namespace (c4 is rebuilt from c3), and a subgraph
    # namespace that ran from c1; thread b has no more than it keeps
    ranked = [
        *(key("a", "", f"c{i}", 6 - i) for i in range(1, 6)),
        key("a", "sub:1", "s1", 1),
        key("b", "", "b2", 1),
        key("b", "", "b1", 2),
    ]
    # c3 stores the DeltaChannel that c4 and c5 are rebuilt from
    links = delta_chain(ranked[:5], stored=["c3"])
    measured = [{"checkpoints": 3, "writes": 4, "blobs": 5, "bytes": 600}]
    ran, report = run_sweep(
        keep_last_sweep(SaverState(), 2),
        [
            [threads("a", "b")],
            [
                [],
                threads("a", "b"),
                ranked,
                *bounded(links),
                *bounded([{"thread_id": "a", "checkpoint_ns": "sub:1"}]),
                *bounded(measured),
                [],
            ],
            NO_MORE,
        ],
    )
    first, batch, _ = ran
    assert candidates_params(first) == {
        "cutoff": None,
        "keep_last": 2,
        "start": "",
        "exclusive": False,
        "limit": 100,
    }
    assert batch.names == [
        "read_committed",
        "retention_lock_threads",
        "retention_ranked_checkpoints",
        *("bounded_plans", "delta_links", "planner_settings"),
        *("bounded_plans", "hanging_calls", "planner_settings"),
        *("bounded_plans", "delete_checkpoints", "planner_settings"),
        "retention_changed_threads",
    ]
    ranked_stmt = batch.stmt("retention_ranked_checkpoints")
    assert dict(ranked_stmt.params) == {"thread_ids": ["a", "b"], "cutoff": None}
    assert list(batch.stmt("delta_links").params["thread_ids"]) == ["a", "b"]
    hanging = batch.stmt("hanging_calls")
    # the root namespace of a, parent of its subgraph call, with what goes of it
    assert list(hanging.params["parent_ids"]) == [f"c{i}" for i in range(1, 6)]
    assert hanging.params["parent_doomed"] == [True, True, False, False, False]
    assert hanging.params["scope_ids"] == ["a", "b"]
    # not c3 (c4 needs it), but the subgraph that ran from c1
    delete = batch.stmt("delete_checkpoints")
    assert delete.fetch
    assert keys_of(delete) == [("a", "", "c1"), ("a", "", "c2"), ("a", "sub:1", "s1")]
    # a should have c3..c5 left; b was not trimmed
    assert dict(batch.stmt("retention_changed_threads").params) == {
        "thread_ids": ["a"],
        "checkpoints": [3],
        "whole": False,
    }
    assert counts(report) == (1, 3, 4, 5, 600)
    assert report.examined == 2


def test_keep_latest_of_an_age_sweep_keeps_each_namespaces_newest() -> None:
    ranked = [key("a", "", "c2", 1), key("a", "", "c1", 2), key("a", "sub", "s1", 1)]
    measured = [{"checkpoints": 1, "writes": 0, "blobs": 1, "bytes": 10}]
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH, strategy="keep_latest"),
        [
            AT_CUTOFF,
            [threads("a")],
            [[], threads("a"), ranked, *bounded([]), *bounded(measured), []],
            NO_MORE,
        ],
    )
    assert candidates_params(ran[1])["keep_last"] == 1
    assert candidates_params(ran[1])["cutoff"] == CUTOFF
    batch = ran[2]
    assert batch.stmt("retention_ranked_checkpoints").params["cutoff"] == CUTOFF
    # `sub`, a checkpointer=True subgraph's namespace, never hangs: nothing to look at
    assert "hanging_calls" not in batch.names
    assert keys_of(batch.stmt("delete_checkpoints")) == [("a", "", "c1")]
    assert batch.stmt("retention_changed_threads").params["checkpoints"] == [2]
    assert counts(report) == (1, 1, 0, 1, 10)


def test_a_trim_that_finds_nothing_to_delete_deletes_nothing() -> None:
    # c1 is older than the newest, but c2 is rebuilt from it
    ranked = [key("a", "", "c2", 1), key("a", "", "c1", 2)]
    ran, report = run_sweep(
        keep_last_sweep(SaverState(), 1),
        [
            [threads("a", "b")],
            [[], threads("a"), ranked, *bounded(delta_chain(ranked[::-1], ["c1"]))],
            NO_MORE,
        ],
    )
    assert ran[1].names[-2] == "delta_links"
    assert "delete_checkpoints" not in ran[1].names
    assert counts(report) == (0, 0, 0, 0, 0)
    assert report.skipped == ["b"] and report.examined == 2


def test_a_trimmed_thread_written_to_meanwhile_rolls_the_batch_back() -> None:
    ranked = [key(t, "", c, r) for t in "ab" for c, r in (("c2", 1), ("c1", 2))]
    measured = [{"checkpoints": 2, "writes": 0, "blobs": 0, "bytes": 20}]
    ran, report = run_sweep(
        keep_last_sweep(SaverState(), 1),
        [
            [threads("a", "b")],
            [[], threads("a", "b"), ranked, *bounded([]), *bounded(measured), threads("a")],
            [
                *([], threads("b"), ranked[2:], *bounded([])),
                *bounded([{**measured[0], "checkpoints": 1}]),
                [],
            ],
            NO_MORE,
        ],
    )
    assert ran[1].stmt("retention_changed_threads").params["checkpoints"] == [1, 1]
    assert batch_threads(ran[2]) == ["b"]
    assert report.skipped == ["a"]
    assert counts(report) == (1, 1, 0, 0, 20)


# -- walking, limits and progress ------------------------------------------------------


def test_the_sweep_walks_the_threads_a_batch_at_a_time_each_after_the_last() -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH, limits=SweepLimits(batch_size=2)),
        [
            AT_CUTOFF,
            [threads("a", "b")],
            delete_batch(["a", "b"], [went("a", 1), went("b", 1)]),
            [threads("c")],
            delete_batch(["c"], [went("c", 1)]),
            NO_MORE,
        ],
    )
    walk = [candidates_params(ran[i]) for i in (1, 3, 5)]
    assert [(w["start"], w["exclusive"], w["limit"]) for w in walk] == [
        ("", False, 2),
        ("b", True, 2),
        ("c", True, 2),
    ]
    assert [batch_threads(ran[i]) for i in (2, 4)] == [["a", "b"], ["c"]]
    assert (report.threads, report.examined, report.complete) == (3, 3, True)


@pytest.mark.parametrize(("left", "complete"), [(["d"], False), ([], True)])
def test_max_threads_stops_the_sweep_and_says_whether_threads_are_left(
    left: list[str], complete: bool
) -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH, limits=SweepLimits(batch_size=2, max_threads=3)),
        [
            AT_CUTOFF,
            [threads("a", "b")],
            delete_batch(["a", "b"], [went("a", 1), went("b", 1)]),
            [threads("c")],
            delete_batch(["c"], [went("c", 1)]),
            [threads(*left)],
        ],
    )
    walk = [candidates_params(ran[i]) for i in (1, 3, 5)]
    # the last limit is what is left of max_threads; then one thread is looked for
    assert [(w["start"], w["limit"]) for w in walk] == [("", 2), ("b", 1), ("c", 1)]
    assert (report.examined, report.threads, report.complete) == (3, 3, complete)


def clock(*ticks: float) -> Callable[[], float]:
    """A clock that reads `ticks`, one per call; a call more fails the sweep."""
    it: Iterator[float] = iter(ticks)
    return lambda: next(it)


@pytest.mark.parametrize(
    ("ticks", "batches"),
    [
        ((0.0, 100.0), 1),  # out of time already: the first batch still runs
        ((0.0, 4.0, 5.0), 2),  # a second batch starts at 4s, none at 5s
    ],
)
def test_max_seconds_starts_no_new_batch_once_the_time_is_up(
    ticks: tuple[float, ...], batches: int
) -> None:
    sweep = _sweep(
        SaverState(),
        older_than=None,
        keep=None,
        limits=SweepLimits(batch_size=1, max_seconds=5),
        clock=clock(*ticks),
    )
    scripts: list[Script] = []
    for thread_id in "abc"[:batches]:
        scripts += [[threads(thread_id)], delete_batch([thread_id], [went(thread_id, 1)])]
    ran, report = run_sweep(sweep, [*scripts, [threads("z")]])
    last = candidates_params(ran[-1])
    assert (last["start"], last["exclusive"], last["limit"]) == ("abc"[batches - 1], True, 1)
    assert (report.examined, report.threads, report.complete) == (batches, batches, False)


def test_progress_hears_the_total_first_then_the_report_after_each_batch() -> None:
    heard: list[dict[str, Any]] = []
    limits = SweepLimits(batch_size=2, max_threads=3, progress=lambda r: heard.append(r.as_dict()))
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH, limits=limits),
        [
            AT_CUTOFF,
            [[{"threads": 7}]],
            [threads("a", "b")],
            delete_batch(["a", "b"], [went("a", 1)]),
            [threads("c")],
            delete_batch(["c"], [went("c", 2)]),
            [threads("d")],
        ],
    )
    assert ran[1].stmts == [
        Stmt("retention_count_candidates", {"cutoff": CUTOFF, "keep_last": None}, fetch=True)
    ]
    # the total is what max_threads lets the sweep look at
    assert [(h["total"], h["examined"], h["threads"], h["checkpoints"]) for h in heard] == [
        (3, 0, 0, 0),
        (3, 2, 1, 1),
        (3, 3, 2, 3),
    ]
    assert report.total == 3 and not report.complete


def test_without_progress_the_sweep_counts_nothing_first() -> None:
    ran, _ = run_sweep(keep_last_sweep(SaverState(), 3), [NO_MORE])
    assert [r.names for r in ran] == [["retention_candidates"]]


# -- refusals -------------------------------------------------------------------------


def test_an_age_older_than_postgres_can_reach_back_is_refused_with_advice() -> None:
    too_far = DataError("interval out of range")
    with pytest.raises(InvalidInputError, match=r"4713 BC.*shorter age"):
        run_sweep(older_than_sweep(SaverState(), timedelta(days=10**8)), [[too_far]])


@pytest.mark.parametrize(
    ("start", "message"),
    [
        (lambda: older_than_sweep(SaverState(), timedelta(0)), "positive timedelta"),
        (lambda: older_than_sweep(SaverState(), -MONTH), "positive timedelta"),
        (lambda: older_than_sweep(SaverState(), 30), "positive timedelta"),  # type: ignore[arg-type]
        (
            lambda: older_than_sweep(SaverState(), MONTH, strategy="keep_newest"),
            "unknown retention strategy 'keep_newest'",
        ),
        (lambda: keep_last_sweep(SaverState(), 0), "keep must be a positive int"),
        (lambda: keep_last_sweep(SaverState(), True), "keep must be a positive int"),
        (lambda: keep_last_sweep(SaverState(), 2.0), "keep must be a positive int"),  # type: ignore[arg-type]
        (lambda: keep_last_sweep(SaverState(), 2**31), "keep must be at most"),
        (lambda: SweepLimits(batch_size=0), "batch_size"),
        (lambda: SweepLimits(batch_size=True), "batch_size"),
        (lambda: SweepLimits(max_threads=0), "max_threads"),
        (lambda: SweepLimits(max_threads=2.5), "max_threads"),  # type: ignore[arg-type]
        (lambda: SweepLimits(max_seconds=0), "max_seconds"),
        (lambda: SweepLimits(max_seconds=-1.0), "max_seconds"),
        (lambda: SweepLimits(max_seconds=math.nan), "max_seconds"),
        (lambda: SweepLimits(max_seconds=True), "max_seconds"),
    ],
)
def test_bad_arguments_are_refused_before_any_statement(
    start: Callable[[], Any], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        start()


# -- the store's expired items ----------------------------------------------------------

PAGE = [{} for _ in range(SWEEP_BATCH)]  # store_sweep counts rows: one empty row each


def test_sweep_store_deletes_expired_items_a_page_per_op_after_the_threads() -> None:
    ran, report = run_sweep(
        older_than_sweep(SaverState(), MONTH, limits=SweepLimits(sweep_store=True)),
        [AT_CUTOFF, NO_MORE, [PAGE], [PAGE], [[{}, {}]]],
    )
    assert [r.names for r in ran[2:]] == [["store_sweep"]] * 3
    assert ran[2].stmt("store_sweep").params == {"limit": SWEEP_BATCH}
    assert (report.store_items, report.complete) == (2 * SWEEP_BATCH + 2, True)
    # without it the store is left alone, and the report says so
    _, report = run_sweep(older_than_sweep(SaverState(), MONTH), [AT_CUTOFF, NO_MORE])
    assert report.store_items is None


def test_a_dry_run_counts_the_expired_items() -> None:
    limits = SweepLimits(dry_run=True, sweep_store=True)
    ran, report = run_sweep(
        keep_last_sweep(SaverState(), 3, limits=limits),
        [NO_MORE, [[{"items": 9, "expired": 4}]]],
    )
    assert ran[-1].names == ["store_count"] and ran[-1].stmts[0].params["prefix"] is None
    assert report.store_items == 4


def test_max_seconds_stops_the_store_sweep_after_a_page() -> None:
    # 1 s after the start a second page begins; at 2 s none does (the items left
    # are the next run's), though each page was full
    limits = SweepLimits(max_seconds=1.5, sweep_store=True)
    sweep = _sweep(SaverState(), older_than=None, keep=3, limits=limits, clock=clock(0, 1, 2))
    _, report = run_sweep(sweep, [NO_MORE, [PAGE], [PAGE]])
    assert (report.store_items, report.complete) == (2 * SWEEP_BATCH, False)

"""The I/O-free half of thread locks: keys, and ops fed the rows a server would send."""

from __future__ import annotations

import contextvars
import hashlib
import threading
from typing import Any

import pytest
from psycopg import errors as pg_errors
from support.ops import drive

from pgcheckpoint import InvalidInputError, PgCheckpointError, ThreadBusyError
from pgcheckpoint.core.locks import (
    MAINTENANCE_LOCK_CLASS,
    STORE_TTL_SWEEP_LOCK_CLASS,
    THREAD_LOCK_CLASS,
    TTL_SWEEP_LOCK_CLASS,
    ThreadLock,
    acquire_op,
    check_timeout,
    holding,
    lock_key,
    maintenance_lock_key,
    release_op,
    release_ttl_sweep_lock_op,
    store_ttl_sweep_lock_key,
    thread_lock_key,
    try_ttl_sweep_lock_op,
    ttl_sweep_lock_key,
)
from pgcheckpoint.drivers.thread_locks import pool_lock_slots, resume_command

BACKEND = 4242


def tried(
    locked: bool, holder: int | None = None, *, already: bool = False, pooled: bool = False
) -> list[Any]:
    return [
        {
            "already_held": already,
            "pooled": pooled,
            "locked": locked,
            "backend_pid": BACKEND,
            "holder_pid": holder,
        }
    ]


def checked(pid: int = BACKEND, held: bool = True) -> list[Any]:
    return [{"backend_pid": pid, "held": held}]


# -- keys ---------------------------------------------------------------------------


def test_key_is_the_first_eight_bytes_of_sha256_over_class_schema_and_thread() -> None:
    digest = hashlib.sha256(b"pgcheckpoint/thread-lock\x00public\x00thread-1").digest()
    assert thread_lock_key("thread-1") == int.from_bytes(digest[:8], "big", signed=True)
    # fixed forever: other processes, other versions and SQL must agree on it
    assert thread_lock_key("thread-1") == -5747354173709794607
    digest = hashlib.sha256(b"pgcheckpoint/maintenance-lock\x00public\x00thread-1").digest()
    assert maintenance_lock_key("thread-1") == int.from_bytes(digest[:8], "big", signed=True)


@pytest.mark.parametrize("thread_id", ["", "x" * 10_000, "🧵" * 256, "e\u0301", "\u2028"])
def test_any_thread_id_gives_a_signed_64_bit_key(thread_id: str) -> None:
    key = thread_lock_key(thread_id)
    assert -(2**63) <= key < 2**63
    assert key == thread_lock_key(thread_id)


def test_schema_and_thread_cannot_be_confused() -> None:
    assert thread_lock_key("b", "a") != thread_lock_key("", "a\x00b")
    assert thread_lock_key("t", "public") != thread_lock_key("t", "tenant_b")


def test_lock_classes_are_folded_into_the_key() -> None:
    assert thread_lock_key("t") == lock_key(THREAD_LOCK_CLASS, "t")
    assert thread_lock_key("t") != maintenance_lock_key("t")


def test_no_two_of_a_million_thread_ids_share_a_key() -> None:
    # 32-bit keys collided after 84,427 random ids; 64 bits make it one in 2**24 here
    keys = {thread_lock_key(f"thread-{i}") for i in range(1_000_000)}
    assert len(keys) == 1_000_000


# -- timeouts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "lock_timeout"),
    [(None, "0"), (float("inf"), "0"), (2.5, "2500"), (0.0001, "1"), (1e12, str(2**31 - 1))],
)
def test_waits_are_bounded_by_lock_timeout_in_milliseconds(
    timeout: float | None, lock_timeout: str
) -> None:
    sent, lock = drive(
        acquire_op("t", schema="public", timeout=timeout),
        [tried(False, 7), [{"backend_pid": BACKEND}], checked()],
    )
    assert [s.name for s in sent] == ["try_thread_lock", "wait_thread_lock", "thread_lock_check"]
    assert sent[1].params["lock_timeout"] == lock_timeout
    assert lock == ThreadLock("t", "public", thread_lock_key("t"), BACKEND, in_transaction=False)


@pytest.mark.parametrize("timeout", [-1, float("nan"), True, "5", [1]])
def test_bad_timeouts_are_refused(timeout: Any) -> None:
    with pytest.raises(InvalidInputError, match="timeout"):
        check_timeout(timeout)


# -- acquiring ------------------------------------------------------------------------


def test_free_thread_is_taken_on_the_first_try() -> None:
    sent, lock = drive(
        acquire_op("t", schema="s", timeout=0, client_pid=BACKEND), [tried(True), checked()]
    )
    assert [s.name for s in sent] == ["try_thread_lock", "thread_lock_check"]
    assert sent[0].params == {
        "key": thread_lock_key("t", "s"),
        "client_pid": BACKEND,
        "in_transaction": False,
    }
    assert lock.backend_pid == BACKEND
    assert not lock.in_transaction


def test_behind_a_pooler_the_lock_lives_in_a_transaction_until_released() -> None:
    sent, lock = drive(
        acquire_op("t", schema="s", timeout=0, client_pid=1),
        [tried(False, pooled=True), [], tried(True), checked()],
    )
    assert [s.name for s in sent] == [
        "try_thread_lock",
        "begin_thread_lock_transaction",
        "try_thread_lock",
        "thread_lock_check",
    ]
    assert sent[2].params["in_transaction"] is True
    assert lock.in_transaction
    sent, released = drive(release_op(lock), [checked(), []])
    assert [s.name for s in sent] == ["thread_lock_check", "end_thread_lock_transaction"]
    assert released


def test_behind_a_pooler_a_busy_thread_ends_the_transaction() -> None:
    op = acquire_op("t", schema="s", timeout=0, client_pid=1)
    assert next(op).name == "try_thread_lock"
    assert op.send(tried(False, pooled=True)).name == "begin_thread_lock_transaction"
    assert op.send([]).name == "try_thread_lock"
    # the connection goes back to its pool idle, holding nothing
    assert op.send(tried(False, 99)).name == "end_thread_lock_transaction"
    with pytest.raises(ThreadBusyError):
        op.send([])


def test_two_thread_ids_sharing_a_key_are_not_called_the_same_run() -> None:
    key = thread_lock_key("a")
    with (
        holding(ThreadLock("other", "public", key, 77)),
        pytest.raises(ThreadBusyError, match="shares its lock key with thread 'other'"),
    ):
        drive(acquire_op("a", schema="public", timeout=None), [tried(False, 77)])


def test_busy_thread_names_its_holder() -> None:
    with pytest.raises(ThreadBusyError) as busy:
        drive(acquire_op("t", schema="public", timeout=0), [tried(False, 99)])
    assert (busy.value.thread_id, busy.value.holder_pid) == ("t", 99)
    assert str(busy.value) == (
        "thread 't' is locked by another worker (held by backend pid 99); "
        "retry later or pass a timeout to wait"
    )


def test_wait_that_runs_out_asks_who_holds_the_lock() -> None:
    with pytest.raises(ThreadBusyError, match=r"after waiting 1\.5s") as busy:
        drive(
            acquire_op("t", schema="public", timeout=1.5),
            [tried(False, 99), pg_errors.LockNotAvailable("timeout"), [{"holder_pid": 98}]],
        )
    assert busy.value.holder_pid == 98


def test_other_errors_while_waiting_propagate() -> None:
    with pytest.raises(pg_errors.QueryCanceled):
        drive(
            acquire_op("t", schema="public", timeout=None),
            [tried(False, 99), pg_errors.QueryCanceled("cancelled")],
        )


def test_session_that_already_holds_the_lock_is_shared_with_another_client() -> None:
    with pytest.raises(PgCheckpointError, match="pooler that shares server sessions") as shared:
        drive(acquire_op("t", schema="public", timeout=None), [tried(False, already=True)])
    assert not isinstance(shared.value, ThreadBusyError)


@pytest.mark.parametrize(
    ("check", "says"),
    [
        (checked(pid=BACKEND + 1), "next statement ran on session"),
        (checked(held=False), "no longer"),
    ],
)
def test_lock_that_moved_session_is_a_pooler(check: list[Any], says: str) -> None:
    with pytest.raises(PgCheckpointError, match=f"{says}.*pooler that shares server sessions"):
        drive(acquire_op("t", schema="public", timeout=0), [tried(True), check])


@pytest.mark.parametrize(
    ("thread_id", "problem"),
    [("é" * 513, "1026 bytes"), ("a\x00b", "NUL"), ("\ud800", "surrogate"), (None, "missing")],
)
def test_thread_ids_that_cannot_be_stored_are_refused(thread_id: Any, problem: str) -> None:
    with pytest.raises(InvalidInputError, match=problem):
        next(acquire_op(thread_id, schema="public", timeout=0))


def test_thread_ids_are_normalised_as_langgraph_does() -> None:
    _, lock = drive(acquire_op(42, schema="public", timeout=0), [tried(True), checked()])  # type: ignore[arg-type]
    assert lock.thread_id == "42"
    assert lock.key == thread_lock_key("42")


# -- nesting --------------------------------------------------------------------------


def test_lock_held_by_this_context_is_not_waited_for() -> None:
    key = thread_lock_key("t")
    with holding(ThreadLock("t", "public", key, 77)):
        with pytest.raises(ThreadBusyError, match="already locked by this run"):
            drive(acquire_op("t", schema="public", timeout=None), [tried(False, 77)])
        # a holder that is not this run's own session is waited for as usual
        sent, _ = drive(
            acquire_op("t", schema="public", timeout=None),
            [tried(False, 78), [{"backend_pid": BACKEND}], checked()],
        )
        assert sent[1].name == "wait_thread_lock"


def _nested_attempt() -> str:
    """What a lock attempt on "t" does when session 77 holds it."""
    try:
        drive(
            acquire_op("t", schema="public", timeout=None),
            [tried(False, 77), [{"backend_pid": BACKEND}], checked()],
        )
    except ThreadBusyError:
        return "refused"
    return "waited"


def test_copies_of_the_context_know_the_lock_while_it_is_held() -> None:
    outcomes: list[str] = []
    with holding(ThreadLock("t", "public", thread_lock_key("t"), 77)):
        # as LangGraph runs a node: in a copy of the caller's context, on another thread
        inside = contextvars.copy_context()
        worker = threading.Thread(target=lambda: outcomes.append(inside.run(_nested_attempt)))
        worker.start()
        worker.join()
    # a copy that outlives the block (a task it spawned) no longer treats it as its own
    outcomes.append(inside.run(_nested_attempt))
    outcomes.append(_nested_attempt())
    assert outcomes == ["refused", "waited", "waited"]


# -- releasing ------------------------------------------------------------------------


@pytest.mark.parametrize(("unlocked", "released"), [(True, True), (False, False), (None, False)])
def test_release_reports_whether_the_session_still_held_it(
    unlocked: bool | None, released: bool
) -> None:
    lock = ThreadLock("t", "public", 5, BACKEND)
    sent, result = drive(release_op(lock), [[{"unlocked": unlocked}]])
    assert sent[0].params == {"key": 5, "backend_pid": BACKEND}
    assert result is released


# -- pools and resume -------------------------------------------------------------------


class FakePool:
    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.name = "p"
        self.timeout = 1.0


def test_a_pool_keeps_one_connection_free_of_locks() -> None:
    pool = FakePool(3)
    slots = pool_lock_slots(pool, threading.BoundedSemaphore)
    assert pool_lock_slots(pool, threading.BoundedSemaphore) is slots
    assert slots.acquire(blocking=False) and slots.acquire(blocking=False)
    assert not slots.acquire(blocking=False)
    with pytest.raises(InvalidInputError, match="max_size >= 2"):
        pool_lock_slots(FakePool(1), threading.BoundedSemaphore)


def test_resume_command_needs_the_graph_to_save_through_the_saver() -> None:
    saver = object()

    class Graph:
        checkpointer: Any = saver

    command = resume_command(Graph(), saver, {"approved": True})
    assert command.resume == {"approved": True}
    with pytest.raises(InvalidInputError, match="checkpointer=saver"):
        resume_command(Graph(), object(), "x")


def test_the_pg_cron_procedure_spells_the_same_lock_classes() -> None:
    # sql/retention.sql runs inside PostgreSQL and cannot import them
    from pgcheckpoint.resources import sql_dir

    text = (sql_dir() / "retention.sql").read_text(encoding="utf-8")
    assert f"maintenance_lock CONSTANT text := '{MAINTENANCE_LOCK_CLASS}';" in text
    assert f"run_lock CONSTANT text := '{THREAD_LOCK_CLASS}';" in text


def test_the_ttl_sweep_lock_is_one_per_schema_and_no_thread_lock() -> None:
    key = ttl_sweep_lock_key("public")
    assert key == lock_key(TTL_SWEEP_LOCK_CLASS, "", "public")
    assert key != ttl_sweep_lock_key("tenant_b")
    assert key not in {thread_lock_key(""), maintenance_lock_key("")}


def test_a_worker_becomes_the_ttl_sweeper_in_a_transaction_it_keeps_open() -> None:
    sent, held = drive(try_ttl_sweep_lock_op("tenant_b"), [[], [{"locked": True}]])
    assert [s.name for s in sent] == ["begin_ttl_sweep", "try_ttl_sweep_lock"]
    assert sent[1].params == {"key": ttl_sweep_lock_key("tenant_b")}
    assert held is True
    sent, _ = drive(release_ttl_sweep_lock_op(), [[]])
    assert [s.name for s in sent] == ["end_ttl_sweep"]


def test_the_store_sweeper_takes_a_lock_of_its_own_per_schema() -> None:
    key = store_ttl_sweep_lock_key("tenant_b")
    assert key == lock_key(STORE_TTL_SWEEP_LOCK_CLASS, "", "tenant_b")
    assert key not in {ttl_sweep_lock_key("tenant_b"), store_ttl_sweep_lock_key("public")}
    sent, held = drive(try_ttl_sweep_lock_op("tenant_b", store=True), [[], [{"locked": True}]])
    assert sent[1].params == {"key": key}
    assert held is True


def test_while_another_worker_sweeps_the_transaction_ends_at_once() -> None:
    sent, held = drive(try_ttl_sweep_lock_op("public"), [[], [{"locked": False}], []])
    assert [s.name for s in sent] == ["begin_ttl_sweep", "try_ttl_sweep_lock", "end_ttl_sweep"]
    assert held is False

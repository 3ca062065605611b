"""When the savers connect without their pool (`drivers.PoolOutage`), without a database."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from pgcheckpoint.drivers.connections import (
    POOL_PATIENCE,
    PoolOutage,
    bypass_connect_args,
    pool_outage,
    pool_timeout_error,
)


class FakePool:
    """What PoolOutage reads of a psycopg_pool pool."""

    def __init__(self, conninfo: Any = "host=db dbname=app", kwargs: Any = None) -> None:
        self.name = "app-pool"
        self.max_size = 3
        self.timeout = 5.0
        self.conninfo = conninfo
        self.kwargs = kwargs
        self.errors = 0

    def get_stats(self) -> dict[str, int]:
        return {"connections_errors": self.errors} if self.errors else {}


def test_a_busy_pool_is_waited_for_and_a_failing_one_is_not() -> None:
    pool = FakePool()
    outage = PoolOutage(pool, threading.BoundedSemaphore)
    assert not outage.suspected(pool, lost=False)  # merely busy
    assert outage.suspected(pool, lost=True)  # the operation's connection was lost
    pool.errors = 2
    assert outage.suspected(pool, lost=False)  # the pool failed to connect meanwhile
    assert outage.suspected(pool, lost=False)  # for each operation waiting...
    outage.served()
    assert not outage.suspected(pool, lost=False)  # ... until the pool serves again


def test_a_pool_that_failed_before_the_saver_was_made_is_in_trouble() -> None:
    pool = FakePool()
    pool.errors = 1
    assert PoolOutage(pool, threading.BoundedSemaphore).suspected(pool, lost=False)


def test_the_savers_own_connections_decide_until_the_pool_serves_again() -> None:
    pool = FakePool()
    outage = PoolOutage(pool, threading.BoundedSemaphore)
    assert outage.first_wait() == POOL_PATIENCE
    error = psycopg.OperationalError("connection refused")
    outage.failed(error)
    assert outage.error is error and outage.suspected(pool, lost=False)
    outage.connected()  # the server answered, the pool had nothing ready
    assert outage.error is None and outage.suspected(pool, lost=False)
    assert outage.first_wait() < POOL_PATIENCE  # next ones barely wait for the pool
    outage.served()
    assert not outage.suspected(pool, lost=False) and outage.first_wait() == POOL_PATIENCE


def test_at_most_max_size_connections_of_their_own_per_pool() -> None:
    pool = FakePool()
    outage = pool_outage(pool, threading.BoundedSemaphore)
    assert pool_outage(pool, threading.BoundedSemaphore) is outage  # shared by its savers
    taken = [outage.slots.acquire(blocking=False) for _ in range(pool.max_size + 1)]
    assert taken == [True] * pool.max_size + [False]


def test_connections_of_their_own_are_made_as_the_pools_are() -> None:
    kwargs = {"autocommit": True, "application_name": "app"}
    conninfo, made = bypass_connect_args(FakePool(kwargs=kwargs), 30.0) or ("", {})
    assert conninfo == "host=db dbname=app"
    assert made == {**kwargs, "connect_timeout": 10}  # bounded, and by the time left
    assert bypass_connect_args(FakePool(), 0.2) == ("host=db dbname=app", {"connect_timeout": 2})
    given = FakePool("host=db connect_timeout=3")
    assert bypass_connect_args(given, 30.0) == ("host=db connect_timeout=3", {})
    # a pool that computes its conninfo at connect time is left to itself
    assert bypass_connect_args(FakePool(conninfo=lambda: "host=db"), 30.0) is None


def test_the_timeout_error_names_the_connection_failure_when_there_is_one() -> None:
    pool: Any = FakePool()
    busy = str(pool_timeout_error(pool, PoolTimeout("timeout")))
    assert "max_size=3" in busy and "raise max_size" in busy
    refused = psycopg.OperationalError("connection failed: session is read-only\nmore")
    down = str(pool_timeout_error(pool, PoolTimeout("timeout"), refused))
    assert "'app-pool'" in down and "cannot connect to the server" in down
    assert "session is read-only more" in down and "max_size" not in down

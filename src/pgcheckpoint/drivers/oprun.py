"""The rule for running an op in a driver's hands, and starting it over on another connection.

Example:
    >>> from pgcheckpoint.drivers.oprun import OpRun
    >>> from pgcheckpoint.ops import Stmt
    >>> def op():
    ...     rows = yield Stmt("schema_revision", fetch=True)
    ...     return rows
    >>> OpRun(op(), pooled=True).first.name
    'schema_revision'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from psycopg import AsyncConnection, Connection, Error, OperationalError

from ..ops import Op, Row, Stmt
from ..statements.queries import retry_safe
from ..telemetry.activity import Activity

__all__ = ["OpRun"]

T = TypeVar("T")


class OpRun(Generic[T]):
    """An op in a driver's hands, and whether it may start over on another connection.

    Creating one runs the op to its first statement (no I/O, so a bad argument
    fails before a connection is taken); `StopIteration` means it needed none.
    The driver executes the statement, then gives the op its rows (`send`) or
    its error (`throw`), which return the next statement. A connection lost
    while the first statement runs leaves the op untouched: with a pool, and a
    first statement marked `retry: safe` in its SQL header, `throw` raises the
    error without giving it to the op, `may_retry` says yes, and the driver runs
    `again()` once, on another connection. An op that only reads passes
    `restart` (a function that makes it anew): then a connection lost at any of
    its statements starts it over from the first. An `activity`
    (`pgcheckpoint.telemetry`) hears of each statement and its outcome.

    Example:
        >>> def op():
        ...     rows = yield Stmt("schema_revision", fetch=True)
        ...     return rows
        >>> OpRun(op(), pooled=True).first.name
        'schema_revision'
    """

    __slots__ = ("activity", "first", "op", "pooled", "restart", "retried", "started")

    def __init__(
        self,
        op: Op[T],
        *,
        pooled: bool = False,
        restart: Callable[[], Op[T]] | None = None,
        activity: Activity | None = None,
    ) -> None:
        self.op = op
        self.pooled = pooled
        self.restart = restart
        self.activity = activity
        self.first = next(op)
        self.started = False  # the op has seen the outcome of a statement
        self.retried = False
        if activity is not None:
            activity.starting(self.first)

    def send(self, rows: list[Row]) -> Stmt:
        self.started = True
        activity = self.activity
        if activity is None:
            return self.op.send(rows)
        activity.finished(rows)
        stmt = self.op.send(rows)
        activity.starting(stmt)
        return stmt

    def throw(self, exc: Error, conn: Connection[Any] | AsyncConnection[Any]) -> Stmt:
        activity = self.activity
        if activity is not None:
            activity.finished(None, exc)
        if self.may_retry(exc, conn):
            raise exc
        self.started = True
        stmt = self.op.throw(exc)
        if activity is not None:
            activity.starting(stmt)
        return stmt

    def may_retry(self, exc: BaseException, conn: Connection[Any] | AsyncConnection[Any]) -> bool:
        """Whether `exc`, raised on `conn`, lets the op start over on another connection."""
        lost = (
            self.pooled
            and not self.retried
            and isinstance(exc, OperationalError)
            and conn.closed  # lost, not a statement that failed on a live session
        )
        if not lost:
            return False
        if self.restart is not None:
            return True
        return not self.started and retry_safe(self.first.name)

    def again(self) -> OpRun[T]:
        """What to run on the next connection, once: this run, or the op made anew.

        An op that has seen no outcome yet runs from its first statement; one that
        has goes through `restart`, which raises StopIteration if the new op needs
        no statement.
        """
        if self.activity is not None:
            self.activity.retrying()
        if self.started and self.restart is not None:
            self.op.close()
            run = OpRun(
                self.restart(), pooled=self.pooled, restart=self.restart, activity=self.activity
            )
        else:
            run = self
            if self.activity is not None:
                self.activity.starting(self.first)
        run.retried = True
        return run

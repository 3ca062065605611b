"""What an operation is: statements yielded, rows received, no I/O.

An `Op` is a generator. It yields `Stmt`s (a statement of `sql/queries/` by
name, with its parameters), receives the rows of each, and returns the
operation's result. A statement that fails raises its psycopg error at the
op's `yield`, where the op may handle it. A `Sweep` yields whole ops, each run
in a transaction of its own, and receives each op's result (or its error).
`PostgresSaver.run(op)` / `run_each(sweep)` and their async twins are the one
way to run either; `OpRun` holds the rule for starting an op over after a lost
connection.

Example:
    >>> from pgcheckpoint.ops import Stmt
    >>> Stmt("thread_heads", {"thread_ids": ["t1"]}, fetch=True).name
    'thread_heads'
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from psycopg import AsyncConnection, Connection, Error, OperationalError

from .arrays import TextArray
from .queries import retry_safe

if TYPE_CHECKING:
    from .telemetry import Activity

__all__ = [
    "MAX_CHAIN_DEPTH",
    "On",
    "Op",
    "OpRun",
    "Row",
    "Stmt",
    "Sweep",
    "checkpoint_keys",
    "row_key",
]

T = TypeVar("T")
Row = dict[str, Any]

# Bounds a parent-chain walk; a real chain is far shorter (DeltaChannel
# snapshots at least every 5,000 super-steps), so this only stops a cycle.
MAX_CHAIN_DEPTH = 1_000_000


@dataclass(frozen=True, slots=True)
class Stmt:
    """One named statement to run, with its parameters.

    Attributes:
        name: The statement's name in `sql/queries/`.
        params: Named parameters.
        fetch: Whether the operation needs the rows back.
        count: Whether it needs only how many rows the statement affected (an
            INSERT without RETURNING): it gets one empty row per row, and no row
            is sent back or decoded.

    Example:
        >>> Stmt("delete_thread", {"thread_id": "t1"}).fetch
        False
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    fetch: bool = False
    count: bool = False


Op = Generator[Stmt, list[Row], T]


@dataclass(frozen=True, slots=True)
class On:
    """An op a sweep runs on another saver: the importer reads its source this way.

    Attributes:
        saver: The saver (sync or async, like the one running the sweep) to run it on.
        op: The op.

    Example:
        >>> On(source_saver, read_page_op(...))  # doctest: +SKIP
    """

    saver: Any
    op: Op[Any]


# What a sweep yields (an op, or an op for another saver), what it receives
# back (each op's result), and what it returns.
Sweep = Generator["Op[Any] | On", Any, T]


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


def checkpoint_keys(rows: Sequence[Row], *, thread_id: str | None = None) -> dict[str, Any]:
    """The parameters of a statement about a set of checkpoints: their keys as three
    parallel arrays, and the bound of a parent-chain walk (`delete_checkpoints`,
    `measure_checkpoints`, `rebuild_dependencies`, `listed_values`).

    `thread_id` names the thread of rows that do not carry it.

    Example:
        >>> checkpoint_keys([{"checkpoint_ns": "", "checkpoint_id": "c1"}], thread_id="t")[
        ...     "thread_ids"]
        ['t']
    """
    return {
        "thread_ids": TextArray(
            [r["thread_id"] for r in rows] if thread_id is None else [thread_id] * len(rows)
        ),
        "checkpoint_nss": TextArray([r["checkpoint_ns"] for r in rows]),
        "checkpoint_ids": TextArray([r["checkpoint_id"] for r in rows]),
        "max_depth": MAX_CHAIN_DEPTH,
    }


def row_key(row: Row) -> tuple[str, str, str]:
    """A checkpoint row's key: (thread_id, checkpoint_ns, checkpoint_id).

    Example:
        >>> row_key({"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"})
        ('t', '', 'c')
    """
    return (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])

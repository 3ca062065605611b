"""What a driver reports of the operation it runs: the `Activity`, and the log context.

Every operation of a saver runs through its driver's `run` or `run_each`,
which enters an `Activity` around it: the operation's name and the statement
it is at. Each record of the `pgcheckpoint` logger carries both, as
`pgcheckpoint_operation` and `pgcheckpoint_statement`. The core counts what it
does (`note`, `note_cache`, `note_values`) on the current activity; a traced
activity (`pgcheckpoint.telemetry.otel`) records it on its span.

Example:
    >>> from pgcheckpoint.telemetry.activity import Activity, current_activity
    >>> with Activity("put") as activity:
    ...     current_activity() is activity
    True
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from ..ops import Row, Stmt

__all__ = [
    "Activity",
    "current_activity",
    "log_context",
    "logger",
    "note",
    "note_cache",
    "note_values",
    "operation_name",
    "start_listening",
]

# The one logger of the library (the CLI prints; everything else logs here).
logger = logging.getLogger("pgcheckpoint")

_CURRENT: ContextVar[Activity | None] = ContextVar("pgcheckpoint_activity", default=None)


def operation_name(subject: Any) -> str:
    """The name of the operation an op or sweep generator performs.

    The generator function's name without a leading `_` and its `_op` or
    `_sweep` suffix, so `put_op` is `put`; a driver passes a name where the
    public one differs.

    Example:
        >>> from pgcheckpoint.core.deletes import delete_thread_op
        >>> from pgcheckpoint.core.state import SaverState
        >>> operation_name(delete_thread_op(SaverState(), "t1"))
        'delete_thread'
    """
    code = getattr(subject, "gi_code", None)
    if code is None:
        return "operation"
    name: str = code.co_name.lstrip("_")
    for suffix in ("_op", "_sweep"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


class Activity:
    """An operation in progress: its name, and the statement it is at.

    Drivers enter one around each operation (`observe`) and tell it what
    happens; this one only keeps what log records need, a traced one
    (`pgcheckpoint.telemetry.otel`) measures the rest.

    Attributes:
        statement: The name of the statement last started, or None (only its
            name: an activity outlives its op in copied contexts, and must not
            keep the op's parameters alive).
        parent: The activity this one runs inside (a sweep's), or None.

    Example:
        >>> with Activity("put") as activity:
        ...     current_activity() is activity
        True
    """

    __slots__ = ("_name", "_subject", "_token", "parent", "statement")

    def __init__(self, name: str | None = None, subject: Any = None) -> None:
        self._name = name
        self._subject = subject
        self.statement: str | None = None
        self.parent: Activity | None = None

    @property
    def operation(self) -> str:
        """The operation's name (`put`, `get_tuple`, `prune_older_than`...)."""
        if self._name is None:
            self._name = operation_name(self._subject)
        return self._name

    def __enter__(self) -> Activity:
        self.parent = _CURRENT.get()
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            _CURRENT.reset(self._token)
        except ValueError:  # left in another context than it was entered in
            _CURRENT.set(self.parent)
        if self.parent is not None and self.statement is not None:
            # a sweep's log record names the statement its last op was at
            self.parent.statement = self.statement

    # What the drivers report; a traced activity records it.

    def connected(self, conn: Any, *, atomic: bool, pipelined: bool) -> None:
        """The op got a connection (again, after a retry)."""

    def starting(self, stmt: Stmt) -> None:
        """The op hands the driver its next statement."""
        self.statement = stmt.name

    def finished(self, rows: list[Row] | None, exc: BaseException | None = None) -> None:
        """The current statement returned `rows`, or raised `exc`."""

    def retrying(self) -> None:
        """The op lost its connection and runs once more on another."""

    def note(self, key: str, count: int) -> None:
        """Count something the core did (a cache hit, a value stored as a delta)."""

    def set(self, key: str, value: str | int | float | bool) -> None:
        """Describe the operation: an attribute of its span."""


def current_activity() -> Activity | None:
    """The activity of the operation running in this context, if any.

    Example:
        >>> current_activity() is None
        True
    """
    return _CURRENT.get()


# Set once any telemetry sends something, so `note` skips its work until then.
_listening = False


def start_listening() -> None:
    """Something records what operations note from now on: `note` stops skipping its work.

    Example:
        >>> start_listening()  # doctest: +SKIP
    """
    global _listening
    _listening = True


def note(key: str, count: int = 1) -> None:
    """Count, on the current operation's span, something the core did.

    Cheap when nothing listens: the core calls it on its hot paths.

    Example:
        >>> note("pgcheckpoint.cache.seed.hits")
    """
    if _listening:
        activity = _CURRENT.get()
        if activity is not None:
            activity.note(key, count)


def note_cache(cache: str, *, hit: bool) -> None:
    """Count a lookup in one of the decoded-value caches (`seed`, `write`, `piece`).

    Example:
        >>> note_cache("seed", hit=True)
    """
    if _listening:
        note(f"pgcheckpoint.cache.{cache}.{'hits' if hit else 'misses'}")


def note_values(bases: Sequence[object]) -> None:
    """Count the channel values a put stored whole (no base) and as deltas on a base.

    Example:
        >>> note_values([None, "00000000000000000000000000000003.5"])
    """
    if _listening:
        delta = sum(base is not None for base in bases)
        note("pgcheckpoint.values.whole", len(bases) - delta)
        note("pgcheckpoint.values.delta", delta)


def log_context(operation: str, statement: str | None = None) -> dict[str, str | None]:
    """The `extra` of a record logged outside the operation it is about.

    Example:
        >>> extra = log_context("lock_thread", "unlock_thread")
        >>> logger.warning("the lock's connection broke", extra=extra)  # doctest: +SKIP
    """
    return {"pgcheckpoint_operation": operation, "pgcheckpoint_statement": statement}


class _ActivityFilter(logging.Filter):
    """Puts the current operation and statement on each record of the `pgcheckpoint` logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        activity = _CURRENT.get()
        if not hasattr(record, "pgcheckpoint_operation"):
            record.pgcheckpoint_operation = None if activity is None else activity.operation
        if not hasattr(record, "pgcheckpoint_statement"):
            record.pgcheckpoint_statement = None if activity is None else activity.statement
        return True


if not any(isinstance(f, _ActivityFilter) for f in logger.filters):
    logger.addFilter(_ActivityFilter())

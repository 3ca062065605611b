"""What a driver reports of the operation it runs: the `Activity`, and the log context.

Every operation of a saver runs through its driver's `run` or `run_each`,
which enters an `Activity` around it: the operation's name and the statement
it is at. Each record of the `pgcheckpoint` logger carries both, as
`pgcheckpoint_operation` and `pgcheckpoint_statement`. The core counts what it
does (`note`, `note_cache`, `note_values`) on the current activity; a traced
activity (`pgcheckpoint.telemetry.otel`) records it on its span.

No record names a thread, checkpoint, task or value unless the operation's
saver has `Telemetry(thread_ids=True)` (or `log_context` says so): a record's
message is constant text, and of its arguments only numbers, `Plain` text and
exception types are shown; every other argument, and a traceback, is
withheld.

Example:
    >>> from pgcheckpoint.telemetry.activity import Activity, current_activity
    >>> with Activity("put") as activity:
    ...     current_activity() is activity
    True
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from ..ops import Row, Stmt
from .exceptions import type_name

__all__ = [
    "WITHHELD",
    "Activity",
    "Plain",
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
        thread_ids: Whether what is recorded of it may name threads,
            checkpoints, tasks and values (`Telemetry(thread_ids=True)`).

    Example:
        >>> with Activity("put") as activity:
        ...     current_activity() is activity
        True
    """

    __slots__ = ("_name", "_subject", "_token", "parent", "statement", "thread_ids")

    def __init__(
        self, name: str | None = None, subject: Any = None, *, thread_ids: bool = False
    ) -> None:
        self._name = name
        self._subject = subject
        self.statement: str | None = None
        self.parent: Activity | None = None
        self.thread_ids = thread_ids

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


def log_context(
    operation: str, statement: str | None = None, *, thread_ids: bool = False
) -> dict[str, str | bool | None]:
    """The `extra` of a record logged outside the operation it is about.

    `thread_ids`: the saver's `Telemetry(thread_ids=True)`, so the record
    may show the arguments that name a thread (else they are withheld).

    Example:
        >>> extra = log_context("lock_thread", "unlock_thread")
        >>> logger.warning("the lock's connection broke", extra=extra)  # doctest: +SKIP
    """
    return {
        "pgcheckpoint_operation": operation,
        "pgcheckpoint_statement": statement,
        "pgcheckpoint_thread_ids": thread_ids,
    }


class Plain(str):
    """Text that names no thread, checkpoint, task or value: a log record always shows it.

    For the arguments of a record that are names the library chose or the
    application configured (a statement, a schema, a type, a command); any
    other string argument is withheld unless ids are on.

    Example:
        >>> logger.info("schema %r migrated", Plain("public"))  # doctest: +SKIP
    """

    __slots__ = ()


class _Withheld:
    """What a record shows for an argument it withholds."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<withheld>"

    __str__ = __repr__


WITHHELD = _Withheld()
# Arguments a record shows as they are: they cannot spell an id.
_SHOWN_TYPES = (int, float, bool, type(None), Plain)


def _shown(arg: object) -> object:
    if type(arg) in _SHOWN_TYPES:
        return arg
    if isinstance(arg, BaseException):
        return Plain(type_name(arg))
    return WITHHELD


def _withhold(record: logging.LogRecord) -> None:
    # With ids off, a record keeps its constant text, numbers, Plain text and
    # the types of exceptions: a design that has nothing to scrub, rather
    # than a search for every way an id can be escaped.
    if not isinstance(record.msg, str):  # an object logged as the message
        record.msg, record.args = "%s", (record.msg,)
    args = record.args
    if isinstance(args, tuple):
        record.args = tuple(_shown(arg) for arg in args)
    elif isinstance(args, Mapping):
        record.args = {key: _shown(value) for key, value in args.items()}
    if record.exc_info or record.exc_text or record.stack_info:
        exc = record.exc_info[1] if record.exc_info else None
        record.exc_info = record.exc_text = record.stack_info = None
        if exc is not None:
            record.msg += f" [{type_name(exc)}; traceback withheld]"


class _ActivityFilter(logging.Filter):
    """Puts the current operation and statement on each record of the `pgcheckpoint` logger.

    And withholds what may name a thread, unless the record's operation (or
    its `log_context`) says the saver records ids.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        activity = _CURRENT.get()
        if not hasattr(record, "pgcheckpoint_operation"):
            record.pgcheckpoint_operation = None if activity is None else activity.operation
        if not hasattr(record, "pgcheckpoint_statement"):
            record.pgcheckpoint_statement = None if activity is None else activity.statement
        shown = getattr(record, "pgcheckpoint_thread_ids", None)
        if shown is None:
            shown = activity is not None and activity.thread_ids
        if shown is not True:
            try:
                _withhold(record)
            except Exception:  # a record that cannot be made id-free is not sent as it is
                record.msg, record.args = "a pgcheckpoint log record was withheld", ()
                record.exc_info = record.exc_text = record.stack_info = None
        return True


if not any(isinstance(f, _ActivityFilter) for f in logger.filters):
    logger.addFilter(_ActivityFilter())

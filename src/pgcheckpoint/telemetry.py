"""What pgcheckpoint tells about its work: log context, and OpenTelemetry when it is there.

Every operation of a saver runs through its driver's `run` or `run_each`
(`pgcheckpoint.ops`), which wraps it in an `Activity`: the operation's name and
the statement it is at. Each record of the `pgcheckpoint` logger carries both,
as `pgcheckpoint_operation` and `pgcheckpoint_statement`.

When the `opentelemetry` package is installed (`pip install "pgcheckpoint[otel]"`)
and the application has configured a tracer or meter provider (the SDK), the
activity is a traced one (`pgcheckpoint.otel`): it records a span nested under
the caller's current span, and metrics. Without the package, nothing imports
it; with the API and no SDK configured, an operation costs a check of two
globals. Thread ids are personal data in many applications: they reach spans
only with `Telemetry(thread_ids=True)`.

Example:
    >>> import logging
    >>> logging.basicConfig(
    ...     format="%(levelname)s %(name)s [%(pgcheckpoint_operation)s/"
    ...     "%(pgcheckpoint_statement)s] %(message)s"
    ... )  # doctest: +SKIP
    >>> saver = PostgresSaver(pool, telemetry=Telemetry(thread_ids=True))  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .ops import Row, Stmt
    from .otel import Otel

__all__ = [
    "Activity",
    "Telemetry",
    "current_activity",
    "log_context",
    "logger",
    "note",
    "note_cache",
    "note_values",
    "observe",
    "operation_name",
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
        >>> from pgcheckpoint.core import SaverCore
        >>> operation_name(SaverCore().delete_thread_op("t1"))
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
    (`pgcheckpoint.otel`) measures the rest.

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


class Telemetry:
    """Where a saver's spans and metrics go, and whether they name threads.

    Args:
        thread_ids: Record the thread id on spans (`pgcheckpoint.thread_id`).
            Off by default: thread ids are personal data in many applications,
            and they are also removed from recorded exception messages.
        tracer_provider: An OpenTelemetry `TracerProvider`; default the global one.
        meter_provider: An OpenTelemetry `MeterProvider`; default the global one.

    Example:
        >>> from pgcheckpoint import PostgresSaver
        >>> saver = PostgresSaver(pool, telemetry=Telemetry(thread_ids=True))  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        thread_ids: bool = False,
        tracer_provider: Any = None,
        meter_provider: Any = None,
    ) -> None:
        self.thread_ids = thread_ids
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        # the pools of the savers using this, whose sizes the metrics report
        self.pools: weakref.WeakSet[Any] = weakref.WeakSet()
        self._otel: Otel | None = None

    def observe(
        self,
        subject: Any = None,
        name: str | None = None,
        *,
        schema: str | None = None,
        sweep: bool = False,
        thread_id: str | None = None,
    ) -> Activity:
        """The activity to enter around an operation: traced when something listens.

        Args:
            subject: The op or sweep generator, which names the operation.
            name: The operation's name, if not the generator's.
            schema: The Postgres schema it works in (for `db.namespace`).
            sweep: Work made of other operations (a sweep, a migration): its
                span is INTERNAL, theirs nest inside it.
            thread_id: The thread it works on, when its statements do not say.

        Example:
            >>> with Telemetry().observe(name="migrate") as activity:
            ...     activity.operation
            'migrate'
        """
        otel = self.otel()
        if otel is None:
            return Activity(name, subject)
        global _listening
        _listening = True
        return otel.activity(name, subject, schema=schema, sweep=sweep, thread_id=thread_id)

    def watch_pool(self, pool: Any) -> None:
        """Report `pool`'s connections (size, available, waiting) in the metrics.

        Example:
            >>> Telemetry().watch_pool(pool)  # doctest: +SKIP
        """
        self.pools.add(pool)

    def otel(self) -> Otel | None:
        """The OpenTelemetry side of this, when something listens; else None."""
        if _OTEL_MODULE is None:  # not installed
            return None
        otel = self._otel
        if otel is None:
            with _MAKING:  # once: its pool gauges are registered with the meter
                module = _otel_module()
                if module is None:
                    return None
                otel = self._otel
                if otel is None:
                    otel = self._otel = module.Otel(self)
        return otel if otel.listening() else None


# The `pgcheckpoint.otel` module once imported; None when opentelemetry is not installed.
_OTEL_MODULE: Any = ...
_MAKING = threading.Lock()


def _otel_module() -> Any:
    global _OTEL_MODULE
    if _OTEL_MODULE is ...:
        try:
            from . import otel
        except ImportError as exc:
            if (exc.name or "").partition(".")[0] != "opentelemetry":
                raise
            _OTEL_MODULE = None
        else:
            _OTEL_MODULE = otel
    return _OTEL_MODULE


DEFAULT_TELEMETRY = Telemetry()
# Set once any telemetry sends something, so `note` skips its work until then.
_listening = False


def observe(
    saver: Any,
    subject: Any = None,
    name: str | None = None,
    *,
    sweep: bool = False,
    thread_id: str | None = None,
) -> Activity:
    """The activity a driver enters around an operation of `saver`: `Telemetry.observe`.

    Args:
        saver: The saver (its `telemetry` and `schema`).
        subject: The op or sweep generator, which names the operation.
        name: The operation's name, if not the generator's.
        sweep: A sweep, whose ops get spans of their own inside its span.
        thread_id: The thread it works on, when its statements do not say.

    Example:
        >>> with observe(saver, storage_stats_op()) as activity:  # doctest: +SKIP
        ...     activity.operation
        'storage_stats'
    """
    telemetry: Telemetry = saver.telemetry
    return telemetry.observe(subject, name, schema=saver.schema, sweep=sweep, thread_id=thread_id)


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

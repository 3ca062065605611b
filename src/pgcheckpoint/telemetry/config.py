"""`Telemetry`: where a saver's spans and metrics go, and whether they name threads.

When the `opentelemetry` package is installed (`pip install "pgcheckpoint[otel]"`)
and the application has configured a tracer or meter provider (the SDK), the
activity a driver enters around each operation is a traced one
(`pgcheckpoint.telemetry.otel`): it records a span nested under the caller's
current span, and metrics. Without the package, nothing imports it; with the
API and no SDK configured, an operation costs a check of two globals. Thread
ids are personal data in many applications: they, the other ids and the
messages of exceptions (which may name them or quote a value) reach spans and
the `pgcheckpoint` logger's records only with `Telemetry(thread_ids=True)`.
Telemetry changes no call's outcome: a span processor that raises or blocks
is reported once in the log and worked around (`pgcheckpoint.telemetry.otel`).

Example:
    >>> import logging
    >>> logging.basicConfig(
    ...     format="%(levelname)s %(name)s [%(pgcheckpoint_operation)s/"
    ...     "%(pgcheckpoint_statement)s] %(message)s"
    ... )  # doctest: +SKIP
    >>> saver = PostgresSaver(pool, telemetry=Telemetry(thread_ids=True))  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInputError
from .activity import Activity, start_listening

if TYPE_CHECKING:
    from .otel import Otel

__all__ = ["DEFAULT_TELEMETRY", "Telemetry", "observe"]


class Telemetry:
    """Where a saver's spans and metrics go, and whether they name threads.

    Args:
        thread_ids: Record the thread id on spans (`pgcheckpoint.thread_id`),
            the message and stack trace of each exception a span records
            (they may name threads, checkpoints and tasks, or quote a value),
            and the ids in the `pgcheckpoint` logger's records. Off by
            default: thread ids are personal data in many applications; a
            span then records an exception's type and a fixed description,
            and a log record withholds every argument that could name one.
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
        if not isinstance(thread_ids, bool):
            # a truthy "no" from an environment variable would turn ids on
            raise InvalidInputError(
                f"thread_ids must be True or False, not {type(thread_ids).__name__}"
            )
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
            return Activity(name, subject, thread_ids=self.thread_ids)
        start_listening()
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


# The `pgcheckpoint.telemetry.otel` module once imported; None when opentelemetry is not installed.
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

"""OpenTelemetry spans and metrics of every saver operation: the one module that imports it.

`pgcheckpoint.telemetry.config` imports this module when an operation first runs, if
the `opentelemetry` package is installed (`pip install "pgcheckpoint[otel]"`),
and uses it while a tracer or meter provider is configured.

Spans: one per operation (`pgcheckpoint.put`, ...; kind CLIENT), one per
sweep (kind INTERNAL) around the spans of its ops, nested under the caller's
current span, with the attributes of OpenTelemetry's database conventions
(`db.namespace`, `db.query.summary`, `error.type`...) and pgcheckpoint's counts
(`pgcheckpoint.round_trips`, `.bytes_sent`, `.cache.piece.hits`...). Metrics
(meter `pgcheckpoint`): `pgcheckpoint.operation.duration` by operation and
outcome, byte, retry and error counters, the pools' sizes. docs/observability.md
lists each.

No id, and no exception's message, unless `Telemetry(thread_ids=True)`: with
ids off a span records an exception's type, a fixed description and its
frames (`pgcheckpoint.telemetry.exceptions`). Nothing OpenTelemetry raises
changes an operation's outcome: it is logged once per kind; a span processor
slower than `SLOW_SPAN_CALL` seconds makes the saver stop tracing (not metering).

Example:
    >>> from opentelemetry.sdk.trace import TracerProvider  # doctest: +SKIP
    >>> telemetry = Telemetry(tracer_provider=TracerProvider())  # doctest: +SKIP
    >>> saver = PostgresSaver(pool, telemetry=telemetry)  # doctest: +SKIP
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from time import perf_counter
from typing import Any, Protocol

from opentelemetry import context, metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.metrics import _internal as _metrics_internal
from opentelemetry.trace import SpanKind, Status, StatusCode
from psycopg.pq import TransactionStatus

from ..errors import DecryptionError, ThreadBusyError
from ..ops import Row, Stmt
from .activity import Activity, Plain, logger
from .exceptions import recorded_text, type_name

__all__ = ["Otel", "Traced"]


class Telemetry(Protocol):
    """What this module reads of a `pgcheckpoint.Telemetry` (it does not import that module)."""

    thread_ids: bool
    tracer_provider: Any
    meter_provider: Any
    pools: weakref.WeakSet[Any]


_MISSING: Any = object()
# Seconds; an operation takes from a fraction of a millisecond to seconds (sweeps).
DURATION_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
# Seconds a span processor may take to start or end a span. It runs on the
# caller's thread, so a slower one (an exporter waiting for its collector)
# would slow every operation as much: the saver stops tracing instead.
SLOW_SPAN_CALL = 1.0
# Statement parameters that name the thread of an op (`target_thread_id`: a copy's).
_THREAD_PARAMS = ("thread_id", "source_thread_id")
# The statement that waits for a thread's lock on purpose.
_LOCK_WAIT = "wait_thread_lock"
# The span of an activity that has none: every call a no-op.
_NO_SPAN: Any = trace.INVALID_SPAN

# What the log says, once per kind, of OpenTelemetry failing where the saver calls it.
_FAILURES = {
    "start": "a span processor or sampler raised %s when pgcheckpoint started a span: "
    "operations run without their spans while it does; fix or remove it (reported once)",
    "end": "a span processor raised %s when pgcheckpoint ended a span: operations go on, "
    "but their spans may not be exported; fix or remove it (reported once)",
    "record": "OpenTelemetry raised %s as a span was described; operations go on (reported once)",
    "metrics": "OpenTelemetry raised %s as a metric was recorded; operations go on (reported once)",
}


def _version() -> str:
    from .. import __version__

    return __version__


def _global_provider(module: Any, attr: str, getter: Any) -> Any:
    # The API's getter checks an environment variable at every call (a
    # microsecond, on every operation); the global it reads is set once and
    # never replaced, so it is read directly while it has this name.
    provider = getattr(module, attr, _MISSING)
    return getter() if provider is _MISSING else provider


def _sends(provider: Any) -> bool:
    # the API's own providers (proxies, no-ops) send nothing; an SDK's do
    return provider is not None and not type(provider).__module__.startswith(
        ("opentelemetry.trace", "opentelemetry.metrics")
    )


class Otel:
    """A `Telemetry`'s tracer and instruments, and whether its providers send anything.

    Attributes:
        tracing: False once a span processor took more than `SLOW_SPAN_CALL`
            seconds to start or end a span: operations record no spans from
            then on (their metrics still).

    Example:
        >>> Otel(Telemetry()).listening()  # doctest: +SKIP
        False
    """

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        version = _version()
        self.tracer = trace.get_tracer(
            "pgcheckpoint", version, tracer_provider=telemetry.tracer_provider
        )
        meter = metrics.get_meter("pgcheckpoint", version, meter_provider=telemetry.meter_provider)
        self.duration = meter.create_histogram(
            "pgcheckpoint.operation.duration",
            unit="s",
            description="Duration of pgcheckpoint operations",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.bytes_stored = meter.create_counter(
            "pgcheckpoint.bytes.stored", unit="By", description="Bytes of stored values sent"
        )
        self.bytes_read = meter.create_counter(
            "pgcheckpoint.bytes.read", unit="By", description="Bytes of stored values received"
        )
        self.retries = meter.create_counter(
            "pgcheckpoint.retries",
            unit="{operation}",
            description="Operations run again after a lost connection",
        )
        self.thread_busy = meter.create_counter(
            "pgcheckpoint.thread_busy",
            unit="{error}",
            description="Thread locks refused (ThreadBusyError)",
        )
        self.decryption_errors = meter.create_counter(
            "pgcheckpoint.decryption_errors",
            unit="{error}",
            description="Stored values that failed to decrypt (DecryptionError)",
        )
        _watch_pools(meter, telemetry)
        # read the providers the environment names, once (the API loads them lazily)
        if telemetry.tracer_provider is None:
            trace.get_tracer_provider()
        if telemetry.meter_provider is None:
            metrics.get_meter_provider()
        self._decided: bool | None = None
        # Both providers global, and their globals where this version of the API
        # keeps them: while neither is set, one look at each says no.
        self._globals = (
            telemetry.tracer_provider is None
            and telemetry.meter_provider is None
            and hasattr(trace, "_TRACER_PROVIDER")
            and hasattr(_metrics_internal, "_METER_PROVIDER")
        )
        self.tracing = True
        self._reported: set[str] = set()

    def listening(self) -> bool:
        """Whether a tracer or meter provider that sends something is configured."""
        decided = self._decided
        if decided is not None:
            return decided
        if (
            self._globals
            and trace._TRACER_PROVIDER is None  # type: ignore[attr-defined]
            and _metrics_internal._METER_PROVIDER is None
        ):
            return False
        tracer_provider = self.telemetry.tracer_provider
        if tracer_provider is None:
            tracer_provider = _global_provider(trace, "_TRACER_PROVIDER", trace.get_tracer_provider)
        meter_provider = self.telemetry.meter_provider
        if meter_provider is None:
            meter_provider = _global_provider(
                _metrics_internal, "_METER_PROVIDER", metrics.get_meter_provider
            )
        listening = _sends(tracer_provider) or _sends(meter_provider)
        if tracer_provider is not None and meter_provider is not None:
            self._decided = listening  # both set, for good
        return listening

    def activity(
        self,
        name: str | None,
        subject: Any,
        *,
        schema: str | None,
        sweep: bool,
        thread_id: str | None,
    ) -> Traced:
        """A traced activity of an operation (see `Telemetry.observe`)."""
        return Traced(self, name, subject, schema=schema, sweep=sweep, thread_id=thread_id)

    def failed(self, what: str, exc: Exception) -> None:
        """OpenTelemetry raised `exc` where the saver called it (`_FAILURES`): log it once."""
        if what in self._reported:
            return
        self._reported.add(what)
        # its traceback may quote a span's content: with ids on only
        shown = exc if self.telemetry.thread_ids else None
        logger.warning(_FAILURES[what], Plain(type_name(exc)), exc_info=shown)

    def took(self, what: str, seconds: float) -> None:
        """A span processor took `seconds` to `what` ("start", "end") a span."""
        if seconds <= SLOW_SPAN_CALL or not self.tracing:
            return
        self.tracing = False
        logger.warning(
            "a span processor took %.1f s to %s a span, on the thread of the operation: "
            "pgcheckpoint records no more spans with this Telemetry (its metrics go on); "
            "export through a BatchSpanProcessor, which does not block its caller",
            seconds,
            Plain(what),
        )


class Traced(Activity):
    """An activity that records a span and metrics.

    Nothing OpenTelemetry raises changes the operation's outcome, and the
    span's context is detached whatever happens (`Otel.failed`, `Otel.took`).

    Example:
        >>> with otel.activity("put", None, schema="public", sweep=False):  # doctest: +SKIP
        ...     pass
    """

    __slots__ = (
        "_ctx",
        "_initial",
        "_lock_wait",
        "_mark",
        "_names",
        "_namespace",
        "_notes",
        "_ops",
        "_otel",
        "_pipelined",
        "_received",
        "_retried",
        "_round_trips",
        "_rows",
        "_schema",
        "_sent",
        "_start",
        "_statements",
        "_stmt",
        "_sweep",
        "_thread_id",
        "span",
    )

    def __init__(
        self,
        otel: Otel,
        name: str | None,
        subject: Any,
        *,
        schema: str | None,
        sweep: bool,
        thread_id: str | None = None,
    ) -> None:
        super().__init__(name, subject, thread_ids=otel.telemetry.thread_ids)
        self._otel = otel
        self._schema = schema
        self._sweep = sweep
        self._names: dict[str, None] = {}
        self._notes: dict[str, int] = {}
        # The thread the span names, with ids on. lock_thread passes what it
        # was given (check_id takes ints too); anything else waits for the
        # statements, whose parameters the op has checked.
        self._thread_id: str | None = None
        if self.thread_ids and type(thread_id) in (str, int):
            self._thread_id = str(thread_id)
        self._namespace: str | None = None
        self._statements = self._rows = self._sent = self._received = self._round_trips = 0
        self._stmt: Stmt | None = None
        self._ops = 0
        self._lock_wait = 0.0
        self._pipelined = self._retried = False
        self._initial: dict[str, Any] = {}
        self.span: Any = None  # until entered; then _NO_SPAN when it records none
        self._ctx: Any = None  # the token of the span's context, once attached

    def __enter__(self) -> Traced:
        super().__enter__()
        otel = self._otel
        self.span = _NO_SPAN
        now = perf_counter()
        if otel.tracing:
            started = now
            try:
                span = otel.tracer.start_span(
                    f"pgcheckpoint.{self.operation}",
                    kind=SpanKind.INTERNAL if self._sweep else SpanKind.CLIENT,
                    attributes={
                        "db.system.name": "postgresql",
                        "db.operation.name": self.operation,
                        **self._initial,
                    },
                )
            except Exception as exc:
                otel.failed("start", exc)
            else:
                self.span = span
                self._ctx = context.attach(trace.set_span_in_context(span))
            now = perf_counter()
            otel.took("start", now - started)
        self._start = self._mark = now
        return self

    def connected(self, conn: Any, *, atomic: bool, pipelined: bool) -> None:
        info = conn.info
        where: dict[str, Any] = {}
        if self._schema is not None:
            where["db.namespace"] = self._namespace = f"{info.dbname}.{self._schema}"
        if info.host:
            where["server.address"], where["server.port"] = info.host, info.port
        try:
            self.span.set_attributes(where)
        except Exception as exc:
            self._otel.failed("record", exc)
        # Whether the driver opens a transaction (or a savepoint), as `_run_on`
        # decides; the counts below match libpq's protocol trace.
        idle = info.transaction_status == TransactionStatus.IDLE
        transaction = atomic or (not conn.autocommit and (pipelined or not idle))
        if pipelined:
            # the sync that ends the op, and in a pipeline a transaction's start
            # and end each wait for the server
            self._round_trips += 4 if transaction else 1
        elif transaction:
            self._round_trips += 2  # BEGIN and COMMIT, or a savepoint and its release
        self._pipelined = pipelined

    def starting(self, stmt: Stmt) -> None:
        self.statement = stmt.name
        self._stmt = stmt
        if self._thread_id is None and self.thread_ids:
            params = stmt.params
            for key in _THREAD_PARAMS:
                value = params.get(key)
                if isinstance(value, str):
                    self._thread_id = value
                    break

    def finished(self, rows: list[Row] | None, exc: BaseException | None = None) -> None:
        stmt, self._stmt = self._stmt, None  # its parameters are not kept past this
        if stmt is None:
            return
        now = perf_counter()
        if stmt.name == _LOCK_WAIT:
            self._lock_wait += now - self._mark
        self._mark = now
        self._statements += 1
        self._names[stmt.name] = None
        if not self._pipelined or stmt.fetch or stmt.count:
            self._round_trips += 1
        self._sent += _value_bytes(stmt.params.values())
        if rows:
            self._rows += len(rows)
            self._received += sum(_value_bytes(row.values()) for row in rows)

    def retrying(self) -> None:
        self._retried = True
        try:
            self.span.add_event("pgcheckpoint.retry")
        except Exception as exc:
            self._otel.failed("record", exc)

    def note(self, key: str, count: int) -> None:
        self._notes[key] = self._notes.get(key, 0) + count

    def set(self, key: str, value: str | int | float | bool) -> None:
        if key == "db.namespace":
            self._namespace = str(value)
        if self.span is None:  # not started yet: an attribute samplers see
            self._initial[key] = value
            return
        try:
            self.span.set_attribute(key, value)
        except Exception as exc:
            self._otel.failed("record", exc)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        duration = perf_counter() - self._start
        otel, span = self._otel, self.span
        error_type = None
        if exc is None:
            outcome = "ok"
        elif isinstance(exc, Exception):
            outcome, error_type = "error", type_name(exc)
        else:  # cancelled, interrupted: not the operation's failure
            outcome = "cancelled"
        try:
            if span is not _NO_SPAN:
                try:
                    self._set_attributes()
                    if exc is not None and error_type is not None:
                        self._record_error(exc, error_type)
                except Exception as failure:
                    otel.failed("record", failure)
            try:
                self._record_metrics(duration, outcome, error_type, exc)
            except Exception as failure:
                otel.failed("metrics", failure)
        finally:
            try:
                if span is not _NO_SPAN:
                    self._end(span)
            finally:
                if self._ctx is not None:
                    context.detach(self._ctx)
                parent = self.parent
                if isinstance(parent, Traced):
                    parent._ops += 1
                super().__exit__(exc_type, exc, tb)

    def _end(self, span: Any) -> None:
        otel = self._otel
        started = perf_counter()
        try:
            span.end()
        except Exception as failure:
            otel.failed("end", failure)
        otel.took("end", perf_counter() - started)

    def _set_attributes(self) -> None:
        span = self.span
        if self._sweep:
            if self._ops:
                span.set_attribute("pgcheckpoint.ops", self._ops)
        else:
            span.set_attributes(
                {
                    "db.query.summary": " ".join(self._names),
                    "db.response.returned_rows": self._rows,
                    "pgcheckpoint.statements": self._statements,
                    "pgcheckpoint.round_trips": self._round_trips,
                    "pgcheckpoint.bytes_sent": self._sent,
                    "pgcheckpoint.bytes_received": self._received,
                    "pgcheckpoint.retried": self._retried,
                }
            )
            if _LOCK_WAIT in self._names:
                span.set_attribute("pgcheckpoint.lock.wait_duration", self._lock_wait)
        if self._notes:
            span.set_attributes(self._notes)
        if self._thread_id is not None:  # only with ids on
            span.set_attribute("pgcheckpoint.thread_id", self._thread_id)

    def _record_error(self, exc: BaseException, error_type: str) -> None:
        # With ids off, nothing of the exception's text: its type, a fixed
        # description and the frames it came through. Its message may hold an
        # id in any escaping (repr, JSON, cut short), or a piece of a value.
        message, stack = recorded_text(exc, thread_ids=self.thread_ids)
        span = self.span
        span.add_event(
            "exception",
            {
                "exception.type": error_type,
                "exception.message": message,
                "exception.stacktrace": stack,
                "exception.escaped": "True",
            },
        )
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"))
        span.set_attribute("error.type", error_type)
        sqlstate = getattr(exc, "sqlstate", None)
        if isinstance(sqlstate, str) and len(sqlstate) == 5 and sqlstate.isalnum():
            span.set_attribute("db.response.status_code", sqlstate)

    def _record_metrics(
        self, duration: float, outcome: str, error_type: str | None, exc: BaseException | None
    ) -> None:
        otel = self._otel
        metric_attributes: dict[str, Any] = {
            "db.system.name": "postgresql",
            "db.operation.name": self.operation,
            "pgcheckpoint.outcome": outcome,
        }
        if self._namespace is not None:
            metric_attributes["db.namespace"] = self._namespace
        if error_type is not None:
            metric_attributes["error.type"] = error_type
        otel.duration.record(duration, metric_attributes)
        by_op = {"db.operation.name": self.operation}
        if self._sent:
            otel.bytes_stored.add(self._sent, by_op)
        if self._received:
            otel.bytes_read.add(self._received, by_op)
        if self._retried:
            otel.retries.add(1, by_op)
        if not self._sweep:  # a sweep's errors were counted in its ops
            if isinstance(exc, ThreadBusyError):
                otel.thread_busy.add(1, by_op)
            elif isinstance(exc, DecryptionError):
                otel.decryption_errors.add(1, by_op)


def _value_bytes(values: Iterable[Any]) -> int:
    total = 0
    for value in values:
        if isinstance(value, bytes | bytearray | memoryview):
            total += len(value)
        elif isinstance(value, list):  # an array of values
            for item in value:
                if isinstance(item, bytes | bytearray | memoryview):
                    total += len(item)
    return total


# -- pools ----------------------------------------------------------------------------

# Per meter provider (None: the global one), the telemetries whose pools it reports.
# Observable instruments are made once per meter: a second callback would be lost.
_POOL_WATCHERS: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Telemetry]] = (
    weakref.WeakKeyDictionary()
)
_GLOBAL_POOL_WATCHERS: weakref.WeakSet[Telemetry] = weakref.WeakSet()


def _watch_pools(meter: Any, telemetry: Telemetry) -> None:
    provider = telemetry.meter_provider
    if provider is None:
        watchers, new = _GLOBAL_POOL_WATCHERS, not _GLOBAL_POOL_WATCHERS
    else:
        found = _POOL_WATCHERS.get(provider)
        new = found is None
        watchers = _POOL_WATCHERS.setdefault(provider, weakref.WeakSet())
    watchers.add(telemetry)
    if not new:
        return

    def counts(options: CallbackOptions) -> Iterator[Observation]:
        for name, stats in _pool_stats(watchers).items():
            used = stats["pool_size"] - stats["pool_available"]
            pool = {"db.client.connection.pool.name": name}
            yield Observation(used, {**pool, "db.client.connection.state": "used"})
            yield Observation(
                stats["pool_available"], {**pool, "db.client.connection.state": "idle"}
            )

    def maximum(options: CallbackOptions) -> Iterator[Observation]:
        for name, stats in _pool_stats(watchers).items():
            yield Observation(stats["pool_max"], {"db.client.connection.pool.name": name})

    def waiting(options: CallbackOptions) -> Iterator[Observation]:
        for name, stats in _pool_stats(watchers).items():
            yield Observation(stats["requests_waiting"], {"db.client.connection.pool.name": name})

    meter.create_observable_up_down_counter(
        "db.client.connection.count",
        callbacks=[counts],
        unit="{connection}",
        description="Connections of the pool, by state",
    )
    meter.create_observable_up_down_counter(
        "db.client.connection.max",
        callbacks=[maximum],
        unit="{connection}",
        description="The most connections the pool may open",
    )
    meter.create_observable_up_down_counter(
        "db.client.connection.pending_requests",
        callbacks=[waiting],
        unit="{request}",
        description="Requests waiting for a connection of the pool",
    )


def _pool_stats(watchers: Iterable[Telemetry]) -> dict[str, dict[str, int]]:
    # Pools of one name (every pool `from_conn_string` opens is "pgcheckpoint")
    # are added up: two observations of one series would be one too many.
    pools = {id(pool): pool for telemetry in list(watchers) for pool in list(telemetry.pools)}
    totals: dict[str, dict[str, int]] = {}
    for pool in pools.values():
        if pool.closed:
            continue
        stats = pool.get_stats()
        total = totals.setdefault(str(pool.name), dict.fromkeys(_POOL_STATS, 0))
        for key in _POOL_STATS:
            total[key] += int(stats.get(key, 0))
    return totals


_POOL_STATS = ("pool_size", "pool_available", "pool_max", "requests_waiting")

"""OpenTelemetry spans and metrics of every saver operation: the one module that imports it.

`pgcheckpoint.telemetry.config` imports this module when an operation first runs, if
the `opentelemetry` package is installed (`pip install "pgcheckpoint[otel]"`),
and uses it while a tracer or meter provider is configured.

Spans: one per operation (`pgcheckpoint.put`, `pgcheckpoint.get_tuple`, ...;
kind CLIENT), and one per sweep (`pgcheckpoint.prune_older_than`, kind
INTERNAL) around the spans of its ops, nested under the caller's current span.
A statement span that `opentelemetry-instrumentation-psycopg` records nests
inside the span of its operation. Attributes, after OpenTelemetry's database
conventions: `db.system.name` ("postgresql"), `db.namespace`
("<database>.<schema>"), `db.operation.name`, `db.query.summary` (the names of
the statements run, each once, in order), `server.address`, `server.port`,
`db.response.returned_rows`, and on failure `error.type` and
`db.response.status_code` (the SQLSTATE); and pgcheckpoint's own:

- `pgcheckpoint.statements`, `pgcheckpoint.round_trips` (statements that waited
  for the server, plus BEGIN and COMMIT of a transaction the op opened; in a
  pipeline, the statements whose rows were read, the sync, and three for a
  transaction: the counts libpq's protocol trace shows);
- `pgcheckpoint.bytes_sent`, `pgcheckpoint.bytes_received`: bytes of stored
  values (bytea parameters and columns: checkpoints, metadata, channel values,
  writes);
- `pgcheckpoint.retried`: the op lost its connection and ran again on another;
- `pgcheckpoint.values.whole`, `pgcheckpoint.values.delta`: channel values a
  put stored whole, and as deltas on an earlier version;
- `pgcheckpoint.cache.seed.hits` / `.misses`, `pgcheckpoint.cache.write.hits` /
  `.misses`: decoded DeltaChannel values found in the caches, or decoded;
- `pgcheckpoint.cache.piece.hits` / `.misses`: pieces of stored lists (a full
  list, a delta) that `get_tuple` found decoded, or decoded;
- `pgcheckpoint.lock.wait_duration`: seconds `lock_thread` waited for the lock;
- `pgcheckpoint.thread_id`: only with `Telemetry(thread_ids=True)`; without
  it, the thread ids of the op are also cut out of recorded exception messages.

Metrics (meter `pgcheckpoint`): `pgcheckpoint.operation.duration` (histogram,
seconds, by `db.operation.name`, `pgcheckpoint.outcome` ok / error / cancelled,
`error.type`, `db.namespace`), the counters `pgcheckpoint.bytes.stored`,
`pgcheckpoint.bytes.read`, `pgcheckpoint.retries`, `pgcheckpoint.thread_busy`
(`ThreadBusyError`) and `pgcheckpoint.decryption_errors` (`DecryptionError`),
and for the pools of the savers: `db.client.connection.count` (by
`db.client.connection.state` idle / used), `db.client.connection.max` and
`db.client.connection.pending_requests`, by `db.client.connection.pool.name`.

Example:
    >>> from opentelemetry.sdk.trace import TracerProvider  # doctest: +SKIP
    >>> telemetry = Telemetry(tracer_provider=TracerProvider())  # doctest: +SKIP
    >>> saver = PostgresSaver(pool, telemetry=telemetry)  # doctest: +SKIP
"""

from __future__ import annotations

import traceback
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
from .activity import Activity

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
# Statement parameters that hold thread ids.
_THREAD_PARAMS = ("thread_id", "source_thread_id", "target_thread_id")
_REDACTED = "<thread_id>"
# The statement that waits for a thread's lock on purpose.
_LOCK_WAIT = "wait_thread_lock"


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


class Traced(Activity):
    """An activity that records a span and metrics.

    Example:
        >>> with otel.activity("put", None, schema="public", sweep=False):  # doctest: +SKIP
        ...     pass
    """

    __slots__ = (
        "_ctx",
        "_ids",
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
        super().__init__(name, subject)
        self._otel = otel
        self._schema = schema
        self._sweep = sweep
        self._names: dict[str, None] = {}
        self._notes: dict[str, int] = {}
        if thread_id is not None:
            thread_id = str(thread_id)  # lock_thread takes what check_id takes, ints too
        self._ids: set[str] = set() if thread_id is None else {thread_id}
        self._thread_id = thread_id
        self._namespace: str | None = None
        self._statements = self._rows = self._sent = self._received = self._round_trips = 0
        self._stmt: Stmt | None = None
        self._ops = 0
        self._lock_wait = 0.0
        self._pipelined = self._retried = False
        self._initial: dict[str, Any] = {}
        self.span: Any = None

    def __enter__(self) -> Traced:
        super().__enter__()
        self.span = self._otel.tracer.start_span(
            f"pgcheckpoint.{self.operation}",
            kind=SpanKind.INTERNAL if self._sweep else SpanKind.CLIENT,
            attributes={
                "db.system.name": "postgresql",
                "db.operation.name": self.operation,
                **self._initial,
            },
        )
        self._ctx = context.attach(trace.set_span_in_context(self.span))
        self._start = self._mark = perf_counter()
        return self

    def connected(self, conn: Any, *, atomic: bool, pipelined: bool) -> None:
        info = conn.info
        where: dict[str, Any] = {}
        if self._schema is not None:
            where["db.namespace"] = self._namespace = f"{info.dbname}.{self._schema}"
        if info.host:
            where["server.address"], where["server.port"] = info.host, info.port
        self.span.set_attributes(where)
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
        params = stmt.params
        for key in _THREAD_PARAMS:
            value = params.get(key)
            if isinstance(value, str):
                self._ids.add(value)
                if self._thread_id is None and key != "target_thread_id":
                    self._thread_id = value
        many = params.get("thread_ids")
        if isinstance(many, list):
            self._ids.update(t for t in many if isinstance(t, str))

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
        self.span.add_event("pgcheckpoint.retry")

    def note(self, key: str, count: int) -> None:
        self._notes[key] = self._notes.get(key, 0) + count

    def set(self, key: str, value: str | int | float | bool) -> None:
        if key == "db.namespace":
            self._namespace = str(value)
        if self.span is None:  # not started yet: an attribute samplers see
            self._initial[key] = value
        else:
            self.span.set_attribute(key, value)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        duration = perf_counter() - self._start
        span, otel = self.span, self._otel
        try:
            self._set_attributes()
            error_type = None
            if exc is None:
                outcome = "ok"
            elif isinstance(exc, Exception):
                outcome, error_type = "error", _type_name(exc)
                self._record_error(exc, error_type)
            else:  # cancelled, interrupted: not the operation's failure
                outcome = "cancelled"
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
        finally:
            span.end()
            context.detach(self._ctx)
            parent = self.parent
            if isinstance(parent, Traced):
                parent._ids |= self._ids
                parent._ops += 1
            super().__exit__(exc_type, exc, tb)

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
        if self._thread_id is not None and self._otel.telemetry.thread_ids:
            span.set_attribute("pgcheckpoint.thread_id", self._thread_id)

    def _record_error(self, exc: BaseException, error_type: str) -> None:
        span = self.span
        message = str(exc)
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if not self._otel.telemetry.thread_ids:
            ids = set(self._ids)
            for attr in ("thread_id", "thread_ids"):
                found = getattr(exc, attr, None)
                if isinstance(found, str):
                    ids.add(found)
                elif isinstance(found, list | tuple):
                    ids.update(t for t in found if isinstance(t, str))
            message, stack = _redact(message, ids), _redact(stack, ids)
        span.record_exception(
            exc,
            attributes={"exception.message": message, "exception.stacktrace": stack},
            escaped=True,
        )
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"))
        span.set_attribute("error.type", error_type)
        sqlstate = getattr(exc, "sqlstate", None)
        if isinstance(sqlstate, str):
            span.set_attribute("db.response.status_code", sqlstate)


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _redact(text: str, ids: Iterable[str]) -> str:
    for thread_id in sorted(ids, key=len, reverse=True):  # a longer id may hold a shorter one
        if thread_id:
            text = text.replace(thread_id, _REDACTED)
    return text


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

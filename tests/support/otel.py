"""OpenTelemetry's SDK in memory, for the tests of what savers record: spans, metrics, text.

`recording()` gives a `Telemetry` with providers of its own (an in-memory
span exporter and metric reader, more span processors if given), so the
process-wide providers, which the rest of the suite runs without, are never
set. `savers()` opens a saver of either driver on a pool with it.
`recorded_text()` is everything a span or a log record could show a reader,
for tests that look for an id in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.telemetry.config import Telemetry
from support.savers import SaverApi


@dataclass
class Recorded:
    """What the savers of a test sent: finished spans, and metrics on demand."""

    telemetry: Telemetry
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider

    def spans(self) -> list[ReadableSpan]:
        """pgcheckpoint's finished spans, oldest first."""
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith("pgcheckpoint.")]

    def named(self, operation: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == f"pgcheckpoint.{operation}"]

    def points(self, metric: str) -> list[Any]:
        """The data points of a metric, collected now."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found += list(m.data.data_points)
        return found

    def total(self, metric: str, **attributes: Any) -> float:
        """The sum of a counter's points (or a histogram's counts) that have `attributes`."""
        total = 0.0
        for point in self.points(metric):
            if all(point.attributes.get(k) == v for k, v in attributes.items()):
                total += point.count if hasattr(point, "count") else point.value
        return total


@contextlib.contextmanager
def recording(
    *,
    processors: Iterable[SpanProcessor] = (),
    exporter: SpanExporter | None = None,
    thread_ids: bool = False,
) -> Iterator[Recorded]:
    """A `Telemetry` whose spans and metrics end in memory.

    The in-memory span processor comes first, then `exporter` (one that
    fails, say) behind a `SimpleSpanProcessor`, then `processors`: a span
    one of them refuses still reaches memory once it has ended.
    """
    memory = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    if exporter is not None:
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    for processor in processors:
        tracer_provider.add_span_processor(processor)
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(
        thread_ids=thread_ids, tracer_provider=tracer_provider, meter_provider=meter_provider
    )
    try:
        yield Recorded(telemetry, memory, reader, tracer_provider)
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()


class Api(SaverApi):
    """`SaverApi` plus the thread lock, which it does not map."""

    async def lock(self, thread_id: Any, *, timeout: float | None = None) -> None:
        """Take and release the thread's lock."""
        await self.holding(thread_id, lambda lock: None, timeout=timeout)

    async def holding(self, thread_id: Any, inside: Any, *, timeout: float | None = None) -> None:
        """Call `inside(lock)` (sync, on a thread of its own) while the thread's lock is held."""
        if self.is_async:
            async with self.saver.lock_thread(thread_id, timeout=timeout) as lock:
                await asyncio.to_thread(inside, lock)
            return

        def hold() -> None:
            with self.saver.lock_thread(thread_id, timeout=timeout) as lock:
                inside(lock)

        await asyncio.to_thread(hold)


@contextlib.asynccontextmanager
async def savers(
    driver: str, dsn: str, telemetry: Telemetry, *, threaded: bool = True, **options: Any
) -> AsyncIterator[Api]:
    """An `Api` over a pool of 4 (`min_size=1`, no check) of `driver`.

    `threaded`: a sync saver's calls run in worker threads (each in a copy of
    the test's context); without, on the test's own thread and context.
    """
    settings: dict[str, Any] = {"min_size": 1, "max_size": 4, "name": "telemetry-test"}
    if driver == "sync":
        with ConnectionPool(dsn, open=True, **settings) as pool:
            yield Api(PostgresSaver(pool, telemetry=telemetry, **options), threaded=threaded)
        return
    async with AsyncConnectionPool(dsn, open=False, **settings) as apool:
        yield Api(AsyncPostgresSaver(apool, telemetry=telemetry, **options), threaded=threaded)


def all_text(span: ReadableSpan) -> str:
    """Every attribute value of a span and of its events, its name and status, as one string."""
    values = [str(v) for v in (span.attributes or {}).values()]
    for event in span.events:
        values += [event.name] + [str(v) for v in (event.attributes or {}).values()]
    return "\n".join(values + [span.name, span.status.description or ""])


_FORMATTER = logging.Formatter()
# attributes every record has, whose values the record's creation set (the
# message and its arguments are looked at formatted)
_RECORD_BASICS = {"msg", "args", "exc_info", "exc_text", "stack_info", "message"}


def record_text(record: logging.LogRecord) -> str:
    """What a handler could show of a record: formatted, traceback included, and its extras."""
    extras = [f"{k}={v!s}" for k, v in vars(record).items() if k not in _RECORD_BASICS]
    return "\n".join([_FORMATTER.format(record), *extras])

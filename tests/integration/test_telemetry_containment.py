"""Telemetry changes no call's outcome: span processors and exporters that raise or block.

A span processor runs on the thread of the operation that starts or ends a
span. Whatever it does, the call returns what it would without telemetry,
the caller's span is current again after it, the next call nests where it
should, and the log says so once, not once per call.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config
from support.checkpoints import with_values

from pgcheckpoint import PostgresSaver
from pgcheckpoint.telemetry.activity import current_activity

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from support.otel import Recorded, recording, savers

from pgcheckpoint.telemetry import otel as otel_module

DRIVERS = ("sync", "async")
SECRET = "alice@example.com"  # in the processors' messages: the log must not repeat them
BLOCKS = 1.2  # seconds, more than a processor may take (pgcheckpoint's SLOW_SPAN_CALL)


class Raising(SpanProcessor):
    """A span processor that raises when a span of pgcheckpoint's starts, or when one ends."""

    def __init__(self, when: str) -> None:
        self.when = when
        self.calls = 0

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        self._called("start", span)

    def on_end(self, span: ReadableSpan) -> None:
        self._called("end", span)

    def _called(self, when: str, span: ReadableSpan) -> None:
        if when == self.when and span.name.startswith("pgcheckpoint."):
            self.calls += 1
            raise RuntimeError(f"processor down for {SECRET!r}")


class Slow(SpanProcessor):
    """A span processor that blocks for `BLOCKS` seconds on the first span it ends."""

    def __init__(self) -> None:
        self.calls = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.calls += 1
        if self.calls == 1:
            time.sleep(BLOCKS)


class FailingExporter(SpanExporter):
    """An exporter whose collector is down."""

    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise ConnectionError(f"collector unreachable, dropping {SECRET!r}")


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "pgcheckpoint" and r.levelno >= logging.WARNING]


async def three_puts(otel: Recorded, driver: str, dsn: str) -> tuple[list[Any], Any]:
    """Three puts and a read in an application's span, on the test's own thread and context.

    Returns the configs the puts returned and the application's span; checks
    that, after each call, that span is current again and no activity is.
    """
    tracer = otel.tracer_provider.get_tracer("the application")
    configs = []
    async with savers(driver, dsn, otel.telemetry, threaded=False) as api:
        with tracer.start_as_current_span("request") as request:
            for turn in range(3):
                checkpoint, versions = with_values({"items": [turn]})
                config = generate_config(f"contained-{uuid.uuid4()}")
                configs.append(await api.put(config, checkpoint, {}, versions))
                assert trace.get_current_span() is request
                assert current_activity() is None
            assert await api.get_tuple(configs[-1]) is not None
            assert trace.get_current_span() is request
    return configs, request


def stored(dsn: str, configs: list[Any]) -> bool:
    """Whether every checkpoint of `configs` was committed, as a saver without telemetry sees."""
    with PostgresSaver.from_conn_string(dsn) as plain:
        return all(plain.get_tuple(c) is not None for c in configs)


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_processor_raising_as_spans_end_changes_no_outcome(
    db_dsn: str, driver: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    processor = Raising("end")
    with recording(processors=[processor]) as otel:
        configs, request = await three_puts(otel, driver, db_dsn)
    assert stored(db_dsn, configs)
    assert processor.calls >= 4  # the three puts and the read
    # every operation nests under the application's span, none under a dead one
    spans = otel.spans()
    assert [s.name for s in spans if s.name == "pgcheckpoint.put"] == ["pgcheckpoint.put"] * 3
    assert all(s.parent and s.parent.span_id == request.get_span_context().span_id for s in spans)
    (warning,) = warnings_of(caplog)
    assert "span processor raised RuntimeError" in warning.getMessage()
    assert SECRET not in caplog.text


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_processor_raising_as_spans_start_changes_no_outcome(
    db_dsn: str, driver: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    processor = Raising("start")
    with recording(processors=[processor]) as otel:
        configs, _ = await three_puts(otel, driver, db_dsn)
        assert stored(db_dsn, configs)
        assert processor.calls >= 4 and otel.spans() == []
        # the metrics go on
        assert otel.total("pgcheckpoint.operation.duration", **{"db.operation.name": "put"}) == 3
    (warning,) = warnings_of(caplog)
    assert "span processor or sampler raised RuntimeError" in warning.getMessage()
    assert SECRET not in caplog.text


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("processor", ["simple", "batch"])
async def test_an_exporter_that_raises_changes_no_outcome(
    db_dsn: str, driver: str, processor: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    exporter = FailingExporter()
    if processor == "simple":  # it exports on the operation's thread
        context = recording(exporter=exporter)
    else:
        context = recording(processors=[BatchSpanProcessor(exporter, schedule_delay_millis=10)])
    with context as otel:
        configs, _ = await three_puts(otel, driver, db_dsn)
        assert stored(db_dsn, configs)
        otel.tracer_provider.force_flush()
        assert exporter.calls >= 1
        assert len([s for s in otel.spans() if s.name == "pgcheckpoint.put"]) == 3
    # OpenTelemetry's processors log the exporter's failures; pgcheckpoint sees none
    assert warnings_of(caplog) == []


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_processor_that_blocks_makes_the_saver_stop_tracing(
    db_dsn: str, driver: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    processor = Slow()
    with recording(processors=[processor]) as otel:
        configs = []
        async with savers(driver, db_dsn, otel.telemetry) as api:
            for turn in range(3):
                checkpoint, versions = with_values({"items": [turn]})
                config = generate_config(f"contained-{uuid.uuid4()}")
                configs.append(await api.put(config, checkpoint, {}, versions))
        assert stored(db_dsn, configs)
        # the first span blocked the first put; no later call waits on the processor
        assert processor.calls == 1
        assert [s.name for s in otel.spans()] == ["pgcheckpoint.put"]
        assert otel.total("pgcheckpoint.operation.duration", **{"db.operation.name": "put"}) == 3
    (warning,) = warnings_of(caplog)
    assert "pgcheckpoint records no more spans with this Telemetry" in warning.getMessage()
    assert otel_module.SLOW_SPAN_CALL < BLOCKS

"""Spans and metrics of every saver operation, with OpenTelemetry's SDK in memory.

Each test hands its savers a `Telemetry` with providers of its own (an in-memory
span exporter and metric reader), so the process-wide providers, which the rest
of the suite runs without, are never set.
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config, generate_metadata
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from psycopg.conninfo import conninfo_to_dict
from support.chat import chat_graph
from support.checkpoints import with_values
from support.faults import WAIT, blocker, terminate_waiting
from support.savers import async_saver_in_thread

from pgcheckpoint import (
    AsyncPostgresSaver,
    DecryptionError,
    EncryptedSerde,
    PostgresSaver,
    ThreadBusyError,
)
from pgcheckpoint.core.locks import thread_lock_key
from pgcheckpoint.schema import migrate
from pgcheckpoint.telemetry.config import Telemetry

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.trace import SpanKind, StatusCode
from support.otel import Recorded, all_text, recording, savers

DRIVERS = ("sync", "async")

# the span of the once-per-saver check for the official saver's threads (pgcheckpoint.official)
OFFICIAL_CHECK = "pgcheckpoint.official_threads"


@pytest.fixture
def otel() -> Iterator[Recorded]:
    with recording() as recorded:
        yield recorded


def new_thread() -> str:
    return f"telemetry-{uuid.uuid4()}"


# -- a real graph: interrupt, then resume -------------------------------------------


class Refund(TypedDict):
    messages: Annotated[list[str], operator.add]
    decision: str


def refund_graph(checkpointer: Any) -> Any:
    def plan(state: Refund) -> dict[str, Any]:
        return {"messages": ["agent: refund 40 EUR? " + "x" * 600]}

    def approve(state: Refund) -> dict[str, Any]:
        decision = interrupt("approve the refund?")
        return {"messages": [f"human: {decision}"], "decision": decision}

    def pay(state: Refund) -> dict[str, Any]:
        return {"messages": [f"agent: paid ({state['decision']})"]}

    builder = StateGraph(Refund)
    builder.add_node("plan", plan)
    builder.add_node("approve", approve)
    builder.add_node("pay", pay)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "approve")
    builder.add_edge("approve", "pay")
    builder.add_edge("pay", END)
    return builder.compile(checkpointer=checkpointer)


async def run_refund(driver: str, dsn: str, telemetry: Telemetry, thread_id: str) -> Any:
    """The graph to its interrupt, then resumed under the thread's lock; the final state."""
    config: Any = {"configurable": {"thread_id": thread_id}}
    pool = {"min_size": 1, "max_size": 4}
    if driver == "sync":

        def run() -> Any:
            with PostgresSaver.from_conn_string(dsn, pool=pool, telemetry=telemetry) as saver:
                graph = refund_graph(saver)
                assert "__interrupt__" in graph.invoke({"messages": ["human: hi"]}, config)
                saver.resume(graph, config, "yes")
                return graph.get_state(config).values

        # contextvars (the current span) go with the call, as in a sync web server
        return await asyncio.to_thread(run)
    async with AsyncPostgresSaver.from_conn_string(dsn, pool=pool, telemetry=telemetry) as saver:
        graph = refund_graph(saver)
        assert "__interrupt__" in await graph.ainvoke({"messages": ["human: hi"]}, config)
        await saver.aresume(graph, config, "yes")
        return (await graph.aget_state(config)).values


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_graph_run_with_an_interrupt_and_a_resume_is_traced(
    otel: Recorded, db_dsn: str, driver: str
) -> None:
    thread_id = new_thread()
    tracer = otel.tracer_provider.get_tracer("the application")
    with tracer.start_as_current_span("request") as request:
        state = await run_refund(driver, db_dsn, otel.telemetry, thread_id)
    assert state["decision"] == "yes" and len(state["messages"]) == 4
    spans = otel.spans()
    operations = {s.attributes["db.operation.name"] for s in spans}
    assert {"put", "put_writes", "get_tuple", "lock_thread", "unlock_thread"} <= operations
    target = conninfo_to_dict(db_dsn)
    for span in spans:
        # every operation nests under the application's span, none under another
        assert span.context.trace_id == request.get_span_context().trace_id
        assert span.parent is not None
        assert span.parent.span_id == request.get_span_context().span_id
        assert span.kind == SpanKind.CLIENT
        assert span.status.status_code == StatusCode.UNSET
        attributes = span.attributes
        assert attributes["db.system.name"] == "postgresql"
        assert attributes["db.namespace"] == f"{target['dbname']}.public"
        assert attributes["server.address"] == target.get("host", "localhost")
        assert attributes["server.port"] == int(target.get("port", 5432))
        assert attributes["pgcheckpoint.statements"] >= 1
        assert attributes["pgcheckpoint.round_trips"] >= attributes["pgcheckpoint.statements"]
        assert attributes["pgcheckpoint.retried"] is False
        # thread ids are not recorded unless the application opts in
        assert "pgcheckpoint.thread_id" not in attributes
        assert thread_id not in all_text(span)
    puts = otel.named("put")
    assert all(s.attributes["db.query.summary"] == "put_checkpoint" for s in puts)
    assert all(s.attributes["pgcheckpoint.bytes_sent"] > 0 for s in puts)
    # the message list is stored whole first, then as what each step appended
    assert sum(s.attributes.get("pgcheckpoint.values.whole", 0) for s in puts) >= 1
    assert sum(s.attributes.get("pgcheckpoint.values.delta", 0) for s in puts) >= 1
    found = [s for s in otel.named("get_tuple") if s.attributes["db.response.returned_rows"]]
    assert found and all(s.attributes["pgcheckpoint.bytes_received"] > 0 for s in found)
    (lock,) = otel.named("lock_thread")
    assert lock.attributes["db.query.summary"] == "try_thread_lock thread_lock_check"
    assert "pgcheckpoint.lock.wait_duration" not in lock.attributes  # it did not wait

    for op in ("put", "put_writes", "get_tuple", "lock_thread"):
        assert otel.total("pgcheckpoint.operation.duration", **{"db.operation.name": op}) == len(
            otel.named(op)
        )
    outcomes = {
        p.attributes["pgcheckpoint.outcome"] for p in otel.points("pgcheckpoint.operation.duration")
    }
    assert outcomes == {"ok"}
    stored = otel.total("pgcheckpoint.bytes.stored", **{"db.operation.name": "put"})
    assert stored == sum(s.attributes["pgcheckpoint.bytes_sent"] for s in puts)
    assert otel.total("pgcheckpoint.bytes.read") > 0


@pytest.mark.parametrize("driver", DRIVERS)
async def test_the_thread_id_is_recorded_when_the_application_opts_in(
    otel: Recorded, db_dsn: str, driver: str
) -> None:
    thread_id = new_thread()
    otel.telemetry.thread_ids = True
    await run_refund(driver, db_dsn, otel.telemetry, thread_id)
    spans = otel.spans()
    assert spans
    for span in spans:
        if span.name == OFFICIAL_CHECK:
            continue  # the switch warning's check looks at every thread, names none
        assert span.attributes.get("pgcheckpoint.thread_id") == thread_id, span.name
    metrics = str(otel.reader.get_metrics_data())
    assert thread_id not in metrics  # a metric series per thread would be one too many


def test_the_async_savers_sync_methods_nest_under_the_callers_span(
    otel: Recorded, db_dsn: str
) -> None:
    tracer = otel.tracer_provider.get_tracer("the application")
    with async_saver_in_thread(db_dsn) as saver:
        saver.telemetry = otel.telemetry
        with tracer.start_as_current_span("request") as request:
            checkpoint, versions = with_values({"items": [1]})
            config = saver.put(generate_config(new_thread()), checkpoint, {}, versions)
            assert saver.get_tuple(config) is not None
    spans = otel.spans()
    # the first read of a saver also looks for the official saver's threads
    names = [s.name for s in spans if s.name != OFFICIAL_CHECK]
    assert names == ["pgcheckpoint.put", "pgcheckpoint.get_tuple"]
    assert all(s.parent and s.parent.span_id == request.get_span_context().span_id for s in spans)


# -- every operation has its span -----------------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
async def test_every_public_operation_has_a_span_named_after_it(
    otel: Recorded, db_dsn: str, driver: str
) -> None:
    source, copy = new_thread(), new_thread()
    async with savers(driver, db_dsn, otel.telemetry) as api:
        checkpoint, versions = with_values({"items": [1, 2, 3]})
        config = await api.put(generate_config(source), checkpoint, generate_metadata(), versions)
        await api.put_writes(config, [("items", [4])], "task-1")
        await api.get_tuple(config)
        await api.list(generate_config(source))
        await api.get_delta_channel_history(config=config, channels=["items"])
        await api.copy_thread(source, copy)
        await api.prune([copy], strategy="keep_latest")
        await api.delete_for_runs(["no-such-run"])
        await api.delete_thread(copy)
        await api.prune_keep_last(1)
    names = [s.name.removeprefix("pgcheckpoint.") for s in otel.spans()]
    for method in (
        "put",
        "put_writes",
        "get_tuple",
        "list",
        "get_delta_channel_history",
        "copy_thread",
        "prune",
        "delete_for_runs",
        "delete_thread",
        "prune_keep_last",
    ):
        assert method in names


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_sweep_span_holds_the_spans_of_its_ops(
    otel: Recorded, db_dsn: str, driver: str
) -> None:
    thread_id = new_thread()
    async with savers(driver, db_dsn, otel.telemetry) as api:
        config = generate_config(thread_id)
        for _ in range(3):
            checkpoint, versions = with_values({"items": [1]})
            config = await api.put(config, checkpoint, generate_metadata(), versions)
        report = await api.prune_keep_last(1)
    assert report.threads == 1 and report.checkpoints == 2
    (sweep,) = otel.named("prune_keep_last")
    assert sweep.kind == SpanKind.INTERNAL
    inside = [s for s in otel.spans() if s.parent and s.parent.span_id == sweep.context.span_id]
    assert inside and sweep.attributes["pgcheckpoint.ops"] == len(inside)
    assert all(s.kind == SpanKind.CLIENT for s in inside)


async def test_a_migration_has_a_span(otel: Recorded, empty_db_dsn: str) -> None:
    migrate.upgrade(empty_db_dsn, telemetry=otel.telemetry)
    (span,) = otel.named("migrate")
    database = conninfo_to_dict(empty_db_dsn)["dbname"]
    assert span.attributes["db.namespace"] == f"{database}.public"
    assert span.attributes["pgcheckpoint.migration.from"] == "base"
    assert span.attributes["pgcheckpoint.migration.to"] == "head"
    assert otel.total("pgcheckpoint.operation.duration", **{"db.operation.name": "migrate"}) == 1


@pytest.mark.parametrize("driver", DRIVERS)
async def test_the_pools_connections_are_reported(otel: Recorded, db_dsn: str, driver: str) -> None:
    async with savers(driver, db_dsn, otel.telemetry) as api:
        await api.get_tuple(generate_config(new_thread()))
        counts = {
            p.attributes["db.client.connection.state"]: p.value
            for p in otel.points("db.client.connection.count")
            if p.attributes["db.client.connection.pool.name"] == "telemetry-test"
        }
        (maximum,) = [p.value for p in otel.points("db.client.connection.max")]
        (waiting,) = [p.value for p in otel.points("db.client.connection.pending_requests")]
    assert set(counts) == {"idle", "used"} and counts["idle"] + counts["used"] >= 1
    assert (maximum, waiting) == (4, 0)


# -- failures -------------------------------------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_wrong_key_shows_in_the_span_and_the_metrics(
    otel: Recorded, db_dsn: str, driver: str
) -> None:
    thread_id = new_thread()
    right = EncryptedSerde(keys={"k1": bytes(range(32))})
    wrong = EncryptedSerde(keys={"k1": bytes(range(100, 132))})
    async with savers(driver, db_dsn, Telemetry(), serde=right) as writer:
        checkpoint, versions = with_values({"items": ["secret"]})
        config = await writer.put(generate_config(thread_id), checkpoint, {}, versions)
    async with savers(driver, db_dsn, otel.telemetry, serde=wrong) as reader:
        with pytest.raises(DecryptionError):
            await reader.get_tuple(config)
    (span,) = otel.named("get_tuple")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["error.type"] == "pgcheckpoint.errors.DecryptionError"
    (event,) = [e for e in span.events if e.name == "exception"]
    assert event.attributes["exception.type"] == "pgcheckpoint.errors.DecryptionError"
    # the message names the row and its thread: the span has the error's description instead
    assert event.attributes["exception.message"].startswith(
        "A stored value, or a column bound to it, could not be decrypted or authenticated."
    )
    assert "authentication failed" not in all_text(span) and thread_id not in all_text(span)
    assert otel.total("pgcheckpoint.decryption_errors", **{"db.operation.name": "get_tuple"}) == 1
    assert (
        otel.total(
            "pgcheckpoint.operation.duration",
            **{
                "db.operation.name": "get_tuple",
                "pgcheckpoint.outcome": "error",
                "error.type": "pgcheckpoint.errors.DecryptionError",
            },
        )
        == 1
    )


@pytest.mark.slow
@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_lost_connection_retried_shows_in_the_span_and_the_metrics(
    otel: Recorded, db_dsn: str, driver: str
) -> None:
    thread_id = new_thread()
    async with savers(driver, db_dsn, otel.telemetry) as api:
        checkpoint, versions = with_values({"items": [1, 2]})
        stored = await api.put(generate_config(thread_id), checkpoint, {}, versions)
        with blocker(db_dsn, "LOCK TABLE pgc_checkpoints IN ACCESS EXCLUSIVE MODE") as lock:
            reading = asyncio.ensure_future(api.get_tuple(stored))
            await terminate_waiting(db_dsn, set())
            lock.rollback()  # the read, run again on another connection, goes through
            tup = await asyncio.wait_for(reading, WAIT)
    assert tup is not None and tup.config == stored
    (span,) = otel.named("get_tuple")
    assert span.attributes["pgcheckpoint.retried"] is True
    assert [e.name for e in span.events] == ["pgcheckpoint.retry"]
    assert span.status.status_code == StatusCode.UNSET
    assert otel.total("pgcheckpoint.retries", **{"db.operation.name": "get_tuple"}) == 1
    assert (
        otel.total(
            "pgcheckpoint.operation.duration",
            **{"db.operation.name": "get_tuple", "pgcheckpoint.outcome": "ok"},
        )
        == 1
    )


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_busy_lock_shows_in_the_span_and_the_metrics(
    otel: Recorded, db_dsn: str, driver: str
) -> None:
    thread_id = new_thread()
    with psycopg.connect(db_dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (thread_lock_key(thread_id),))
        async with savers(driver, db_dsn, otel.telemetry) as api:
            with pytest.raises(ThreadBusyError):
                await api.lock(thread_id, timeout=0.2)
    (span,) = otel.named("lock_thread")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["error.type"] == "pgcheckpoint.errors.ThreadBusyError"
    assert span.attributes["db.query.summary"] == (
        "try_thread_lock wait_thread_lock thread_lock_holder"
    )
    assert span.attributes["pgcheckpoint.lock.wait_duration"] > 0
    assert thread_id not in all_text(span)
    assert otel.total("pgcheckpoint.thread_busy", **{"db.operation.name": "lock_thread"}) == 1
    assert (
        otel.total(
            "pgcheckpoint.operation.duration",
            **{"db.operation.name": "lock_thread", "pgcheckpoint.outcome": "error"},
        )
        == 1
    )


# -- alongside opentelemetry-instrumentation-psycopg ----------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
async def test_statement_spans_of_the_psycopg_instrumentation_nest_inside_ours(
    otel: Recorded, db_dsn: str, driver: str
) -> None:
    instrumentation = pytest.importorskip("opentelemetry.instrumentation.psycopg")
    instrumentor = instrumentation.PsycopgInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider, skip_dep_check=True)
    try:
        async with savers(driver, db_dsn, otel.telemetry) as api:
            checkpoint, versions = with_values({"items": [1, 2]})
            config = await api.put(generate_config(new_thread()), checkpoint, {}, versions)
            await api.list(config)
    finally:
        instrumentor.uninstrument()
    ours = {s.context.span_id: s for s in otel.spans()}
    statements = [s for s in otel.exporter.get_finished_spans() if s.context.span_id not in ours]
    assert statements
    for span in statements:
        assert span.parent is not None and span.parent.span_id in ours
    for op in ours.values():
        inside = [s for s in statements if s.parent.span_id == op.context.span_id]
        assert len(inside) == op.attributes["pgcheckpoint.statements"]


# -- what only pgcheckpoint knows: DeltaChannel caches ---------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
async def test_delta_channel_history_spans_count_the_decoded_values_found_cached(
    otel: Recorded, db_dsn: str, driver: str
) -> None:
    config: Any = {"configurable": {"thread_id": new_thread()}}
    async with savers(driver, db_dsn, otel.telemetry) as api:
        graph = chat_graph(api.saver, snapshot_frequency=10)
        for turn in range(4):
            update = {"messages": [f"human {turn}"], "turn": turn}
            if api.is_async:
                await graph.ainvoke(update, config)
            else:
                await asyncio.to_thread(graph.invoke, update, config)
    history = otel.named("get_delta_channel_history")
    assert history
    assert all(s.attributes["db.query.summary"].endswith("delta_channel_history") for s in history)
    hits = sum(s.attributes.get("pgcheckpoint.cache.write.hits", 0) for s in history)
    misses = sum(s.attributes.get("pgcheckpoint.cache.write.misses", 0) for s in history)
    # each turn decodes the writes it has not seen, and finds the others decoded
    assert misses >= 1 and hits >= 1

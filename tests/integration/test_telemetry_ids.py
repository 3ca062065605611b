"""No id reaches telemetry unless the application opts in, whatever the error and the escaping.

Hostile thread ids (quotes, backslashes, newlines, unicode, hundreds of
characters, and ids the saver refuses) go through every error path a saver
has: a value the serializer refuses in `put` and `put_writes`, a wrong key on
read, invalid input, a deleted parent, a busy lock, a lock whose connection
dies, a connection dropped under a write, and the warning about the official
saver's threads. With `Telemetry()` no form of any of those ids (as it is,
`repr`, JSON, unicode escapes, doubled backslashes, or any piece of it of
twelve characters) appears in a span's attributes, events or status, in a
metric, or in any log record; with `Telemetry(thread_ids=True)` they do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver
from support.checkpoints import config, with_values
from support.faults import WAIT, blocker, terminate_waiting

from pgcheckpoint import (
    DecryptionError,
    EncryptedSerde,
    InvalidInputError,
    MissingParentError,
    ThreadBusyError,
    UnserializableValueError,
)
from pgcheckpoint.core.locks import thread_lock_key

pytest.importorskip("opentelemetry.sdk")

from support.otel import Api, Recorded, all_text, record_text, recording, savers

DRIVERS = ("sync", "async")
RIGHT = EncryptedSerde(keys={"k1": bytes(range(32))})
WRONG = EncryptedSerde(keys={"k1": bytes(range(100, 132))})
# a piece of an id this long, anywhere, is a leak (a message cut short keeps a prefix)
PIECE = 12


def hostile_ids() -> list[str]:
    """Thread ids a saver stores, each unique to the run, as hard to recognise as can be."""
    token = uuid.uuid4().hex[:8]
    return [
        f"alice.{token}@example.com",
        f"CORP\\alice\\{token}",
        f'o\'brien "the" `boss` {token}',
        f"line one\nline two\r\tend {token}",
        f"ünïcødé 日本語 🙂\u200b {token}",
        f"long-{token}-" * 70,  # 980 characters, under the 1,024-byte limit
    ]


def refused_ids() -> list[Any]:
    """Ids the saver refuses: NUL, an unpaired surrogate, too long, a list."""
    token = uuid.uuid4().hex[:8]
    return [
        f"nul\x00{token}",
        f"half\ud800{token}",
        f"too-long-{token}-" * 120,
        [f"in-a-list-{token}"],
    ]


def task_of(thread_id: str) -> str:
    """A task id made of the thread's (task ids hold at most 255 bytes)."""
    return f"task of {thread_id[:100]}"


def forms(value: Any) -> set[str]:
    """The ways `value` can be spelled in text, and the pieces of each a leak could be cut to."""
    texts = [str(x) for x in value] if isinstance(value, list) else [str(value)]
    found: set[str] = set()
    for text in texts:
        found |= {
            text,
            repr(text)[1:-1],
            json.dumps(text)[1:-1],
            json.dumps(text, ensure_ascii=False)[1:-1],
            text.encode("unicode_escape").decode("ascii"),
            text.replace("\\", "\\\\"),
            text.encode("utf-8", "surrogatepass").decode("latin-1"),
        }
    pieces = set()
    for form in found:
        if len(form) > PIECE:
            pieces |= {form[i : i + PIECE] for i in range(0, len(form) - PIECE + 1, PIECE // 3)}
    return {f for f in found | pieces if f.strip()}


def leaks(text: str, values: list[Any]) -> list[str]:
    """The forms of `values` found in `text`."""
    return sorted({f for value in values for f in forms(value) if f in text})


async def error_paths(api: Api, reader: Api, dsn: str, thread_id: str) -> None:
    """Each error path of a saver, for one thread, each checked to have raised what it should."""
    task_id = task_of(thread_id)
    refused = {"items": [object()]}

    # a value the serializer refuses, in put and in put_writes
    checkpoint, versions = with_values(refused)
    with pytest.raises(UnserializableValueError):
        await api.put(config(thread_id), checkpoint, {}, versions)
    checkpoint, versions = with_values({"items": ["secret of " + thread_id]})
    stored = await api.put(config(thread_id), checkpoint, {"source": "input"}, versions)
    with pytest.raises(UnserializableValueError):
        await api.put_writes(stored, [("items", object())], task_id)

    # a wrong key
    with pytest.raises(DecryptionError):
        await reader.get_tuple(stored)
    with pytest.raises(DecryptionError):
        await reader.list(config(thread_id))

    # a parent that was deleted (a run's checkpoint, gone with its run)
    checkpoint, versions = with_values({"items": [1]})
    doomed = await api.put(config(thread_id), checkpoint, {"run_id": "doomed-run"}, versions)
    await api.delete_for_runs(["doomed-run"])
    checkpoint, versions = with_values({"items": [1]})
    with pytest.raises(MissingParentError):
        await api.put(doomed, checkpoint, {}, versions)

    # a lock another worker holds, then a lock whose connection dies while held
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (thread_lock_key(thread_id),))
        with pytest.raises(ThreadBusyError):
            await api.lock(thread_id, timeout=0.05)

    def kill(lock: Any) -> None:
        with psycopg.connect(dsn, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (lock.backend_pid,))

    await api.holding(thread_id, kill)

    # a connection dropped while a write waits (retried on another, or raised)
    checkpoint, versions = with_values({"items": [2]})
    with blocker(dsn, "LOCK TABLE pgc_checkpoints IN ACCESS EXCLUSIVE MODE") as table_lock:
        writing = asyncio.ensure_future(api.put(stored, checkpoint, {}, versions))
        await terminate_waiting(dsn, set())
        table_lock.rollback()
        with contextlib.suppress(psycopg.OperationalError):
            await asyncio.wait_for(writing, WAIT)


async def refused_paths(api: Api, thread_id: Any) -> None:
    """The calls that refuse an id before anything runs."""
    checkpoint, versions = with_values({"items": [1]})
    with pytest.raises(InvalidInputError):
        await api.put(config(thread_id), checkpoint, {}, versions)
    with pytest.raises(InvalidInputError):
        await api.get_tuple(config(thread_id))
    with pytest.raises(InvalidInputError):
        await api.put_writes(config(thread_id, str(uuid.uuid4())), [("items", 1)], "task")
    with pytest.raises(InvalidInputError):
        await api.delete_thread(thread_id)
    with pytest.raises(InvalidInputError):
        await api.lock(thread_id)


def official_threads(dsn: str, thread_ids: list[str]) -> None:
    """The official saver's tables, holding `thread_ids` (the saver warns, naming one)."""
    with OfficialSaver.from_conn_string(dsn) as official:
        official.setup()
        for thread_id in thread_ids:
            official.put(config(thread_id), empty_checkpoint(), {}, {})


async def run_every_path(driver: str, dsn: str, otel: Recorded) -> tuple[list[str], list[Any]]:
    valid, refused = hostile_ids(), refused_ids()
    official_threads(dsn, valid)
    telemetry = otel.telemetry
    async with (
        savers(driver, dsn, telemetry, serde=RIGHT) as api,
        savers(driver, dsn, telemetry, serde=WRONG) as reader,
    ):
        for thread_id in valid:
            await error_paths(api, reader, dsn, thread_id)
        for thread_id in refused:
            await refused_paths(api, thread_id)
    return valid, refused


def everything_recorded(otel: Recorded, caplog: pytest.LogCaptureFixture) -> str:
    spans = "\n".join(all_text(span) for span in otel.exporter.get_finished_spans())
    records = "\n".join(record_text(record) for record in caplog.records)
    return "\n".join([spans, str(otel.reader.get_metrics_data()), records])


@pytest.mark.parametrize("driver", DRIVERS)
async def test_no_form_of_an_id_reaches_spans_metrics_or_logs(
    db_dsn: str, driver: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgcheckpoint")
    with recording() as otel:
        valid, refused = await run_every_path(driver, db_dsn, otel)
        spans = otel.spans()
        text = everything_recorded(otel, caplog)
    assert leaks(text, valid + refused + [task_of(t) for t in valid]) == []
    # the paths were recorded: each error is on its span, by type only
    errors = {s.attributes.get("error.type") for s in spans}
    for error in (UnserializableValueError, DecryptionError, MissingParentError, ThreadBusyError):
        assert f"pgcheckpoint.errors.{error.__name__}" in errors
    assert "pgcheckpoint.errors.InvalidInputError" in errors
    messages = [r.getMessage() for r in caplog.records if r.name == "pgcheckpoint"]
    assert any("the connection holding the lock of thread <withheld>" in m for m in messages)
    assert any("e.g. <withheld>" in m for m in messages)  # the official saver's threads


@pytest.mark.parametrize("driver", DRIVERS)
async def test_with_ids_on_the_spans_and_logs_name_the_threads(
    db_dsn: str, driver: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgcheckpoint")
    with recording(thread_ids=True) as otel:
        valid, _ = await run_every_path(driver, db_dsn, otel)
        spans = otel.spans()
        text = everything_recorded(otel, caplog)
    assert all(leaks(text, [thread_id]) for thread_id in valid)  # what the other test looks for
    named = {s.attributes.get("pgcheckpoint.thread_id") for s in spans}
    assert set(valid) <= named
    messages = "\n".join(
        e.attributes["exception.message"] for s in spans for e in s.events if e.name == "exception"
    )
    for thread_id in valid:
        assert repr(thread_id) in messages  # the errors' own messages, as they are
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "pgcheckpoint")
    for thread_id in valid:
        assert f"the connection holding the lock of thread {thread_id!r}" in logged

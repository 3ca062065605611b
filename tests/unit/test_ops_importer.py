"""The importer (`import_sweep`, `LangGraphImporter`) fed the rows the official saver's
tables hold, without a database.

`Official` keeps a thread as `langgraph-checkpoint-postgres` stores it: its
`put` keeps primitive values inline in the checkpoint's JSONB and the others
as blobs (its own `_dump_blobs`), and `put_writes` stores writes with its own
`_dump_writes`. Each op of the sweep runs on a script of its own
(`support.sweeps`); an imported checkpoint is then read back by pgcheckpoint's
core from the `insert_copied_rows` parameters, as the table would return it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from langgraph.checkpoint.base import CheckpointTuple, get_serializable_checkpoint_metadata
from langgraph.checkpoint.conformance.test_utils import generate_metadata
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from langgraph.checkpoint.serde.types import TASKS
from langgraph.types import Send
from psycopg import errors as pg_errors
from support.ops import drive
from support.sweeps import Ran, Script, run_op, run_sweep

from pgcheckpoint import DecryptionError, EncryptedSerde, InvalidInputError
from pgcheckpoint.codec.labels import PLAINTEXT_LABEL, cipher_label
from pgcheckpoint.core.copies import COPIED_WRITE_COLUMNS
from pgcheckpoint.core.reads import get_tuple_op, load_tuple
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.maintenance.importer import (
    REQUIRED_SOURCE_MIGRATION,
    ImportStats,
    LangGraphImporter,
    SourceSchemaError,
    import_sweep,
)
from pgcheckpoint.ops import Row

SOURCE = SimpleNamespace(schema="lg")  # the saver over the official tables
OFFICIAL = BasePostgresSaver()  # its row-making helpers, no connection
KEYS = {"k1": bytes(range(32))}
TS = "2024-05-04T06:32:42.235444+00:00"
INSERTED: Script = [[]]  # insert_copied_rows returns no rows


def version(n: int) -> str:
    return f"{n:032}.{0.5:016}"


@dataclass
class Official:
    """A thread as the official saver stores it: rows of its three tables, in key order."""

    thread_id: str = "t"
    checkpoints: list[Row] = field(default_factory=list)
    blobs: list[Row] = field(default_factory=list)
    writes: list[Row] = field(default_factory=list)
    # what was put, whole: what the official saver's get_tuple returns
    put_as: dict[str, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)

    def put(
        self,
        checkpoint_id: str,
        values: dict[str, Any],
        *,
        parent: str | None = None,
        ns: str = "",
        v: int = 4,
        **metadata: Any,
    ) -> str:
        """Save a checkpoint whose channels hold `values`, each at a new version."""
        versions = {ch: version(len(self.checkpoints) + 1) for ch in values}
        checkpoint = {
            "v": v,
            "id": checkpoint_id,
            "ts": TS,
            "channel_values": dict(values),
            "channel_versions": versions,
            "versions_seen": {"node": dict(versions)},
            "updated_channels": sorted(values),
        }
        inline = {
            k: x for k, x in values.items() if x is None or isinstance(x, str | int | float | bool)
        }
        stored = {k: x for k, x in values.items() if k not in inline}
        for _, ns_, channel, ver, type_, blob in OFFICIAL._dump_blobs(
            self.thread_id, ns, stored, {k: versions[k] for k in stored}
        ):
            self.blobs.append(
                {
                    "checkpoint_ns": ns_,
                    "channel": channel,
                    "version": ver,
                    "type": type_,
                    "blob": blob,
                }
            )
        config = {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ns}}
        meta = get_serializable_checkpoint_metadata(config, generate_metadata(**metadata))  # type: ignore[arg-type]
        self.checkpoints.append(
            {
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
                "parent_checkpoint_id": parent,
                # JSONB as psycopg returns it
                "checkpoint": json.loads(json.dumps({**checkpoint, "channel_values": inline})),
                "metadata": json.loads(json.dumps(meta)),
            }
        )
        self.put_as[checkpoint_id] = (checkpoint, meta)
        return checkpoint_id

    def put_writes(
        self, checkpoint_id: str, writes: list[tuple[str, Any]], task_id: str, path: str = ""
    ) -> None:
        ns = next(
            c["checkpoint_ns"] for c in self.checkpoints if c["checkpoint_id"] == checkpoint_id
        )
        for row in OFFICIAL._dump_writes(self.thread_id, ns, checkpoint_id, task_id, path, writes):
            names = ("checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx", "channel")
            self.writes.append(
                {**dict(zip(names, row[1:7], strict=True)), "type": row[7], "blob": row[8]}
            )

    def page(self, *ids: str) -> list[Row]:
        return [c for c in self.checkpoints if c["checkpoint_id"] in ids]

    def writes_of(self, page: Sequence[Row]) -> list[Row]:
        keys = {(c["checkpoint_ns"], c["checkpoint_id"]) for c in page}
        return [w for w in self.writes if (w["checkpoint_ns"], w["checkpoint_id"]) in keys]

    def blobs_of(self, page: Sequence[Row]) -> list[Row]:
        keys = {
            (c["checkpoint_ns"], ch, v)
            for c in page
            for ch, v in c["checkpoint"]["channel_versions"].items()
        }
        return [b for b in self.blobs if (b["checkpoint_ns"], b["channel"], b["version"]) in keys]

    def read_script(self, *ids: str) -> Script:
        """What the source answers to a page of these checkpoints, none imported yet."""
        page = self.page(*ids)
        return [page, self.writes_of(page), self.blobs_of(page)]


def a_thread() -> Official:
    """Two checkpoints of thread `t`; the second has pending writes and an interrupt."""
    thread = Official()
    first = thread.put("c1", {"title": "chat", "messages": ["hi"]}, step=0, run_id="run-1")
    thread.put("c2", {"title": "chat", "messages": ["hi", "ho"], "n": 2}, parent=first, step=1)
    thread.put_writes("c2", [("messages", ["ha"]), ("n", 3)], "task-b", "~__pregel_pull, b")
    thread.put_writes("c2", [("__interrupt__", "ok?")], "task-a", "~__pregel_pull, a")
    return thread


def rows_of(*thread_ids: str) -> list[Row]:
    """What lg_thread_ids returns."""
    return [{"thread_id": t} for t in thread_ids]


def read_back(core: SaverState, params: dict[str, Any], checkpoint_id: str) -> CheckpointTuple:
    """An imported checkpoint as get_tuple reads it back (`checkpoint_tuple_from`)."""
    return load_tuple(core, imported_row(params, checkpoint_id))


def imported_row(params: dict[str, Any], checkpoint_id: str) -> Row:
    """The row of `checkpoint_tuple_from` an imported checkpoint reads back as."""
    i = params["checkpoint_id"].index(checkpoint_id)
    ns = params["checkpoint_ns"][i]
    versions = json.loads(params["channel_versions"][i])
    blobs = {
        (n, ch, v): (t, b)
        for n, ch, v, t, b in zip(
            params["blob_checkpoint_ns"],
            params["blob_channel"],
            params["blob_version"],
            params["blob_type"],
            params["blob_blob"],
            strict=True,
        )
    }
    stored = [
        (ch, versions[ch], *blobs[(ns, ch, versions[ch])])
        for ch in sorted(versions)
        if (ns, ch, versions[ch]) in blobs
    ]
    writes = sorted(
        (path, task, idx, channel, type_, blob)
        for n, cid, task, path, idx, channel, type_, blob in zip(
            *(params[f"write_{c}"] for c in COPIED_WRITE_COLUMNS),
            strict=True,
        )
        if (n, cid) == (ns, checkpoint_id)
    )
    sealed = params["sealed_parent_id"][i] is not None
    row = {
        "thread_id": params["thread_id"],
        "checkpoint_ns": ns,
        "checkpoint_id": checkpoint_id,
        "parent_checkpoint_id": params["parent_checkpoint_id"][i],
        "type": params["type"][i],
        "checkpoint": params["checkpoint"][i],
        "channel_versions": versions,
        "metadata_type": params["metadata_type"][i],
        "metadata_blob": params["metadata_blob"][i],
        "blob_channels": [s[0] for s in stored] or None,
        "blob_versions": [s[1] for s in stored] or None,
        "blob_bases": [None for _ in stored] or None,
        "blob_types": [s[2] for s in stored] or None,
        "blob_values": [s[3] for s in stored] or None,
        "write_task_ids": [w[1] for w in writes] or None,
        "write_idxs": [w[2] for w in writes] or None,
        "write_channels": [w[3] for w in writes] or None,
        "write_types": [w[4] for w in writes] or None,
        "write_values": [w[5] for w in writes] or None,
        "write_task_paths": ([w[0] for w in writes] or None) if sealed else None,
        "sealed_parent_id": params["sealed_parent_id"][i],
        "sealed_inline_channels": json.loads(params["inline_channels"][i]) if sealed else None,
        "sealed_metadata": json.loads(params["metadata"][i]) if sealed else None,
        "sealed_parent_exists": None,
    }
    return row


def imported_writes(params: dict[str, Any], checkpoint_id: str, channel: str) -> list[Row]:
    """The imported writes of a checkpoint to `channel`, as `parent_sends` returns them."""
    writes = [
        dict(zip(COPIED_WRITE_COLUMNS, w, strict=True))
        for w in zip(*(params[f"write_{c}"] for c in COPIED_WRITE_COLUMNS), strict=True)
    ]
    return [
        {"thread_id": params["thread_id"], **w}
        for w in sorted(writes, key=lambda w: (w["task_path"], w["task_id"], w["idx"]))
        if w["checkpoint_id"] == checkpoint_id and w["channel"] == channel
    ]


def import_one(
    importer: LangGraphImporter, thread: Official, *scripts: Script, present: list[Row] = ()
) -> tuple[list[Ran], ImportStats]:
    """Import thread `t` by name: the checkpoints already there, then the scripts."""
    return run_sweep(
        import_sweep(importer, SOURCE, [thread.thread_id]), [[list(present)], *scripts]
    )


def inserted(ran: Ran) -> dict[str, Any]:
    (stmt,) = ran.stmts
    assert (stmt.name, stmt.fetch, ran.on) == ("insert_copied_rows", False, None)
    return dict(stmt.params)


# -- one thread -----------------------------------------------------------------------


@pytest.mark.parametrize("serde", [None, EncryptedSerde(keys=KEYS)], ids=["plain", "encrypted"])
def test_an_imported_thread_reads_back_as_the_official_saver_wrote_it(serde: Any) -> None:
    thread = a_thread()
    core = SaverState(serde=serde)
    ran, stats = import_one(
        LangGraphImporter(core), thread, thread.read_script("c1", "c2"), INSERTED
    )
    present, read, insert = ran
    assert present.stmts[0].name == "thread_checkpoint_ids"
    assert dict(present.stmts[0].params) == {"thread_ids": ["t"]}
    assert present.on is None and read.on is SOURCE
    params = inserted(insert)
    assert params["thread_id"] == "t"
    assert params["checkpoint_id"] == ["c1", "c2"]
    for checkpoint_id, parent in [("c1", None), ("c2", "c1")]:
        checkpoint, metadata = thread.put_as[checkpoint_id]
        tup = read_back(SaverState(serde=serde), params, checkpoint_id)
        assert tup.checkpoint == checkpoint
        assert tup.metadata == metadata
        parent_config = tup.parent_config
        assert (parent_config and parent_config["configurable"]["checkpoint_id"]) == parent
    pending = read_back(SaverState(serde=serde), params, "c2").pending_writes
    assert sorted(pending) == [
        ("task-a", "__interrupt__", "ok?"),
        ("task-b", "messages", ["ha"]),
        ("task-b", "n", 3),
    ]
    assert params["run_id"] == ["run-1", None]
    assert stats == ImportStats(threads=1, checkpoints=2, blobs=2, writes=3)


def test_the_source_is_asked_for_a_page_with_its_writes_and_the_values_it_refers_to() -> None:
    thread = a_thread()
    ran, _ = import_one(
        LangGraphImporter(SaverState(), batch_size=50),
        thread,
        thread.read_script("c1", "c2"),
        INSERTED,
    )
    page, writes, blobs = ran[1].stmts
    assert (page.name, dict(page.params)) == (
        "lg_checkpoints_page",
        {"thread_id": "t", "after_ns": None, "after_id": None, "limit": 50},
    )
    assert (writes.name, dict(writes.params)) == (
        "lg_writes_of_checkpoints",
        {"thread_id": "t", "checkpoint_nss": ["", ""], "checkpoint_ids": ["c1", "c2"]},
    )
    # every (namespace, channel, version) the checkpoints name, once, in order
    assert (blobs.name, dict(blobs.params)) == (
        "lg_blobs",
        {
            "thread_id": "t",
            "checkpoint_nss": [""] * 5,
            "channels": ["messages", "messages", "n", "title", "title"],
            "versions": [version(1), version(2), version(2), version(1), version(2)],
        },
    )


def test_a_thread_longer_than_a_page_is_read_a_page_at_a_time_after_the_last_key() -> None:
    thread = Official()
    parent = None
    for i in range(1, 4):
        parent = thread.put(f"c{i}", {"items": [i]}, parent=parent, step=i)
    sub = thread.put("s1", {"items": [9]}, ns="sub:1", step=0)
    ran, stats = import_one(
        LangGraphImporter(SaverState(), batch_size=2),
        thread,
        thread.read_script("c1", "c2"),
        INSERTED,
        thread.read_script("c3", sub),
        INSERTED,
        [[]],  # the third page is empty
    )
    pages = [r.stmts[0].params for r in ran if r.on is SOURCE]
    assert [(p["after_ns"], p["after_id"]) for p in pages] == [
        (None, None),
        ("", "c2"),
        ("sub:1", "s1"),
    ]
    assert [inserted(ran[i])["checkpoint_id"] for i in (2, 4)] == [["c1", "c2"], ["c3", "s1"]]
    assert stats == ImportStats(threads=1, checkpoints=4, blobs=4)


def test_a_page_shorter_than_the_batch_ends_the_thread_without_asking_again() -> None:
    thread = a_thread()
    ran, _ = import_one(
        LangGraphImporter(SaverState(), batch_size=3),
        thread,
        thread.read_script("c1", "c2"),
        INSERTED,
    )
    assert [r.names[0] for r in ran] == [
        "thread_checkpoint_ids",
        "lg_checkpoints_page",
        "insert_copied_rows",
    ]


def test_a_resumed_import_skips_the_checkpoints_already_there_but_sends_their_writes() -> None:
    thread = a_thread()
    thread.put_writes("c1", [("late", "arrived")], "task-c")
    page = thread.page("c1", "c2")
    ran, stats = import_one(
        LangGraphImporter(SaverState()),
        thread,
        [page, thread.writes_of(page), thread.blobs_of(thread.page("c2"))],
        INSERTED,
        present=[{"checkpoint_ns": "", "checkpoint_id": "c1"}],
    )
    blobs = ran[1].stmt("lg_blobs")
    assert set(blobs.params["versions"]) == {version(2)}  # c2's values only
    params = inserted(ran[2])
    assert params["checkpoint_id"] == ["c2"]
    assert sorted(zip(params["write_checkpoint_id"], params["write_channel"], strict=True)) == [
        ("c1", "late"),
        ("c2", "__interrupt__"),
        ("c2", "messages"),
        ("c2", "n"),
    ]
    assert stats == ImportStats(threads=1, checkpoints=1, checkpoints_present=1, blobs=1, writes=4)


def test_a_thread_imported_whole_already_reads_no_values_again() -> None:
    thread = a_thread()
    page = thread.page("c1", "c2")
    ran, stats = import_one(
        LangGraphImporter(SaverState()),
        thread,
        [page, thread.writes_of(page)],
        INSERTED,
        present=[{"checkpoint_ns": "", "checkpoint_id": c} for c in ("c1", "c2")],
    )
    assert ran[1].names == ["lg_checkpoints_page", "lg_writes_of_checkpoints"]
    assert inserted(ran[2])["checkpoint_id"] == []
    assert stats == ImportStats(threads=1, checkpoints_present=2, writes=3)


# -- the official saver's row shapes --------------------------------------------------


def test_a_cleared_channel_is_copied_as_empty_and_reads_back_without_a_value() -> None:
    thread = Official()
    thread.put("c1", {"doc": {"a": 1}})
    # an older official saver stored a channel with no value as an "empty" blob
    checkpoint = thread.checkpoints[0]["checkpoint"]
    checkpoint["channel_versions"]["gone"] = version(1)
    thread.blobs.append(
        {
            "checkpoint_ns": "",
            "channel": "gone",
            "version": version(1),
            "type": "empty",
            "blob": None,
        }
    )
    ran, stats = import_one(
        LangGraphImporter(SaverState()), thread, thread.read_script("c1"), INSERTED
    )
    params = inserted(ran[2])
    copied = dict(
        zip(
            params["blob_channel"],
            zip(params["blob_type"], params["blob_blob"], strict=True),
            strict=True,
        )
    )
    assert copied["gone"] == ("empty", None)
    assert params["blob_base_version"] == [None, None]  # whole values, no delta
    tup = read_back(SaverState(), params, "c1")
    assert tup.checkpoint["channel_values"] == {"doc": {"a": 1}}
    assert "gone" in tup.checkpoint["channel_versions"]
    assert stats.blobs == 2


def test_a_stored_value_wins_over_the_inline_marker_of_a_delta_snapshot() -> None:
    thread = Official()
    thread.put("c1", {"log": ["a", "b"]})
    # a DeltaChannel snapshot: the official saver leaves `true` inline beside its blob
    thread.checkpoints[0]["checkpoint"]["channel_values"]["log"] = True
    ran, _ = import_one(LangGraphImporter(SaverState()), thread, thread.read_script("c1"), INSERTED)
    params = inserted(ran[2])
    assert json.loads(params["inline_channels"][0]) == []
    assert read_back(SaverState(), params, "c1").checkpoint["channel_values"] == {"log": ["a", "b"]}


def test_the_sends_of_a_pre_v4_checkpoint_stay_writes_of_its_parent_and_read_back_moved() -> None:
    thread = Official()
    first = thread.put("c1", {"count": 1}, v=1)
    sends = [Send("work", {"item": 1}), Send("work", {"item": 2})]
    for i, send in enumerate(sends):
        thread.put_writes(first, [(TASKS, send)], f"task-{i}")
    thread.put("c2", {"count": 2}, parent=first, v=1)
    # a channel last written at c1 keeps its older version
    thread.checkpoints[1]["checkpoint"]["channel_versions"]["label"] = version(1)
    page = thread.page("c1", "c2")
    ran, stats = import_one(
        LangGraphImporter(SaverState()),
        thread,
        [page, thread.writes_of(page), thread.blobs_of(page)],
        INSERTED,
    )
    params = inserted(ran[2])
    # copied as they are: the parent's writes, no value made of them
    assert stats.writes == 2 and params["blob_channel"] == []
    assert TASKS not in json.loads(params["channel_versions"][1])
    # a read of c2 moves them, and gives the channel the version the official saver gives it
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c2"}}
    stmts, tup = drive(
        get_tuple_op(SaverState(), config),
        [[imported_row(params, "c2")], imported_writes(params, "c1", TASKS)],
    )
    assert [s.name for s in stmts] == ["get_checkpoint_by_id", "parent_sends"]
    assert tup.checkpoint["channel_values"] == {"count": 2, TASKS: sends}
    official = json.loads(json.dumps(thread.checkpoints[1]["checkpoint"]))
    stored = [(w["type"].encode(), w["blob"]) for w in thread.writes]
    OFFICIAL._migrate_pending_sends(stored, official, [])
    assert tup.checkpoint["channel_versions"] == official["channel_versions"]
    assert official["channel_versions"][TASKS] == version(2)
    assert TASKS not in read_back(SaverState(), params, "c1").checkpoint["channel_values"]


class CustomSerde:
    """The serializer an application gave the official saver: a type JsonPlus cannot read."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return "custom", json.dumps(obj).encode()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        assert data[0] == "custom"
        return json.loads(data[1])


def test_with_source_serde_values_are_decoded_and_serialised_again() -> None:
    thread = Official()
    thread.put("c1", {"doc": {"a": [1, 2]}})
    thread.put_writes("c1", [("doc", {"b": 3})], "task-a")
    for row in thread.blobs + thread.writes:
        row["type"], row["blob"] = CustomSerde().dumps_typed(
            OFFICIAL.serde.loads_typed((row["type"], row["blob"]))
        )
    importer = LangGraphImporter(SaverState(), source_serde=CustomSerde())
    ran, _ = import_one(importer, thread, thread.read_script("c1"), INSERTED)
    params = inserted(ran[2])
    assert "custom" not in params["blob_type"] + params["write_type"]
    tup = read_back(SaverState(), params, "c1")
    assert tup.checkpoint["channel_values"] == {"doc": {"a": [1, 2]}}
    assert tup.pending_writes == [("task-a", "doc", {"b": 3})]


def test_an_encrypting_target_seals_each_value_to_its_new_row() -> None:
    thread = a_thread()
    core = SaverState(serde=EncryptedSerde(keys=KEYS))
    ran, _ = import_one(LangGraphImporter(core), thread, thread.read_script("c1", "c2"), INSERTED)
    params = inserted(ran[2])
    types = params["type"] + params["metadata_type"] + params["blob_type"] + params["write_type"]
    assert {cipher_label(t) for t in types} == {"k1"}
    assert params["sealed_parent_id"] == ["", "c1"]
    # sealed to thread t: the same bytes under another thread's id do not read
    with pytest.raises(DecryptionError):
        read_back(core, {**params, "thread_id": "other"}, "c2")


def test_a_plain_target_stores_plaintext_with_no_sealed_parent() -> None:
    thread = a_thread()
    ran, _ = import_one(
        LangGraphImporter(SaverState()), thread, thread.read_script("c1", "c2"), INSERTED
    )
    params = inserted(ran[2])
    assert {cipher_label(t) for t in params["type"] + params["blob_type"]} == {PLAINTEXT_LABEL}
    assert params["sealed_parent_id"] == [None, None]


@pytest.mark.parametrize(
    ("ts", "created_at"),
    [
        (TS, datetime(2024, 5, 4, 6, 32, 42, 235444, tzinfo=timezone.utc)),
        ("2024-05-04T06:32:42Z", datetime(2024, 5, 4, 6, 32, 42, tzinfo=timezone.utc)),
        ("2024-05-04T06:32:42", datetime(2024, 5, 4, 6, 32, 42, tzinfo=timezone.utc)),
    ],
)
def test_an_imported_checkpoint_is_dated_by_its_ts_for_retention(
    ts: str, created_at: datetime
) -> None:
    thread = Official()
    thread.put("c1", {"n": 1})
    thread.checkpoints[0]["checkpoint"]["ts"] = ts
    ran, _ = import_one(LangGraphImporter(SaverState()), thread, thread.read_script("c1"), INSERTED)
    assert inserted(ran[2])["created_at"] == [created_at]


@pytest.mark.parametrize("ts", ["yesterday", None, 1714804362])
def test_a_checkpoint_with_an_unreadable_ts_is_dated_now(ts: Any) -> None:
    thread = Official()
    thread.put("c1", {"n": 1})
    thread.checkpoints[0]["checkpoint"]["ts"] = ts
    before = datetime.now(timezone.utc)
    ran, _ = import_one(LangGraphImporter(SaverState()), thread, thread.read_script("c1"), INSERTED)
    (when,) = inserted(ran[2])["created_at"]
    assert before <= when <= datetime.now(timezone.utc) + timedelta(seconds=1)


# -- many threads, and the threads that fail -------------------------------------------


def test_every_thread_of_the_source_is_walked_in_order() -> None:
    a, b = Official("a"), Official("b")
    a.put("a1", {"n": 1})
    b.put("b1", {"n": 2})
    heard: list[tuple[str, Any]] = []
    ran, stats = run_sweep(
        import_sweep(
            LangGraphImporter(SaverState()), SOURCE, progress=lambda t, e: heard.append((t, e))
        ),
        [
            [rows_of("a", "b")],
            [[]],
            a.read_script("a1"),
            INSERTED,
            [[]],
            b.read_script("b1"),
            INSERTED,
            [[]],
        ],
    )
    listings = [r.stmts[0] for r in ran if r.names == ["lg_thread_ids"]]
    assert [dict(s.params) for s in listings] == [
        {"after": None, "limit": 1000},
        {"after": "b", "limit": 1000},
    ]
    assert all(r.on is SOURCE for r in ran if r.names == ["lg_thread_ids"])
    assert [inserted(r)["thread_id"] for r in ran if r.names == ["insert_copied_rows"]] == [
        "a",
        "b",
    ]
    assert heard == [("a", None), ("b", None)]
    assert stats == ImportStats(threads=2, checkpoints=2)


def test_a_listed_thread_gone_before_its_turn_is_neither_counted_nor_failed() -> None:
    ran, stats = run_sweep(
        import_sweep(LangGraphImporter(SaverState()), SOURCE),
        [[rows_of("a")], [[]], [[]], [[]]],
    )
    assert [r.names for r in ran][-2:] == [["lg_checkpoints_page"], ["lg_thread_ids"]]
    assert stats == ImportStats()


def test_a_named_thread_the_source_lacks_is_reported_and_the_others_go_on() -> None:
    thread = a_thread()
    heard: list[tuple[str, Any]] = []
    _, stats = run_sweep(
        import_sweep(
            LangGraphImporter(SaverState()),
            SOURCE,
            ["missing", "t", "t"],  # a thread named twice is copied once
            progress=lambda t, e: heard.append((t, e)),
        ),
        [[[]], [[]], [[]], thread.read_script("c1", "c2"), INSERTED],
    )
    assert list(stats.failed) == ["missing"]
    assert "no thread 'missing'" in stats.failed["missing"]
    assert "schema 'lg'" in stats.failed["missing"]
    assert (stats.threads, stats.checkpoints) == (1, 2)
    assert [(t, type(e).__name__) for t, e in heard] == [
        ("missing", "InvalidInputError"),
        ("t", "NoneType"),
    ]


LONG = "x" * 256  # longer than pgcheckpoint takes an id (the official saver has no limit)


def damage(thread: Official, what: str) -> None:
    """Spoil one row of thread `t` (`a_thread`) as a source database may hold it."""
    if what == "write without a type":
        thread.writes[0]["type"] = None
    elif what == "checkpoint id too long":
        thread.checkpoints[1]["checkpoint_id"] = LONG
    elif what == "channel too long":
        thread.blobs[0]["channel"] = LONG
    elif what == "task id too long":
        thread.writes[0]["task_id"] = LONG


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("write without a type", "has no type, so no serializer can read it; delete that row"),
        ("checkpoint id too long", "'checkpoint_id' is 256 bytes long; the limit is 255"),
        ("channel too long", "'channel' is 256 bytes long; the limit is 255"),
        ("task id too long", "'task_id' is 256 bytes long; the limit is 255"),
    ],
)
def test_a_damaged_row_fails_its_thread_only_and_nothing_of_it_is_stored(
    what: str, message: str
) -> None:
    thread, other = a_thread(), Official("u")
    other.put("u1", {"n": 1})
    read = thread.read_script("c1", "c2")
    damage(thread, what)  # the rows of `read` too
    ran, stats = run_sweep(
        import_sweep(LangGraphImporter(SaverState()), SOURCE, ["t", "u"]),
        [[[]], read, [[]], other.read_script("u1"), INSERTED],
    )
    assert isinstance(ran[1].error, InvalidInputError)
    assert [inserted(r)["thread_id"] for r in ran if r.names == ["insert_copied_rows"]] == ["u"]
    assert list(stats.failed) == ["t"]
    assert message in stats.failed["t"]
    assert stats == ImportStats(threads=1, checkpoints=1, failed=stats.failed)


def test_a_source_thread_id_too_long_for_pgcheckpoint_fails_that_thread_only() -> None:
    other = Official("u")
    other.put("u1", {"n": 1})
    ran, stats = run_sweep(
        import_sweep(LangGraphImporter(SaverState()), SOURCE),
        [[rows_of("x" * 1025, "u")], [[]], other.read_script("u1"), INSERTED, [[]]],
    )
    assert "'thread_id' is 1025 bytes long" in stats.failed["x" * 1025]
    assert (stats.threads, stats.checkpoints) == (1, 1)
    # nothing was read of the long one
    assert [r.names[0] for r in ran][1] == "thread_checkpoint_ids"


def test_a_page_the_target_refuses_fails_its_thread_and_keeps_the_pages_before() -> None:
    thread = Official()
    thread.put("c1", {"n": 1})
    thread.put("c2", {"n": 2}, parent="c1")
    too_long = pg_errors.StringDataRightTruncation("value too long for type character varying")
    ran, stats = import_one(
        LangGraphImporter(SaverState(), batch_size=1),
        thread,
        thread.read_script("c1"),
        INSERTED,
        thread.read_script("c2"),
        [too_long],
    )
    # the first page went in a transaction of its own, before the one refused
    assert inserted(ran[2])["checkpoint_id"] == ["c1"] and ran[2].error is None
    assert ran[-1].error is too_long
    assert stats.failed == {"t": "value too long for type character varying"}


def test_trouble_that_is_not_a_bad_row_ends_the_import() -> None:
    lost = pg_errors.AdminShutdown("terminating connection due to administrator command")
    with pytest.raises(pg_errors.AdminShutdown):
        import_one(LangGraphImporter(SaverState()), a_thread(), [lost])


# -- the source's schema ---------------------------------------------------------------

TABLES = [{"table_name": t} for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")]


def check_source(*script: list[Row]) -> tuple[Ran, Any]:
    ran = Ran()
    return ran, run_op(LangGraphImporter(SaverState()).check_source_op("lg"), list(script), ran)


def test_a_current_source_is_checked_and_its_threads_counted() -> None:
    ran, threads = check_source(TABLES, [{"v": REQUIRED_SOURCE_MIGRATION + 3}], [{"threads": 12}])
    assert dict(ran.stmts[0].params) == {
        "schema": "lg",
        "tables": ["checkpoints", "checkpoint_blobs", "checkpoint_writes"],
    }
    assert ran.names[1:] == ["lg_migration_version", "lg_count_threads"]
    assert threads == 12


def test_a_source_without_the_official_tables_says_which_and_how_to_point_at_them() -> None:
    with pytest.raises(
        SourceSchemaError,
        match=r"no langgraph-checkpoint-postgres table 'checkpoint_writes'.*--from-schema",
    ):
        check_source(TABLES[:2])


@pytest.mark.parametrize("found", [[{"v": REQUIRED_SOURCE_MIGRATION - 1}], [{"v": None}], []])
def test_a_source_behind_the_migration_the_importer_reads_says_how_to_upgrade_it(
    found: list[Row],
) -> None:
    with pytest.raises(SourceSchemaError, match=r"call setup\(\) of a current"):
        check_source(TABLES, found)


def test_a_page_size_below_one_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="batch_size must be at least 1"):
        LangGraphImporter(SaverState(), batch_size=0)

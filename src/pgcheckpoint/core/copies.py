"""Copying a thread's whole history to another thread id.

Example:
    >>> from pgcheckpoint.core.copies import copy_thread_op
    >>> from pgcheckpoint.core.state import SaverState
    >>> next(copy_thread_op(SaverState(), "t1", "t2")).name
    'lock_thread_for_saving'
"""

from __future__ import annotations

import json
from typing import Any

from ..codec.binding import Sealer
from ..ops import Op, Row, Stmt
from ..validate import check_id
from .locks import maintenance_lock_key
from .reads import stored_values_op
from .reseal import reseal_blob, reseal_checkpoint, reseal_metadata, reseal_write
from .rows import checkpoint_keys
from .state import SaverState

__all__ = [
    "COPIED_BLOB_COLUMNS",
    "COPIED_CHECKPOINT_COLUMNS",
    "COPIED_WRITE_COLUMNS",
    "copy_thread_op",
    "copy_thread_resealed_op",
]

# Columns of `thread_checkpoints_page` that `insert_copied_rows` takes as arrays.
COPIED_CHECKPOINT_COLUMNS = (
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "sealed_parent_id",
    "run_id",
    "type",
    "checkpoint",
    "channel_versions",
    "inline_channels",
    "metadata_type",
    "metadata_blob",
    "metadata",
    "created_at",
)
COPIED_BLOB_COLUMNS = ("checkpoint_ns", "channel", "version", "type", "blob", "base_version")
COPIED_WRITE_COLUMNS = (
    "checkpoint_ns",
    "checkpoint_id",
    "task_id",
    "task_path",
    "idx",
    "channel",
    "type",
    "blob",
)


def copy_thread_op(saver: SaverState, source_thread_id: str, target_thread_id: str) -> Op[None]:
    """Copy a thread's whole history, every namespace, to another thread id.

    Postgres copies the rows in one statement, unless the serializer seals
    values to their thread: then they go through the client, re-sealed
    for the target (`copy_thread_resealed_op`). The caller runs it in one
    transaction, which holds the target's maintenance lock shared, as a put.
    """
    source = check_id("thread_id", source_thread_id)
    target = check_id("thread_id", target_thread_id)
    key = maintenance_lock_key(target, saver.schema)
    yield Stmt("lock_thread_for_saving", {"lock_key": key}, fetch=True)
    if isinstance(saver.serde, Sealer):
        yield from copy_thread_resealed_op(saver, saver.serde, source, target)
        return
    yield Stmt("copy_thread", {"source_thread_id": source, "target_thread_id": target})


def copy_thread_resealed_op(
    saver: SaverState, sealer: Sealer, source: str, target: str
) -> Op[None]:
    """Copy a thread page by page, each value unsealed and sealed again for `target`.

    Each page copies some checkpoints with the values and writes they refer
    to, so rows a concurrent writer adds meanwhile are never half copied.
    Values come out in row format 2 (`Reseal`); a row in format 2 whose
    columns differ from its sealed record fails the copy.
    """
    after: Row | None = None
    copied_blobs: set[tuple[str, str, str]] = set()
    while True:
        rows = yield Stmt(
            "thread_checkpoints_page",
            {
                "thread_id": source,
                "after_ns": None if after is None else after["checkpoint_ns"],
                "after_id": None if after is None else after["checkpoint_id"],
                "limit": saver.copy_batch_size,
            },
            fetch=True,
        )
        if not rows:
            return
        page = {
            "thread_id": source,
            "checkpoint_nss": [r["checkpoint_ns"] for r in rows],
            "checkpoint_ids": [r["checkpoint_id"] for r in rows],
        }
        stored = yield from stored_values_op(saver, checkpoint_keys(rows, thread_id=source))
        blobs = [b for b in stored if b["kind"] == "v"]
        holding = {
            (b["checkpoint_ns"], b["channel"], b["version"]) for b in blobs if b["type"] != "empty"
        }
        writes = yield Stmt("thread_writes_of_checkpoints", page, fetch=True)
        params: dict[str, Any] = {"thread_id": target}
        for row in rows:
            versions = json.loads(row["channel_versions"])
            inline = json.loads(row["inline_channels"])
            opened = {**row, "channel_versions": versions, "inline_channels": inline}
            channels = [
                ch
                for ch, v in versions.items()
                if ch not in inline and (row["checkpoint_ns"], ch, str(v)) in holding
            ]
            row["type"], row["checkpoint"], row["sealed_parent_id"] = reseal_checkpoint(
                saver, opened, source, target, channels
            )
            opened["metadata"] = json.loads(row["metadata"])
            row["metadata_type"], row["metadata_blob"] = reseal_metadata(
                saver, opened, source, target
            )
        for column in COPIED_CHECKPOINT_COLUMNS:
            params[column] = [r[column] for r in rows]
        new_blobs = []
        for blob in blobs:
            blob_key = (blob["checkpoint_ns"], blob["channel"], blob["version"])
            if blob_key not in copied_blobs:
                copied_blobs.add(blob_key)
                blob["type"], blob["blob"] = reseal_blob(saver, blob, source, target)
                new_blobs.append(blob)
        for column in COPIED_BLOB_COLUMNS:
            params[f"blob_{column}"] = [b[column] for b in new_blobs]
        for w in writes:
            w["type"], w["blob"] = reseal_write(saver, w, source, target)
        for column in COPIED_WRITE_COLUMNS:
            params[f"write_{column}"] = [w[column] for w in writes]
        yield Stmt("insert_copied_rows", params)
        if len(rows) < saver.copy_batch_size:
            return
        after = rows[-1]

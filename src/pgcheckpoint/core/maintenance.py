"""Whole threads and their history: delete, copy, prune, delete_for_runs.

Example:
    >>> from pgcheckpoint.core import SaverCore
    >>> next(SaverCore().delete_thread_op("t1")).name
    'delete_thread'
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import InvalidInputError
from ..locking import LOCK_CLASS_MAINTENANCE
from ..ops import Op, Row, Stmt, checkpoint_keys, row_key
from ..validate import check_id
from ..values import Sealer
from .reads import Reads
from .reseal import Reseal

__all__ = [
    "COPIED_BLOB_COLUMNS",
    "COPIED_CHECKPOINT_COLUMNS",
    "COPIED_WRITE_COLUMNS",
    "PRUNE_STRATEGIES",
    "Maintenance",
]

PRUNE_STRATEGIES = ("keep_latest", "delete")
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


class Maintenance(Reads, Reseal):
    """The operations of `SaverCore` on whole threads.

    Example:
        >>> from pgcheckpoint.core import SaverCore
        >>> isinstance(SaverCore(), Maintenance)
        True
    """

    def delete_thread_op(self, thread_id: str) -> Op[None]:
        """Delete every checkpoint, blob and write of a thread."""
        thread_id = check_id("thread_id", thread_id)
        yield Stmt("delete_thread", {"thread_id": thread_id})
        self.append_cache.forget_thread(thread_id)

    def copy_thread_op(self, source_thread_id: str, target_thread_id: str) -> Op[None]:
        """Copy a thread's whole history, every namespace, to another thread id.

        Postgres copies the rows in one statement, unless the serializer seals
        values to their thread: then they go through the client, re-sealed
        for the target (`copy_thread_resealed_op`); the caller runs that in
        one transaction.
        """
        source = check_id("thread_id", source_thread_id)
        target = check_id("thread_id", target_thread_id)
        if isinstance(self.serde, Sealer):
            yield from self.copy_thread_resealed_op(self.serde, source, target)
            return
        yield Stmt("copy_thread", {"source_thread_id": source, "target_thread_id": target})

    def copy_thread_resealed_op(self, sealer: Sealer, source: str, target: str) -> Op[None]:
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
                    "limit": self.copy_batch_size,
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
            stored = yield from self.stored_values_op(checkpoint_keys(rows, thread_id=source))
            blobs = [b for b in stored if b["kind"] == "v"]
            holding = {
                (b["checkpoint_ns"], b["channel"], b["version"])
                for b in blobs
                if b["type"] != "empty"
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
                row["type"], row["checkpoint"], row["sealed_parent_id"] = self.reseal_checkpoint(
                    opened, source, target, channels
                )
                opened["metadata"] = json.loads(row["metadata"])
                row["metadata_type"], row["metadata_blob"] = self.reseal_metadata(
                    opened, source, target
                )
            for column in COPIED_CHECKPOINT_COLUMNS:
                params[column] = [r[column] for r in rows]
            new_blobs = []
            for blob in blobs:
                blob_key = (blob["checkpoint_ns"], blob["channel"], blob["version"])
                if blob_key not in copied_blobs:
                    copied_blobs.add(blob_key)
                    blob["type"], blob["blob"] = self.reseal_blob(blob, source, target)
                    new_blobs.append(blob)
            for column in COPIED_BLOB_COLUMNS:
                params[f"blob_{column}"] = [b[column] for b in new_blobs]
            for w in writes:
                w["type"], w["blob"] = self.reseal_write(w, source, target)
            for column in COPIED_WRITE_COLUMNS:
                params[f"write_{column}"] = [w[column] for w in writes]
            yield Stmt("insert_copied_rows", params)
            if len(rows) < self.copy_batch_size:
                return
            after = rows[-1]

    def prune_op(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> Op[None]:
        """Prune threads in one transaction; the caller runs it in one.

        `keep_latest` keeps the newest checkpoint of every namespace, plus the
        ancestors and writes it needs to be rebuilt (a `DeltaChannel` between
        snapshots), and deletes the rest. Checkpoints saved while the prune
        runs are newer than the heads it read, so they are never deleted.
        """
        if isinstance(thread_ids, str):
            raise InvalidInputError("thread_ids must be a list of thread ids, not one string")
        if strategy not in PRUNE_STRATEGIES:
            raise InvalidInputError(
                f"unknown prune strategy {strategy!r}; use one of {PRUNE_STRATEGIES!r}"
            )
        ids = sorted({check_id("thread_id", t) for t in thread_ids})
        if not ids:
            return
        yield from self._lock_threads_op(ids)
        if strategy == "delete":
            yield Stmt("delete_threads", {"thread_ids": ids})
            return
        heads = yield Stmt("thread_heads", {"thread_ids": ids}, fetch=True)
        keep = yield from self.needed_for_op(heads)
        rows = yield Stmt("thread_checkpoint_ids", {"thread_ids": ids}, fetch=True)
        newest = {(h["thread_id"], h["checkpoint_ns"]): h["checkpoint_id"] for h in heads}
        doomed = [
            r
            for r in rows
            if row_key(r) not in keep
            and r["checkpoint_id"] < newest.get((r["thread_id"], r["checkpoint_ns"]), "")
        ]
        yield from self._delete_checkpoints_op(doomed)

    def delete_for_runs_op(self, run_ids: Sequence[str]) -> Op[None]:
        """Delete the checkpoints (and their writes) that the given runs created.

        Checkpoints of other runs that still need a deleted one to be rebuilt
        (their `DeltaChannel` history runs through it) keep it.
        """
        if isinstance(run_ids, str):
            raise InvalidInputError("run_ids must be a list of run ids, not one string")
        ids = sorted({check_id("run_id", r) for r in run_ids})
        if not ids:
            return
        rows = yield Stmt("run_checkpoints", {"run_ids": ids}, fetch=True)
        if not rows:
            return
        threads = sorted({r["thread_id"] for r in rows})
        yield from self._lock_threads_op(threads)
        # Re-read under the lock: a concurrent writer may have added checkpoints.
        rows = yield Stmt("run_checkpoints", {"run_ids": ids}, fetch=True)
        doomed_keys = {row_key(r) for r in rows}
        every = yield Stmt("thread_checkpoint_ids", {"thread_ids": threads}, fetch=True)
        survivors = [r for r in every if row_key(r) not in doomed_keys]
        needed = yield from self.needed_for_op(survivors)
        doomed = [r for r in rows if row_key(r) not in needed]
        yield from self._delete_checkpoints_op(doomed)

    def _lock_threads_op(self, thread_ids: Sequence[str]) -> Op[None]:
        yield Stmt(
            "lock_threads_for_maintenance",
            {"thread_ids": list(thread_ids), "lock_class": LOCK_CLASS_MAINTENANCE},
            fetch=True,
        )

    def needed_for_op(self, kept: Iterable[Row]) -> Op[set[tuple[str, str, str]]]:
        kept = list(kept)
        if not kept:
            return set()
        rows = yield Stmt(
"rebuild_dependencies", checkpoint_keys(kept), fetch=True)
        return {row_key(r) for r in rows}

    def _delete_checkpoints_op(self, doomed: Sequence[Row]) -> Op[None]:
        if not doomed:
            return
        yield Stmt("delete_checkpoints", checkpoint_keys(doomed))

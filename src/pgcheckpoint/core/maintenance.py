"""Whole threads and their history: delete, copy, prune, delete_for_runs.

Deletes follow the protocol of the retention sweeps. In one READ COMMITTED
transaction a delete takes each thread's maintenance lock, waiting for the
saves in flight (a put or put_writes holds it shared for its one statement)
and making later ones wait until it commits; it reads what to delete under the
lock, deletes it, and for threads deleted whole checks in a new snapshot that
no row is left. A save that waited then finds its checkpoint gone: a put's
parent (`MissingParentError`), or the checkpoint of put_writes
(`MissingCheckpointError`). A delete that still conflicts (two deletes of
several threads each waiting for each other, a writer that takes no lock)
rolls back and runs again (`conflict_retries`), then raises
`ThreadConflictError`.

Example:
    >>> from pgcheckpoint.core import SaverCore
    >>> op = SaverCore().delete_thread_op("t1")
    >>> next(op).name, op.send([]).name
    ('read_committed', 'lock_threads_for_maintenance')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from psycopg.errors import DeadlockDetected, ForeignKeyViolation, LockNotAvailable

from ..errors import InvalidInputError, ThreadConflictError
from ..locking import maintenance_lock_key
from ..ops import Op, Row, Stmt, Sweep, checkpoint_keys, row_key
from ..telemetry import logger
from ..validate import check_id, check_id_list
from ..values import Sealer
from .reads import Reads
from .reseal import Reseal

__all__ = [
    "CONFLICTS",
    "COPIED_BLOB_COLUMNS",
    "COPIED_CHECKPOINT_COLUMNS",
    "COPIED_WRITE_COLUMNS",
    "PRUNE_STRATEGIES",
    "Maintenance",
    "check_prune_strategy",
    "conflict_retries",
]

T = TypeVar("T")

# Errors of a delete that concurrent work causes; the delete rolls back and runs again.
CONFLICTS = (DeadlockDetected, ForeignKeyViolation, LockNotAvailable)
_ATTEMPTS = 3
# Rounds of delete-and-check for threads deleted whole, within one transaction.
_ROUNDS = 3

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


def check_prune_strategy(strategy: object, what: str) -> None:
    """`InvalidInputError` unless `strategy` is one of `PRUNE_STRATEGIES`.

    `what` names the operation in the message ("prune", "retention").

    Example:
        >>> check_prune_strategy("delete", "prune")
    """
    if strategy not in PRUNE_STRATEGIES:
        raise InvalidInputError(
            f"unknown {what} strategy {strategy!r}; use one of {PRUNE_STRATEGIES!r}"
        )


class Maintenance(Reads, Reseal):
    """The operations of `SaverCore` on whole threads.

    Example:
        >>> from pgcheckpoint.core import SaverCore
        >>> isinstance(SaverCore(), Maintenance)
        True
    """

    def delete_thread_sweep(self, thread_id: str) -> Sweep[None]:
        """`delete_thread_op` in a transaction, run again when it conflicts (`conflict_retries`).

        Example:
            >>> saver.run_each(saver.delete_thread_sweep("t1"))  # doctest: +SKIP
        """
        thread_id = check_id("thread_id", thread_id)
        yield from conflict_retries(
            lambda: self.delete_thread_op(thread_id), "delete_thread", [thread_id]
        )

    def prune_sweep(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
    ) -> Sweep[None]:
        """`prune_op` in a transaction, run again when it conflicts (`conflict_retries`).

        Example:
            >>> saver.run_each(saver.prune_sweep(["t1"]))  # doctest: +SKIP
        """
        ids = check_id_list("thread_ids", thread_ids)
        yield from conflict_retries(lambda: self.prune_op(ids, strategy=strategy), "prune", ids)

    def delete_for_runs_sweep(self, run_ids: Sequence[str]) -> Sweep[None]:
        """`delete_for_runs_op` in a transaction, run again when it conflicts (`conflict_retries`).

        Example:
            >>> saver.run_each(saver.delete_for_runs_sweep(["run-1"]))  # doctest: +SKIP
        """
        ids = check_id_list("run_ids", run_ids, kind="run_id")
        yield from conflict_retries(lambda: self.delete_for_runs_op(ids), "delete_for_runs")

    def delete_thread_op(self, thread_id: str) -> Op[None]:
        """Delete every checkpoint, blob and write of a thread; the caller runs it in one
        transaction (`conflict_retries`)."""
        thread_id = check_id("thread_id", thread_id)
        yield from self.lock_for_delete_op([thread_id])
        yield from self.delete_whole_op([thread_id])
        self.append_cache.forget_thread(thread_id)

    def copy_thread_op(self, source_thread_id: str, target_thread_id: str) -> Op[None]:
        """Copy a thread's whole history, every namespace, to another thread id.

        Postgres copies the rows in one statement, unless the serializer seals
        values to their thread: then they go through the client, re-sealed
        for the target (`copy_thread_resealed_op`). The caller runs it in one
        transaction, which holds the target's maintenance lock shared, as a put.
        """
        source = check_id("thread_id", source_thread_id)
        target = check_id("thread_id", target_thread_id)
        key = maintenance_lock_key(target, self.schema)
        yield Stmt("lock_thread_for_saving", {"lock_key": key}, fetch=True)
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
        """Prune threads in one transaction; the caller runs it in one (`conflict_retries`).

        `keep_latest` keeps the newest checkpoint of every namespace, plus the
        ancestors and writes it needs to be rebuilt (a `DeltaChannel` between
        snapshots), and deletes the rest, with the subgraph namespaces that
        ran from what it deletes.
        """
        ids = check_id_list("thread_ids", thread_ids)
        check_prune_strategy(strategy, "prune")
        if not ids:
            return
        yield from self.lock_for_delete_op(ids)
        if strategy == "delete":
            yield from self.delete_whole_op(ids)
            for thread_id in ids:
                self.append_cache.forget_thread(thread_id)
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
        doomed = yield from self.with_hanging_op(ids, doomed)
        yield from self._delete_checkpoints_op(doomed)

    def delete_for_runs_op(self, run_ids: Sequence[str]) -> Op[None]:
        """Delete the checkpoints (and their writes) that the given runs created.

        Checkpoints of other runs that still need a deleted one to be rebuilt
        (their `DeltaChannel` history runs through it) keep it; subgraph
        namespaces that ran from a deleted one go with it.
        """
        ids = check_id_list("run_ids", run_ids, kind="run_id")
        if not ids:
            return
        yield Stmt("read_committed")
        rows = yield Stmt("run_checkpoints", {"run_ids": ids}, fetch=True)
        locked: set[str] = set()
        while True:
            # Under the locks, read again: a run may have saved to another thread meanwhile.
            threads = {r["thread_id"] for r in rows}
            if threads <= locked:
                break
            yield from self._lock_threads_op(sorted(threads - locked))
            locked |= threads
            rows = yield Stmt("run_checkpoints", {"run_ids": ids}, fetch=True)
        if not rows:
            return
        thread_ids = sorted({r["thread_id"] for r in rows})
        doomed_keys = {row_key(r) for r in rows}
        every = yield Stmt("thread_checkpoint_ids", {"thread_ids": thread_ids}, fetch=True)
        survivors = [r for r in every if row_key(r) not in doomed_keys]
        needed = yield from self.needed_for_op(survivors)
        doomed = [r for r in rows if row_key(r) not in needed]
        doomed = yield from self.with_hanging_op(thread_ids, doomed)
        yield from self._delete_checkpoints_op(doomed)

    def lock_for_delete_op(self, thread_ids: Sequence[str]) -> Op[None]:
        """Start a delete's transaction: READ COMMITTED, then the threads' maintenance locks."""
        yield Stmt("read_committed")
        yield from self._lock_threads_op(thread_ids)

    def delete_whole_op(self, thread_ids: Sequence[str]) -> Op[None]:
        """Delete threads whole, under their locks, until a new snapshot shows nothing left."""
        left = list(thread_ids)
        for _ in range(_ROUNDS):
            yield Stmt("delete_threads", {"thread_ids": left})
            rows = yield Stmt("thread_rows_left", {"thread_ids": left}, fetch=True)
            left = [r["thread_id"] for r in rows]
            if not left:
                return
        raise ThreadConflictError(
            left,
            f"threads {left!r} were written to again each of the {_ROUNDS} times they were "
            "deleted, by a writer that does not wait for the delete (an older pgcheckpoint, "
            "or SQL of your own); nothing was deleted: stop that writer, then retry",
        )

    def _lock_threads_op(self, thread_ids: Sequence[str]) -> Op[None]:
        keys = [maintenance_lock_key(t, self.schema) for t in thread_ids]
        yield Stmt("lock_threads_for_maintenance", {"keys": keys}, fetch=True)

    def with_hanging_op(self, thread_ids: Sequence[str], doomed: Sequence[Row]) -> Op[list[Row]]:
        """`doomed`, and the checkpoints of the subgraph namespaces that hang off it.

        See `hanging_namespaces` in `sql/queries/_fragments.sql`.
        """
        params = {**checkpoint_keys(doomed), "scope_ids": list(thread_ids)}
        hanging = yield Stmt("hanging_checkpoints", params, fetch=True)
        everything = {row_key(r): r for r in doomed}
        for row in hanging:
            everything.setdefault(row_key(row), row)
        return list(everything.values())

    def needed_for_op(self, kept: Iterable[Row]) -> Op[set[tuple[str, str, str]]]:
        kept = list(kept)
        if not kept:
            return set()
        rows = yield Stmt("rebuild_dependencies", checkpoint_keys(kept), fetch=True)
        return {row_key(r) for r in rows}

    def _delete_checkpoints_op(self, doomed: Sequence[Row]) -> Op[None]:
        if not doomed:
            return
        yield Stmt("delete_checkpoints", checkpoint_keys(doomed))


def conflict_retries(
    make: Callable[[], Op[T]], what: str, thread_ids: Sequence[str] = ()
) -> Sweep[T]:
    """Run the delete `make()` returns, in a transaction; again when it conflicts.

    A deadlock with another delete, or a foreign-key violation or lock timeout
    caused by a writer that takes no lock, rolls the transaction back; the
    delete runs again, up to three times, then raises `ThreadConflictError`.

    Example:
        >>> prune = lambda: saver.prune_op(["t1"])  # doctest: +SKIP
        >>> saver.run_each(conflict_retries(prune, "prune", ["t1"]))  # doctest: +SKIP
    """
    attempt = 1
    while True:
        try:
            result: T = yield make()
            return result
        except CONFLICTS as exc:
            reason = f"{type(exc).__name__}: {str(exc).strip()}"
            if attempt >= _ATTEMPTS:
                raise ThreadConflictError(
                    list(thread_ids),
                    f"{what} conflicted with concurrent work on its threads {_ATTEMPTS} "
                    f"times ({reason}); nothing was deleted: retry later",
                ) from exc
            logger.info("%s conflicted with concurrent work (%s); running it again", what, reason)
            attempt += 1

"""Copy threads from `langgraph-checkpoint-postgres` tables into pgcheckpoint's, without I/O.

The official saver keeps a checkpoint as JSONB with its primitive channel
values inline (`checkpoints`), the other values as serialised bytes per channel
version (`checkpoint_blobs`), and pending writes as serialised bytes
(`checkpoint_writes`). `import_sweep` copies threads from those tables a
page of checkpoints at a time: it reads a page on a saver over the official
tables (the source, perhaps on another database, as `On(source, op)`), then
stores it with one `insert_copied_rows` statement on the saver that runs the
sweep; rows already there are left alone, so an import can be re-run and
resumed. The command `pgcheckpoint import-langgraph` runs it.

Values go through pgcheckpoint's core: serialised bytes are kept as they are
(the official saver and pgcheckpoint both default to LangGraph's
`JsonPlusSerializer`) and packed the way the savers store them, compressed and,
with an encrypting serializer, sealed to their new location. With
`source_serde`, values are decoded with it and serialised again instead.

Checkpoints older than format v4 kept the sends of a step as writes to the
`__pregel_tasks` channel of their parent; they are copied as they are, writes
of the parent, and a read moves them into the checkpoint as it does for any
such checkpoint (`pgcheckpoint.core.sends`), as the official saver reads them.

Example:
    >>> from pgcheckpoint.maintenance.importer import LangGraphImporter, import_sweep
    >>> source = PostgresSaver(conn, schema="public")  # doctest: +SKIP
    >>> stats = saver.run_each(import_sweep(LangGraphImporter(saver), source))  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import DataError

from ..codec.binding import Columns, as_sealer, binding
from ..codec.integrity import add_structure, projection_keys
from ..core.copies import COPIED_BLOB_COLUMNS, COPIED_CHECKPOINT_COLUMNS, COPIED_WRITE_COLUMNS
from ..core.state import SaverState
from ..errors import InvalidInputError, PgCheckpointError
from ..ops import On, Op, Stmt, Sweep
from ..validate import check_count, check_id

__all__ = ["ImportStats", "LangGraphImporter", "SourceSchemaError", "import_sweep"]

# The official saver's migrations up to the one adding checkpoint_writes.task_path.
REQUIRED_SOURCE_MIGRATION = 9
_SOURCE_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


class SourceSchemaError(PgCheckpointError):
    """The official saver's tables are missing or older than the importer reads.

    Example:
        >>> str(SourceSchemaError("no table 'checkpoints'"))
        "no table 'checkpoints'"
    """


@dataclass
class ImportStats:
    """What an import did.

    Attributes:
        threads: Threads read from the source (a thread named but not found there
            is in `failed`, not here).
        checkpoints: Checkpoints copied.
        checkpoints_present: Checkpoints left alone because they were already there.
        blobs: Channel values copied (values already there are skipped by the database).
        writes: Pending writes sent (writes already there are skipped by the database).
        failed: Threads not copied, with the reason (a sweep goes on with the others).

    Example:
        >>> ImportStats(threads=1).checkpoints
        0
    """

    threads: int = 0
    checkpoints: int = 0
    checkpoints_present: int = 0
    blobs: int = 0
    writes: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    def add(self, other: ImportStats) -> None:
        """Add another import's counts to these.

        Example:
            >>> total = ImportStats(); total.add(ImportStats(threads=2)); total.threads
            2
        """
        self.threads += other.threads
        self.checkpoints += other.checkpoints
        self.checkpoints_present += other.checkpoints_present
        self.blobs += other.blobs
        self.writes += other.writes
        self.failed.update(other.failed)


class LangGraphImporter:
    """Turns rows of the official saver's tables into pgcheckpoint's rows.

    Args:
        core: The pgcheckpoint saver (or a bare `SaverState`) whose serializer,
            compression and encryption the copied values get.
        source_serde: The serializer the official saver was configured with,
            when it differs from `core`'s; values are then decoded and
            serialised again. By default serialised bytes are kept as they are.
        batch_size: Checkpoints per page (per statement and transaction).

    Example:
        >>> importer = LangGraphImporter(SaverState(), batch_size=50)
        >>> importer.batch_size
        50
    """

    def __init__(
        self,
        core: SaverState,
        *,
        source_serde: SerializerProtocol | None = None,
        batch_size: int = 200,
    ) -> None:
        check_count("batch_size", batch_size, minimum=1)
        self.core = core
        self.source_serde = source_serde
        self.batch_size = batch_size

    # -- source ----------------------------------------------------------------------------

    def check_source_op(self, schema: str) -> Op[int]:
        """Check the official tables are there and new enough; return their thread count."""
        rows = yield Stmt(
            "lg_source_tables", {"schema": schema, "tables": list(_SOURCE_TABLES)}, fetch=True
        )
        found = {r["table_name"] for r in rows}
        missing = [t for t in _SOURCE_TABLES if t not in found]
        if missing:
            raise SourceSchemaError(
                f"schema {schema!r} has no langgraph-checkpoint-postgres table "
                f"{missing[0]!r}; pass the database with --from-dsn and the schema with "
                "--from-schema"
            )
        rows = yield Stmt("lg_migration_version", fetch=True)
        version = rows[0]["v"] if rows else None
        if version is None or version < REQUIRED_SOURCE_MIGRATION:
            raise SourceSchemaError(
                f"the langgraph-checkpoint-postgres tables in schema {schema!r} are at "
                f"migration {version!r}; the importer reads migration "
                f"{REQUIRED_SOURCE_MIGRATION} or later: call setup() of a current "
                "langgraph-checkpoint-postgres PostgresSaver on them first"
            )
        rows = yield Stmt("lg_count_threads", fetch=True)
        return int(rows[0]["threads"])

    def thread_ids_op(self, after: str | None, limit: int = 1000) -> Op[list[str]]:
        """The next thread ids of the source after `after`, in order."""
        rows = yield Stmt("lg_thread_ids", {"after": after, "limit": limit}, fetch=True)
        return [str(r["thread_id"]) for r in rows]

    # -- one thread -----------------------------------------------------------------------

    def source_page_op(
        self, thread_id: str, after: tuple[str, str] | None, present: set[tuple[str, str]]
    ) -> Op[tuple[list[dict[str, Any]], dict[str, Any], int]]:
        """Read a page of a thread's checkpoints from the source, with what they refer to.

        Returns the page and the parameters of `insert_copied_rows` for the
        checkpoints of it not `present` yet (their writes are still sent, so
        writes added since an earlier run arrive), and how many were present.
        """
        page = yield Stmt(
            "lg_checkpoints_page",
            {
                "thread_id": thread_id,
                "after_ns": None if after is None else after[0],
                "after_id": None if after is None else after[1],
                "limit": self.batch_size,
            },
            fetch=True,
        )
        if not page:
            return page, {}, 0
        todo = [r for r in page if (r["checkpoint_ns"], r["checkpoint_id"]) not in present]
        writes = yield Stmt(
            "lg_writes_of_checkpoints",
            {
                "thread_id": thread_id,
                "checkpoint_nss": [r["checkpoint_ns"] for r in page],
                "checkpoint_ids": [r["checkpoint_id"] for r in page],
            },
            fetch=True,
        )
        blobs: list[dict[str, Any]] = []
        if todo:
            wanted = sorted(
                {
                    (r["checkpoint_ns"], str(channel), str(version))
                    for r in todo
                    for channel, version in _versions(r["checkpoint"]).items()
                }
            )
            blobs = yield Stmt(
                "lg_blobs",
                {
                    "thread_id": thread_id,
                    "checkpoint_nss": [w[0] for w in wanted],
                    "channels": [w[1] for w in wanted],
                    "versions": [w[2] for w in wanted],
                },
                fetch=True,
            )
        params = self.page_params(thread_id, todo, blobs, writes)
        return page, params, len(page) - len(todo)

    def import_thread_sweep(self, thread_id: str, source: Any) -> Sweep[ImportStats]:
        """Copy one thread, a page of checkpoints per transaction.

        Checkpoints already in pgcheckpoint's tables are skipped; their pending
        writes are still sent, so writes added since an earlier run arrive.
        """
        thread_id = check_id("thread_id", thread_id)
        stats = ImportStats()
        rows = yield _fetch(Stmt("thread_checkpoint_ids", {"thread_ids": [thread_id]}, fetch=True))
        present = {(r["checkpoint_ns"], r["checkpoint_id"]) for r in rows}
        after: tuple[str, str] | None = None
        while True:
            page, params, skipped = yield On(source, self.source_page_op(thread_id, after, present))
            if not page:
                return stats
            stats.threads = 1
            stats.checkpoints_present += skipped
            yield _fetch(Stmt("insert_copied_rows", params))
            stats.checkpoints += len(params["checkpoint_id"])
            stats.blobs += len(params["blob_type"])
            stats.writes += len(params["write_type"])
            if len(page) < self.batch_size:
                return stats
            last = page[-1]
            after = (last["checkpoint_ns"], last["checkpoint_id"])

    # -- conversion -------------------------------------------------------------------------

    def page_params(
        self,
        thread_id: str,
        checkpoints: Sequence[Mapping[str, Any]],
        blobs: Sequence[Mapping[str, Any]],
        writes: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        """The parameters of `insert_copied_rows` for one page of source rows.

        Args:
            thread_id: The thread.
            checkpoints: Rows of `checkpoints` (checkpoint and metadata as dicts).
            blobs: Rows of `checkpoint_blobs` the checkpoints refer to.
            writes: Rows of `checkpoint_writes` of the checkpoints.

        Example:
            >>> params = LangGraphImporter(SaverState()).page_params("t1", [], [], [])
            >>> params["checkpoint_id"], params["write_blob"]
            ([], [])
        """
        stored = {
            (b["checkpoint_ns"], b["channel"], b["version"]): b
            for b in blobs
            if b["type"] != "empty"
        }
        rows = [self.checkpoint_row(thread_id, source, stored) for source in checkpoints]
        params: dict[str, Any] = {"thread_id": thread_id}
        for column in COPIED_CHECKPOINT_COLUMNS:
            params[column] = [r[column] for r in rows]
        blob_rows = [self.blob_row(thread_id, b) for b in blobs]
        for column in COPIED_BLOB_COLUMNS:
            # the official saver stores whole values: no delta has a base
            params[f"blob_{column}"] = [b.get(column) for b in blob_rows]
        write_rows = [self.write_row(thread_id, w) for w in writes]
        for column in COPIED_WRITE_COLUMNS:
            params[f"write_{column}"] = [w[column] for w in write_rows]
        return params

    def checkpoint_row(
        self,
        thread_id: str,
        source: Mapping[str, Any],
        stored: Mapping[tuple[str, str, str], Mapping[str, Any]],
    ) -> dict[str, Any]:
        """One checkpoint as pgcheckpoint stores it.

        Args:
            thread_id: The thread.
            source: A row of `checkpoints`.
            stored: The non-empty source blobs, by (checkpoint_ns, channel, version).
        """
        ns = check_id("checkpoint_ns", source["checkpoint_ns"])
        checkpoint_id = check_id("checkpoint_id", source["checkpoint_id"])
        parent_id = source["parent_checkpoint_id"]
        if parent_id is not None:
            parent_id = check_id("checkpoint_id", parent_id)
        checkpoint = dict(source["checkpoint"])
        versions = _versions(checkpoint)
        # A stored value wins over the inline one, as when the official saver reads
        # it: a DeltaChannel snapshot leaves an inline `true` marker beside its blob.
        inline = {
            channel: value
            for channel, value in (checkpoint.get("channel_values") or {}).items()
            if channel not in versions or (ns, channel, str(versions[channel])) not in stored
        }
        record = {
            k: v for k, v in checkpoint.items() if k not in ("channel_values", "channel_versions")
        }
        record["channel_values"] = inline
        sealed_parent = None
        if as_sealer(self.core.serde) is not None:
            held = {(c, str(v)) for (n, c, v) in stored if n == ns}
            add_structure(
                record,
                parent=parent_id,
                versions=versions,
                stored=[
                    ch
                    for ch, v in versions.items()
                    if ch not in inline and (str(ch), str(v)) in held
                ],
            )
            sealed_parent = parent_id or ""
        where = (thread_id, ns, checkpoint_id)
        type_, data = self.core.dump_value(record, binding("checkpoint", *where))
        metadata = dict(source["metadata"] or {})
        projection = self.core.metadata_projection(metadata)
        metadata_type, metadata_blob = self.core.dump_value(
            metadata, binding("metadata", *where), (projection_keys(projection),)
        )
        run_id = metadata.get("run_id")
        row = {
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent_id,
            "sealed_parent_id": sealed_parent,
            "run_id": None if run_id is None else str(run_id),
            "type": type_,
            "checkpoint": data,
            "channel_versions": json.dumps(versions),
            "inline_channels": json.dumps(list(inline)),
            "metadata_type": metadata_type,
            "metadata_blob": metadata_blob,
            "metadata": json.dumps(projection),
            "created_at": _created_at(checkpoint.get("ts")),
        }
        return row

    def blob_row(self, thread_id: str, source: Mapping[str, Any]) -> dict[str, Any]:
        """One row of `checkpoint_blobs` as pgcheckpoint stores it.

        Example:
            >>> row = LangGraphImporter(SaverState()).blob_row(
            ...     "t1", {"checkpoint_ns": "", "channel": "c", "version": "1",
            ...            "type": "empty", "blob": None})
            >>> row["type"], row["blob"]
            ('empty', None)
        """
        ns = check_id("checkpoint_ns", source["checkpoint_ns"])
        channel = check_id("channel", source["channel"])
        version = str(source["version"])
        type_, data = source["type"], source["blob"]
        if type_ != "empty":
            aad = binding("blob", thread_id, ns, channel, version)
            type_, data = self._repack(type_, data, aad, (None,))
        return {
            "checkpoint_ns": ns,
            "channel": channel,
            "version": version,
            "type": type_,
            "blob": data,
        }

    def write_row(self, thread_id: str, source: Mapping[str, Any]) -> dict[str, Any]:
        """One row of `checkpoint_writes` as pgcheckpoint stores it."""
        ns = check_id("checkpoint_ns", source["checkpoint_ns"])
        checkpoint_id = check_id("checkpoint_id", source["checkpoint_id"])
        task_id = check_id("task_id", source["task_id"])
        idx = int(source["idx"])
        if source["type"] is None:
            raise InvalidInputError(
                f"write {idx} of task {task_id!r} at checkpoint {checkpoint_id!r} has no "
                "type, so no serializer can read it; delete that row from checkpoint_writes"
            )
        aad = binding("write", thread_id, ns, checkpoint_id, task_id, idx)
        task_path = check_id("task_path", source["task_path"] or "")
        channel = check_id("channel", source["channel"])
        type_, data = self._repack(source["type"], source["blob"], aad, (channel, task_path))
        return {
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "idx": idx,
            "channel": channel,
            "type": type_,
            "blob": data,
        }

    def _repack(self, type_: str, data: bytes, aad: bytes, columns: Columns) -> tuple[str, bytes]:
        if self.source_serde is None:
            return self.core.pack_value(type_, bytes(data), aad, columns)
        return self.core.dump_value(self._load(type_, data), aad, columns)

    def _load(self, type_: str, data: bytes) -> Any:
        serde = self.source_serde or self.core.inner_serde
        try:
            return serde.loads_typed((type_, data))
        except NotImplementedError as exc:  # a type the serializer has no decoder for
            raise InvalidInputError(
                f"a value of type {type_!r} that the serializer cannot read: pass the "
                "serializer the official saver was configured with (source_serde=, "
                "--from-serde)"
            ) from exc


def import_sweep(
    importer: LangGraphImporter,
    source: Any,
    thread_ids: Iterable[str] | None = None,
    *,
    progress: Callable[[str, Exception | None], None] | None = None,
) -> Sweep[ImportStats]:
    """Copy threads from the official tables that `source` (a saver) reads.

    Run it with the target saver's `run_each`; `source` is a saver of the same
    kind (sync or async) whose schema holds the official tables. A thread that
    cannot be copied (an id too long, a value no serializer reads), or a thread
    named in `thread_ids` that the source does not hold, is recorded in
    `failed` and the sweep goes on; what was copied is kept.

    Args:
        importer: How rows are converted (serializers, page size).
        source: The saver over the official saver's tables.
        thread_ids: The threads to copy (default: every thread of the source).
        progress: Called after each thread with its id and its error, if any.

    Example:
        >>> stats = saver.run_each(import_sweep(importer, source))  # doctest: +SKIP
        >>> stats.checkpoints  # doctest: +SKIP
        120
    """
    stats = ImportStats()

    def copy(thread_id: str, *, named: bool) -> Sweep[None]:
        error: Exception | None = None
        try:
            copied = yield from importer.import_thread_sweep(thread_id, source)
            if named and not copied.threads:
                raise InvalidInputError(
                    f"the official saver's tables in schema {source.schema!r} have no thread "
                    f"{thread_id!r}; check the id, and that the source is the official "
                    "saver's database and schema (--from-dsn, --from-schema)"
                )
            stats.add(copied)
        except (ValueError, DataError) as exc:
            error = exc
            stats.failed[str(thread_id)] = str(exc)
        if progress is not None:
            progress(str(thread_id), error)

    if thread_ids is not None:
        for thread_id in dict.fromkeys(thread_ids):
            yield from copy(thread_id, named=True)
        return stats
    after: str | None = None
    while True:
        ids = yield On(source, importer.thread_ids_op(after))
        if not ids:
            return stats
        for thread_id in ids:
            yield from copy(thread_id, named=False)
        after = ids[-1]


def _fetch(stmt: Stmt) -> Op[list[Any]]:
    rows = yield stmt
    return rows


def _versions(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    return dict(checkpoint.get("channel_versions") or {})


def _created_at(ts: Any) -> datetime:
    """When a checkpoint was made, from its `ts` (retention goes by it); now if unreadable."""
    if isinstance(ts, str):
        try:
            when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return datetime.now(timezone.utc)

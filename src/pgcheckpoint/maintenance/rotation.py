"""Key rotation: re-encrypt every stored value that is not under the active key.

The work is a sweep (`rotation_sweep`, see `pgcheckpoint.ops`) that either
saver runs with `run_each`; `rotate_key` runs it on a sync saver over a
conninfo, a connection or a pool. Each page of rows is read, re-encrypted in
the client with the same row binding, and written back by one `UPDATE` that
only touches a row still holding what was read, so the application can keep
running: a value it saves meanwhile is left as it saved it. Only rows not yet
under the active key are selected, so an interrupted run resumes where it
stopped when started again. The savers' tables go first, then the store's
items (`pgc_store`, `pgcheckpoint.store.values.reseal_item`), which the
`UPDATE` locks in key order as the store's own writes do.

Example:
    >>> from pgcheckpoint.drivers.rotate_key import rotate_key
    >>> from pgcheckpoint.maintenance.rotation import rotation_sweep
    >>> report = rotate_key("postgresql://postgres@127.0.0.1/app")  # doctest: +SKIP
    >>> report.remaining  # doctest: +SKIP
    {}
    >>> report = await saver.run_each(rotation_sweep(saver))  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..codec.binding import FORMAT_2, binding
from ..codec.crypto import EncryptedSerde
from ..codec.labels import LANGGRAPH_EAX_LABEL, PLAINTEXT_LABEL, cipher_label
from ..codec.metadata import json_projection
from ..core.reseal import reseal_blob, reseal_checkpoint, reseal_metadata, reseal_write
from ..core.state import SaverState
from ..errors import InvalidInputError
from ..ops import Op, Row, Stmt, Sweep
from ..store.values import reseal_item
from ..validate import check_count

__all__ = ["DEFAULT_BATCH_SIZE", "VALUE_KINDS", "Progress", "RotationReport", "rotation_sweep"]

# The kinds of stored values, as `count_values_by_cipher` names them (`items`: the store's).
VALUE_KINDS = ("checkpoints", "metadata", "blobs", "writes", "items")
# Tables in the order they are rotated, with their primary key columns.
_TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "checkpoints": ("thread_id", "checkpoint_ns", "checkpoint_id"),
    "blobs": ("thread_id", "checkpoint_ns", "channel", "version"),
    "writes": ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
    "items": ("ns", "key"),
}
DEFAULT_BATCH_SIZE = 500
_UNSEALED_LABELS = (PLAINTEXT_LABEL, LANGGRAPH_EAX_LABEL)

Progress = Callable[[int, int], None]


@dataclass
class RotationReport:
    """What a rotation found and did.

    Attributes:
        active: The key id values are re-encrypted under.
        counts: Stored values per key label (a key id, `(plaintext)` or
            `(langgraph-eax)`) and kind (`checkpoints`, `metadata`, `blobs`,
            `writes`, and `items` of the store), before the run.
        to_rotate: Values that were not under the active key before the run.
        rotated: Values re-encrypted.
        skipped: Rows the application saved again while they were being
            re-encrypted; left as it saved them.
        remaining: Values still not under the active key after the run, per key
            label (empty when the old keys can be removed); `None` on a dry run.

    Example:
        >>> RotationReport(active="k2").rotated
        0
    """

    active: str
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    to_rotate: int = 0
    rotated: int = 0
    skipped: int = 0
    remaining: dict[str, int] | None = None


def value_counts_op() -> Op[dict[str, dict[str, int]]]:
    """Stored values per key label and kind.

    Example:
        >>> next(value_counts_op()).name
        'count_values_by_cipher'
    """
    rows = yield Stmt("count_values_by_cipher", fetch=True)
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        label = cipher_label(row["type"])
        per_kind = counts.setdefault(label, dict.fromkeys(VALUE_KINDS, 0))
        per_kind[row["kind"]] += int(row["n"])
    return counts


def not_active(counts: dict[str, dict[str, int]], active: str) -> dict[str, int]:
    """Values per key label that are not under `active`.

    Example:
        >>> not_active({"k1": {"blobs": 2}, "k2": {"blobs": 1}}, "k2")
        {'k1': 2}
    """
    totals = {label: sum(per_kind.values()) for label, per_kind in counts.items()}
    return {label: n for label, n in totals.items() if label != active and n > 0}


def rotate_page_op(
    core: SaverState,
    table: str,
    after: Row | None,
    limit: int,
    *,
    store_filterable: frozenset[str] = frozenset(),
) -> Op[tuple[int, int, Row | None]]:
    """Re-encrypt one page of `table` under the active key, in row format 2.

    Returns the values re-encrypted, the rows skipped because the application
    changed them meanwhile, and the row to continue after (`None` once the
    table is done). A row sealed by pgcheckpoint 0.1.0, by LangGraph or
    stored in clear gains the row format 2 structure from its columns as they
    are (`pgcheckpoint.core.reseal`); one in format 2 is checked against its
    sealed record first. A store item stored in clear keeps only the
    `store_filterable` fields readable (`pgcheckpoint.store.values.reseal_item`).

    Example:
        >>> op = rotate_page_op(SaverState(serde=serde), "blobs", None, 100)  # doctest: +SKIP
    """
    serde = core.serde
    if not isinstance(serde, EncryptedSerde):
        raise InvalidInputError("key rotation needs the saver's serde to be an EncryptedSerde")
    key_columns = _TABLE_KEYS[table]
    params: dict[str, Any] = {"suffix": serde.active_suffix, "limit": limit}
    params.update({f"after_{c}": None if after is None else after[c] for c in key_columns})
    rows = yield Stmt(f"rotation_{table}_page", params, fetch=True)
    if not rows:
        return 0, 0, None

    def current(type_: str) -> bool:
        return type_.endswith(serde.active_suffix)

    update: dict[str, list[Any]] = {c: [r[c] for r in rows] for c in key_columns}
    resealed: dict[tuple[Any, ...], int] = {}
    values: list[Any]
    if table == "checkpoints":
        columns: tuple[str, ...] = (
            "old_type",
            "old_digest",
            "old_metadata_type",
            "old_metadata_digest",
            "old_columns_digest",
            "type",
            "checkpoint",
            "metadata_type",
            "metadata_blob",
            "metadata",
            "sealed_parent_id",
        )
        update.update({c: [] for c in columns})
        for row in rows:
            thread_id = row["thread_id"]
            type_, data, sealed_parent = row["type"], row["checkpoint"], row["sealed_parent_id"]
            if not current(type_):
                type_, data, sealed_parent = reseal_checkpoint(
                    core, row, thread_id, thread_id, row["stored_channels"]
                )
            mtype, mdata, projection = row["metadata_type"], row["metadata_blob"], None
            if not current(mtype):
                readable = _readable_metadata(core, row)
                mtype, mdata = reseal_metadata(core, row, thread_id, thread_id, readable)
                if readable is not None:
                    projection = json.dumps(readable, ensure_ascii=False)
            values = [row["type"], _digest(row["checkpoint"]), row["metadata_type"]]
            values += [_digest(row["metadata_blob"]), row["columns_digest"]]
            values += [type_, data, mtype, mdata, projection, sealed_parent]
            for column, value in zip(columns, values, strict=True):
                update[column].append(value)
            where = tuple(row[c] for c in key_columns)
            resealed[where] = int(type_ != row["type"]) + int(mtype != row["metadata_type"])
    elif table == "items":
        columns = ("old_type", "old_digest", "old_doc", "type", "value", "doc")
        update.update({c: [] for c in columns})
        for row in rows:
            type_, data, doc = reseal_item(
                core,
                row["ns"],
                row["key"],
                row["type"],
                row["value"],
                row["doc"],
                filterable=store_filterable,
            )
            values = [row["type"], _digest(row["value"]), json.dumps(row["doc"]), type_, data, doc]
            for column, value in zip(columns, values, strict=True):
                update[column].append(value)
            resealed[(row["ns"], row["key"])] = 1
    else:
        reseal = reseal_blob if table == "blobs" else reseal_write
        if table == "blobs":
            columns = ("old_type", "old_digest", "old_base", "type", "blob")
        else:
            columns = ("old_type", "old_digest", "old_channel", "old_task_path", "type", "blob")
        update.update({c: [] for c in columns})
        for row in rows:
            type_, data = reseal(core, row, row["thread_id"], row["thread_id"])
            values = [row["type"], _digest(row["blob"])]
            if table == "blobs":
                values.append(row["base_version"])
            else:
                values += [row["channel"], row["task_path"]]
            values += [type_, data]
            for column, value in zip(columns, values, strict=True):
                update[column].append(value)
            resealed[tuple(row[c] for c in key_columns)] = 1
    updated = yield Stmt(f"rotation_update_{table}", update, fetch=True)
    done = sum(resealed[tuple(r[c] for c in key_columns)] for r in updated)
    last = rows[-1] if len(rows) == limit else None
    return done, len(rows) - len(updated), last


def _readable_metadata(core: SaverState, row: Row) -> dict[str, Any] | None:
    """The readable metadata column a row gets when its metadata is sealed anew.

    Rows sealed in row format 2 keep theirs (checked against the sealed
    metadata). Others get it from their metadata: all of it was readable in
    rows written without pgcheckpoint's encryption, and is cut down to the
    filterable keys; rows sealed by pgcheckpoint 0.1.0 keep the keys chosen
    when they were written, with the values of their sealed metadata.
    """
    if core.sealed_format(row["metadata_type"]) == FORMAT_2:
        return None
    where = (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])
    metadata = core.load_value(
        row["metadata_type"], row["metadata_blob"], binding("metadata", *where)
    )
    if cipher_label(row["metadata_type"]) in _UNSEALED_LABELS:
        return dict(core.metadata_projection(metadata))
    sealed = json_projection(dict(metadata))[0] if isinstance(metadata, Mapping) else {}
    return {k: sealed[k] for k in row["metadata"] or {} if k in sealed}


def _digest(data: bytes | None) -> bytes:
    return hashlib.sha256(data or b"").digest()


def rotation_sweep(
    core: SaverState,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    progress: Progress | None = None,
    store_filterable: Iterable[str] = (),
) -> Sweep[RotationReport]:
    """Re-encrypt every stored value under the active key of `core.serde`, in batches.

    Run it with `saver.run_each(...)` (or `await saver.run_each(...)`); each
    page is one transaction. The arguments are those of `rotate_key`.

    Example:
        >>> report = await saver.run_each(rotation_sweep(saver))  # doctest: +SKIP
        >>> report.remaining  # doctest: +SKIP
        {}
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive int, not {batch_size!r}")
    check_count("batch_size", batch_size, minimum=1)
    serde = core.serde
    if not isinstance(serde, EncryptedSerde):
        raise InvalidInputError(
            f"key rotation needs the saver's serde to be an EncryptedSerde, not "
            f"{type(serde).__name__}"
        )
    if isinstance(store_filterable, str):
        raise InvalidInputError("store_filterable must be a list of field names, not one string")
    filterable = frozenset(store_filterable)
    return _rotate(core, serde, batch_size, dry_run, progress, filterable)


def _rotate(
    core: SaverState,
    serde: EncryptedSerde,
    batch_size: int,
    dry_run: bool,
    progress: Progress | None,
    filterable: frozenset[str],
) -> Sweep[RotationReport]:
    report = RotationReport(active=serde.active)
    report.counts = yield value_counts_op()
    report.to_rotate = sum(not_active(report.counts, serde.active).values())
    if dry_run:
        return report
    done = 0
    if progress is not None:
        progress(done, report.to_rotate)
    for table in _TABLE_KEYS:
        after: Row | None = None
        while True:
            page = rotate_page_op(core, table, after, batch_size, store_filterable=filterable)
            values, skipped, after = yield page
            report.rotated += values
            report.skipped += skipped
            done += values
            if progress is not None and values:
                progress(done, max(done, report.to_rotate))
            if after is None:
                break
    report.remaining = not_active((yield value_counts_op()), serde.active)
    return report

"""Sealing stored rows again: for another thread, under the active key, in row format 2.

`copy_thread` with encryption re-seals every value for its new thread, and
`pgcheckpoint rotate-key` re-seals values under the active key; both write
row format 2 (`pgcheckpoint.codec.binding`). A row already in format 2 is checked
against its sealed record first, so an altered column is never carried into
a copy or a rotation. A row sealed by pgcheckpoint 0.1.0, by LangGraph's own
serializer or stored in clear gains the structure its format-2 record holds
from its columns as they are, which nothing authenticated before: that is
the one moment they are trusted.

Example:
    >>> saver = SaverState(serde=EncryptedSerde(keys={"k1": key}))  # doctest: +SKIP
    >>> reseal_blob(saver, row, "t1", "t1-copy")  # doctest: +SKIP
    ('msgpack+aesgcm2:k1', b'...')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..codec.binding import (
    FORMAT_2,
    Columns,
    Sealer,
    as_sealer,
    binding,
    describe_row,
    seal_value,
    unseal_value,
)
from ..codec.integrity import (
    add_structure,
    check_checkpoint_columns,
    check_projection,
    projection_keys,
    structure_msgpack,
    with_structure,
)
from ..codec.labels import cipher_label
from ..errors import InvalidInputError, UnreadableValueError
from ..ops import Row
from .state import SaverState

__all__ = ["reseal_blob", "reseal_checkpoint", "reseal_metadata", "reseal_write"]


def _sealer(saver: SaverState) -> Sealer:
    sealer = as_sealer(saver.serde)
    if sealer is None:
        raise InvalidInputError("re-sealing rows needs an encrypting serde (EncryptedSerde)")
    return sealer


def _reseal(
    saver: SaverState,
    type_: str,
    data: bytes | None,
    source: bytes,
    target: bytes,
    columns: Columns,
) -> tuple[str, bytes]:
    sealer = _sealer(saver)
    inner, plain = unseal_value(sealer, type_, data, source, columns)
    return seal_value(sealer, inner, plain, target, columns)


def reseal_checkpoint(
    saver: SaverState, row: Row, source: str, target: str, stored: Iterable[str]
) -> tuple[str, bytes, str]:
    """A checkpoint record sealed for `target`: its type, bytes and `sealed_parent_id`.

    Args:
        row: `checkpoint_ns`, `checkpoint_id`, `parent_checkpoint_id`,
            `sealed_parent_id`, `type`, `checkpoint`, `channel_versions`
            (a dict) and `inline_channels` (a list).
        source: The thread the row is stored under.
        target: The thread it is sealed for.
        stored: The channels with a stored value at the row's versions
            (a record not yet in format 2 gains them as its structure).

    Raises:
        DecryptionError: The row is in format 2 and a column differs from
            its sealed record, or its record cannot be decrypted.
    """
    where = (row["checkpoint_ns"], row["checkpoint_id"])
    src, dst = binding("checkpoint", source, *where), binding("checkpoint", target, *where)
    if saver.sealed_format(row["type"]) == FORMAT_2:
        record = saver.load_value(row["type"], row["checkpoint"], src)
        structure = saver.sealed_structure(record, src, row["type"])
        checked = {
            **row,
            "sealed_inline_channels": row["inline_channels"],
            # a copy keeps sealed_parent_id, and reads of it check the parent again
            "sealed_parent_exists": False,
        }
        label = cipher_label(row["type"])
        check_checkpoint_columns(describe_row(src), label, structure, checked, None)
        type_, data = _reseal(saver, row["type"], row["checkpoint"], src, dst, ())
        return type_, data, row["sealed_parent_id"]
    parent = row["parent_checkpoint_id"]
    versions = row["channel_versions"] or {}
    inner, plain = saver.unpack_value(row["type"], row["checkpoint"], src)
    entries = structure_msgpack(parent, versions, stored)
    grown = with_structure(plain, entries) if inner == "msgpack" else None
    if grown is None:  # not a msgpack map: decode it, and write it again
        record = saver.decode(inner, plain, src)
        if not isinstance(record, dict):
            raise UnreadableValueError(
                f"the {describe_row(src)} is not a checkpoint (it decodes to "
                f"{type(record).__name__}); restore it from a backup, or delete the thread"
            )
        add_structure(record, parent=parent, versions=versions, stored=stored)
        inner, grown = saver.serialize(record, dst)
    type_, data = saver.pack_value(inner, grown, dst)
    return type_, data, parent or ""


def reseal_metadata(
    saver: SaverState,
    row: Row,
    source: str,
    target: str,
    projection: Mapping[str, Any] | None = None,
) -> tuple[str, bytes]:
    """Metadata sealed for `target`, bound to the keys of its readable column.

    Args:
        row: `checkpoint_ns`, `checkpoint_id`, `metadata_type`,
            `metadata_blob` and `metadata` (the readable column, a dict).
        source: The thread the row is stored under.
        target: The thread it is sealed for.
        projection: The readable column the row gets, when it changes.

    Raises:
        DecryptionError: The row is in format 2 and its readable column
            differs from the sealed metadata, or it cannot be decrypted.
    """
    where = (row["checkpoint_ns"], row["checkpoint_id"])
    src, dst = binding("metadata", source, *where), binding("metadata", target, *where)
    columns: Columns = (projection_keys(row["metadata"]),)
    if saver.sealed_format(row["metadata_type"]) == FORMAT_2:
        metadata = saver.load_value(row["metadata_type"], row["metadata_blob"], src, columns)
        label = cipher_label(row["metadata_type"])
        check_projection(describe_row(src), label, metadata, row["metadata"])
    sealer = _sealer(saver)
    inner, plain = unseal_value(sealer, row["metadata_type"], row["metadata_blob"], src, columns)
    keys = columns if projection is None else (projection_keys(projection),)
    return seal_value(sealer, inner, plain, dst, keys)


def reseal_blob(saver: SaverState, row: Row, source: str, target: str) -> tuple[str, bytes | None]:
    """A stored value sealed for `target`, bound to its delta base ('empty' stays).

    Args:
        row: `checkpoint_ns`, `channel`, `version`, `base_version`, `type`, `blob`.
        source: The thread the row is stored under.
        target: The thread it is sealed for.
    """
    if row["type"] == "empty":
        return row["type"], row["blob"]
    where = (row["checkpoint_ns"], row["channel"], row["version"])
    return _reseal(
        saver,
        row["type"],
        row["blob"],
        binding("blob", source, *where),
        binding("blob", target, *where),
        (row["base_version"],),
    )


def reseal_write(saver: SaverState, row: Row, source: str, target: str) -> tuple[str, bytes]:
    """A pending write sealed for `target`, bound to its channel and task path.

    Args:
        row: `checkpoint_ns`, `checkpoint_id`, `task_id`, `idx`, `channel`,
            `task_path`, `type`, `blob`.
        source: The thread the row is stored under.
        target: The thread it is sealed for.
    """
    where = (row["checkpoint_ns"], row["checkpoint_id"], row["task_id"], row["idx"])
    return _reseal(
        saver,
        row["type"],
        row["blob"],
        binding("write", source, *where),
        binding("write", target, *where),
        (row["channel"], row["task_path"]),
    )

"""The columns a read trusts, checked against what a sealed row says (row format 2).

With encryption on, a checkpoint's sealed record carries the structure of its
row under `STRUCTURE_KEY`: its parent, its channel versions, and the channels
whose value is stored in `pgc_blobs` (those kept inline are the record's own
channel values). Reads compare the row's columns with it
(`check_checkpoint_columns`), a stored value's delta chain with its pieces'
authenticated bases (`check_chain`), and the readable metadata projection with
the sealed metadata (`check_projection`). Any difference raises
`DecryptionError` naming the table, the row, the column and the key: an
attacker who can write to the tables but has no key cannot change what a read
returns without it failing.

Plain savers (no encryption) and rows sealed by pgcheckpoint 0.1.0 carry no
structure; nothing is checked for them.

Example:
    >>> record = {"id": "c2", "channel_values": {"n": 1}}
    >>> add_structure(record, parent="c1", versions={"n": "2", "m": "2"}, stored=["m"])
    >>> take_structure(record).stored
    frozenset({'m'})
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ormsgpack

from ..errors import DecryptionError
from .metadata import json_projection

__all__ = [
    "STRUCTURE_KEY",
    "Structure",
    "add_structure",
    "check_chain",
    "check_checkpoint_columns",
    "check_parent",
    "check_projection",
    "seal_id",
    "structure_msgpack",
    "take_structure",
]

# The key of the structure in a format-2 checkpoint record; LangGraph's
# checkpoint keys are short names (`v`, `id`, `ts`, `versions_seen`, ...).
STRUCTURE_KEY = "pgcheckpoint"
_NONCE_AND_TAG = 12, 16


@dataclass(frozen=True)
class Structure:
    """What a checkpoint's sealed record says about its row.

    Attributes:
        parent: The parent checkpoint id, None for a thread's first.
        versions: The channel versions (`channel_versions`).
        inline: The channels whose value is in the record (`inline_channels`).
        stored: The channels whose value is stored in `pgc_blobs`.

    Example:
        >>> Structure(None, {}, frozenset(), frozenset()).parent is None
        True
    """

    parent: str | None
    versions: Mapping[str, str]
    inline: frozenset[str]
    stored: frozenset[str]


def add_structure(
    record: dict[str, Any],
    *,
    parent: str | None,
    versions: Mapping[str, Any],
    stored: Iterable[str],
) -> None:
    """Put the row's structure into a checkpoint record about to be sealed.

    Example:
        >>> record = {"channel_values": {}}
        >>> add_structure(record, parent=None, versions={"a": 1}, stored=["a"])
        >>> record["channel_versions"], record["pgcheckpoint"]
        ({'a': '1'}, {'parent': None, 'stored': ['a']})
    """
    record["channel_versions"] = {k: str(v) for k, v in versions.items()}
    record[STRUCTURE_KEY] = {"parent": parent, "stored": sorted(stored)}


def structure_msgpack(
    parent: str | None, versions: Mapping[str, Any], stored: Iterable[str]
) -> bytes:
    """The entries `add_structure` adds, as msgpack map entries (keys and values).

    `with_structure` appends them to a record serialised without them, so a
    row sealed by pgcheckpoint 0.1.0 gains its structure without decoding the
    rest of its record.

    Example:
        >>> structure_msgpack(None, {}, [])[:17]
        b'\\xb0channel_versions'
    """
    record: dict[str, Any] = {}
    add_structure(record, parent=parent, versions=versions, stored=stored)
    return b"".join(ormsgpack.packb(k) + ormsgpack.packb(v) for k, v in record.items())


def with_structure(data: bytes, entries: bytes, count: int = 2) -> bytes | None:
    """A msgpack map with `count` more entries appended, or None when `data` is no map.

    Example:
        >>> raw = with_structure(ormsgpack.packb({"a": 1}), ormsgpack.packb("b") + b"\\x02", 1)
        >>> ormsgpack.unpackb(raw)
        {'a': 1, 'b': 2}
    """
    if not data:
        return None
    first = data[0]
    if 0x80 <= first <= 0x8F:
        size, header = first & 0x0F, 1
    elif first == 0xDE and len(data) >= 3:
        size, header = int.from_bytes(data[1:3], "big"), 3
    elif first == 0xDF and len(data) >= 5:
        size, header = int.from_bytes(data[1:5], "big"), 5
    else:
        return None
    size += count
    if size <= 0x0F:
        head = bytes([0x80 | size])
    elif size <= 0xFFFF:
        head = b"\xde" + size.to_bytes(2, "big")
    else:
        head = b"\xdf" + size.to_bytes(4, "big")
    return head + data[header:] + entries


def take_structure(record: dict[str, Any]) -> Structure | None:
    """Remove the structure from a decoded checkpoint record and return it.

    The record keeps `channel_versions`; None when the record has no structure
    (a plain saver's, or one sealed by pgcheckpoint 0.1.0).

    Example:
        >>> take_structure({"channel_values": {}}) is None
        True
    """
    raw = record.pop(STRUCTURE_KEY, None)
    if not isinstance(raw, Mapping):
        return None
    versions = record.get("channel_versions")
    return Structure(
        parent=raw.get("parent"),
        versions=dict(versions) if isinstance(versions, Mapping) else {},
        inline=frozenset(record.get("channel_values") or ()),
        stored=frozenset(raw.get("stored") or ()),
    )


def seal_id(data: bytes | None) -> bytes:
    """The nonce and tag of a sealed value: unique to one encryption of one value.

    Example:
        >>> len(seal_id(bytes(40)))
        28
    """
    data = data or b""
    nonce, tag = _NONCE_AND_TAG
    return data[:nonce] + data[-tag:]


def tampered(where: str, key: str, column: str, detail: str) -> DecryptionError:
    """The error for a column that does not match the sealed record of its row.

    Example:
        >>> str(tampered("checkpoint 'c1' (table pgc_checkpoints)", "k1", "run_id", "x"))[:58]
        "checkpoint 'c1' (table pgc_checkpoints), sealed under key "
    """
    return DecryptionError(
        f"{where}, sealed under key {key!r}, was altered: column {column} does not match "
        f"what its sealed record says ({detail}); restore the row from a backup, or delete "
        "the thread"
    )


def check_parent(where: str, key: str, structure: Structure, row: Mapping[str, Any]) -> str | None:
    """The parent a read returns, once the row's parent columns match the sealed one.

    A delete that removes a checkpoint's parent clears `parent_checkpoint_id`
    and leaves `sealed_parent_id`; a cleared parent is accepted only when the
    statement found no checkpoint with the sealed id (`sealed_parent_exists`).

    Raises:
        DecryptionError: A parent column differs from the sealed record.

    Example:
        >>> row = {"parent_checkpoint_id": "c1", "sealed_parent_id": "c1"}
        >>> sealed = Structure("c1", {}, frozenset(), frozenset())
        >>> check_parent("checkpoint 'c2'", "k1", sealed, row)
        'c1'
    """
    sealed = structure.parent
    if row.get("sealed_parent_id") != (sealed or ""):
        raise tampered(
            where,
            key,
            "sealed_parent_id",
            f"it holds {row.get('sealed_parent_id')!r}, the parent is {sealed!r}",
        )
    parent = row.get("parent_checkpoint_id")
    if parent == sealed:
        return parent
    if parent is None and row.get("sealed_parent_exists") is False:
        return None  # the parent was deleted (prune, retention, delete_for_runs)
    if parent is None:
        detail = f"it is NULL, but parent {sealed!r} exists"
    else:
        detail = f"it holds {parent!r}, the parent is {sealed!r}"
    raise tampered(where, key, "parent_checkpoint_id", detail)


def check_checkpoint_columns(
    where: str,
    key: str,
    structure: Structure,
    row: Mapping[str, Any],
    stored: Iterable[str] | None,
) -> str | None:
    """Check a checkpoint row's columns against its sealed structure; return its parent.

    Args:
        where: The row, in words.
        key: The key id (or label) it is sealed under.
        structure: What its sealed record says.
        row: The row: `parent_checkpoint_id`, `sealed_parent_id`,
            `sealed_parent_exists`, `channel_versions`, `sealed_inline_channels`.
        stored: The channels a read found a stored (non-empty) value for, or
            None when the read did not look them all up. Each channel the
            record says it stored must be among them; others may be too (a
            DeltaChannel that did not change keeps the version an earlier
            checkpoint stored a value for).

    Raises:
        DecryptionError: A column differs from the sealed record.

    Example:
        >>> s = Structure(None, {"a": "1"}, frozenset(), frozenset({"a"}))
        >>> row = {"sealed_parent_id": "", "parent_checkpoint_id": None,
        ...        "channel_versions": {"a": "1"}, "sealed_inline_channels": []}
        >>> check_checkpoint_columns("checkpoint 'c1'", "k1", s, row, ["a"]) is None
        True
    """
    parent = check_parent(where, key, structure, row)
    versions = {k: str(v) for k, v in (row.get("channel_versions") or {}).items()}
    if versions != dict(structure.versions):
        changed = sorted(set(versions.items()) ^ set(structure.versions.items()))
        raise tampered(where, key, "channel_versions", f"these entries differ: {changed[:3]!r}")
    inline = row.get("sealed_inline_channels")
    if inline is None or frozenset(inline) != structure.inline:
        raise tampered(
            where,
            key,
            "inline_channels",
            f"it holds {inline!r}, the channels kept inline are {sorted(structure.inline)!r}",
        )
    if stored is not None:
        missing = sorted(structure.stored - frozenset(stored))
        if missing:
            raise DecryptionError(
                f"{where}, sealed under key {key!r}, stored values of channels {missing!r} "
                "that are now missing or marked empty in pgc_blobs; restore the rows from a "
                "backup, or delete the thread"
            )
    return parent


def check_chain(where: str, key: str, pieces: Sequence[tuple[str, str | None]]) -> None:
    """Check a stored value's delta chain: (version, base) of each piece, full value first.

    Each piece's base is authenticated with it (row format 2); the chain the
    statement followed must start at a full value and step from each piece to
    the next by those bases.

    Raises:
        DecryptionError: A base is missing from the chain.

    Example:
        >>> check_chain("value of channel 'm'", "k1", [("v1", None), ("v2", "v1")])
    """
    expected: str | None = None
    for version, base in pieces:
        if base != expected:
            raise DecryptionError(
                f"{where}, sealed under key {key!r}, was altered: version {version!r} is a "
                f"delta on {base!r}, which the read did not find (it found {expected!r}); "
                "restore the rows from a backup, or delete the thread"
            )
        expected = version


def _same_json(have: Any, want: Any) -> bool:
    # What JSONB gives back for what was stored: numbers may come back as
    # another Python type (1e300 as an int), and compare as numbers
    if isinstance(have, bool) or isinstance(want, bool):
        return type(have) is type(want) and have == want
    if isinstance(have, int | float) and isinstance(want, int | float):
        if isinstance(have, float) or isinstance(want, float):
            a, b = float(have), float(want)
            return a == b or (math.isnan(a) and math.isnan(b))
        return have == want
    if isinstance(have, Mapping) and isinstance(want, Mapping):
        return have.keys() == want.keys() and all(_same_json(have[k], want[k]) for k in have)
    if isinstance(have, list) and isinstance(want, list):
        return len(have) == len(want) and all(
            _same_json(a, b) for a, b in zip(have, want, strict=True)
        )
    return bool(have == want)


def projection_keys(projection: Any) -> str:
    """The top-level keys of a metadata projection, as format 2 binds them.

    Example:
        >>> projection_keys({"step": 1, "source": "loop"})
        'source\\x00step'
    """
    if not isinstance(projection, Mapping):
        return ""
    return "\x00".join(sorted(str(k) for k in projection))


def check_projection(where: str, key: str, metadata: Any, projection: Any) -> None:
    """Check the readable metadata column against the sealed metadata.

    Its keys are bound to the sealed metadata (format 2); each value must be
    the metadata's own, as JSONB holds it.

    Raises:
        DecryptionError: A value differs.

    Example:
        >>> check_projection("metadata of checkpoint 'c1'", "k1", {"step": 1}, {"step": 1})
    """
    if not isinstance(projection, Mapping) or not isinstance(metadata, Mapping):
        return
    sealed = json_projection(dict(metadata))[0]
    for name, value in projection.items():
        if name not in sealed or not _same_json(value, sealed[name]):
            raise DecryptionError(
                f"{where}, sealed under key {key!r}, was altered: its readable column "
                f"metadata holds {name!r}: {value!r}, which is not in the sealed metadata; "
                "restore the row from a backup, or delete the thread"
            )

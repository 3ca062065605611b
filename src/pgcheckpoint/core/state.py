"""What every operation of the core shares: settings, caches, values of channels.

`SaverState` is the half of both savers that holds no connection: the
`BaseCheckpointSaver` LangGraph knows, the value codec, the caches within one
budget of bytes, and the helpers that rebuild channel values from stored rows.
The operations (`reads`, `writes`, `delta_history`, `deletes`, `copies`) are
functions that take it as their first argument.

Example:
    >>> from pgcheckpoint.core.state import SaverState
    >>> SaverState().get_next_version(None, None).startswith("0" * 31 + "1.")
    True
"""

from __future__ import annotations

import copy
import itertools
import os
import random
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, cast

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..codec.binding import FORMAT_2, Sealer, as_sealer, binding, describe_row
from ..codec.integrity import (
    Structure,
    check_chain,
    check_checkpoint_columns,
    check_projection,
    projection_keys,
    seal_id,
    take_structure,
)
from ..codec.labels import cipher_label
from ..codec.metadata import STRUCTURAL_KEYS, json_projection
from ..codec.values import ValueCodec
from ..errors import DecryptionError
from ..ops import Row
from ..telemetry.activity import note_cache
from .appends import AppendCache, array_header, join_arrays
from .caches import DEFAULT_CACHE_BYTES, MISSING, CacheBudget, DecodedCache, seed_key
from .rows import row_key

__all__ = ["SaverState"]


def _env_flag(name: str, default: str) -> bool:
    return os.environ.get(name, default).lower() not in ("0", "false", "off", "no")


# Tells apart, in a shared budget, the values each serializer decoded.
_DECODERS = itertools.count()


# What `piece_cache` holds for a piece read once, and for one it does not keep
# decoded (too large, or holding what a copy would share): a read of it decodes.
_SEEN_ONCE = "seen once"
_NOT_KEPT = "not kept"


class SaverState(BaseCheckpointSaver[str], ValueCodec):
    """The state the operations share; the ops themselves are functions of the sibling modules.

    Example:
        >>> SaverState().full_value_every
        32
    """

    # The schema of the tables; the savers set it. Thread locks are keyed by it.
    schema: str = "public"
    # Checkpoints per round trip when copy_thread goes through the client.
    copy_batch_size: int = 200
    # Store lists that grow by appending as deltas on an earlier version, with
    # a full copy at least every `full_value_every` versions.
    append_deltas: bool = _env_flag("PGCHECKPOINT_APPEND_DELTAS", "1")
    full_value_every: int = 32

    def __init__(
        self,
        *,
        serde: SerializerProtocol | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        super().__init__(serde=serde)
        # everything below, within one budget of memory
        self.caches = CacheBudget(cache_bytes)
        # what this saver last stored or read of each list channel (for deltas)
        self.append_cache = AppendCache(self.caches)
        # (thread, namespace) where a put found its parent deleted: a run goes on
        # writing there (LangGraph raises a background put's error at the end)
        self.deleted_under_runs: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._own_caches()
        # the copies `with_allowlist` made, one per allowlist
        self.allowlist_clones: dict[frozenset[tuple[str, ...]], SaverState] = {}

    def _own_caches(self) -> None:
        decoder = next(_DECODERS)
        # decoded DeltaChannel seeds by (thread, namespace, channel, digest)
        self.seed_cache = DecodedCache(self.caches, f"seed{decoder}")
        # decoded pieces of stored lists (a full list, a delta) by key and digest
        self.piece_cache = DecodedCache(self.caches, f"piece{decoder}")
        # decoded DeltaChannel writes by row and digest of the bytes
        self.write_cache = DecodedCache(self.caches, f"write{decoder}")
        # what sealed checkpoint records say about their rows, by row and seal
        self.structure_cache = DecodedCache(self.caches, f"structure{decoder}", handed_out=False)
        # sealed writes whose channel and task path were checked, by row and seal
        self.write_checks = DecodedCache(self.caches, f"checked{decoder}", handed_out=False)

    def sealed_format(self, type_: str | None) -> int | None:
        """The row format a stored type was sealed in, None when this saver does not seal it.

        Example:
            >>> SaverState().sealed_format("msgpack") is None
            True
        """
        sealer = as_sealer(self.serde)
        if sealer is None or type_ is None or cipher_label(type_).startswith("("):
            return None
        return sealer.row_format(type_)

    def load_blob(
        self,
        key: tuple[str, str, str],
        pieces: Sequence[tuple[str, str, bytes, str | None]],
        unpacked: Mapping[int, tuple[str, bytes]] | None = None,
    ) -> Any:
        """Rebuild a channel value from its stored pieces (version, type, bytes, base).

        One piece is a whole value; more are a full list followed by the deltas
        on top of it, oldest first. Lists are remembered for the next delta.
        `unpacked` holds, by position, what a caller unpacked of the pieces already.
        """
        raws = [
            unpacked[i] if unpacked and i in unpacked else self.unpack_piece(key, piece)
            for i, piece in enumerate(pieces)
        ]
        self.check_sealed_chain(key, pieces)
        type_ = raws[-1][0]
        data = self.join_and_remember(key, pieces[-1][0], [raw for _, raw in raws], type_)
        return self.decode(type_, data, binding("blob", *key, pieces[-1][0]))

    def unpack_piece(
        self, key: tuple[str, str, str], piece: tuple[str, str, bytes, str | None]
    ) -> tuple[str, bytes]:
        """The serializer's type and bytes of a stored piece (`unpack_value`, bound to its row)."""
        version, type_, data, base = piece
        return self.unpack_value(type_, data, binding("blob", *key, version), (base,))

    def join_and_remember(
        self, key: tuple[str, str, str], version: str, parts: list[bytes], type_: str
    ) -> bytes:
        """A value's bytes joined from its pieces' (`parts`); a list is remembered
        in `append_cache` as stored at `version`, for the next put's delta."""
        data = parts[0] if len(parts) == 1 else join_arrays(parts)
        if type_ == "msgpack" and self.append_deltas:
            self.append_cache.remember(
                key,
                version,
                data,
                chain=len(parts) - 1,
                chain_bytes=len(data) - len(parts[0]) if len(parts) > 1 else 0,
            )
        return data

    def check_sealed_chain(
        self, key: tuple[str, str, str], pieces: Sequence[tuple[str, str, bytes, str | None]]
    ) -> None:
        """For an encrypting saver, check that a value's pieces form one chain (`check_chain`)."""
        if as_sealer(self.serde) is not None:
            aad = binding("blob", *key, pieces[-1][0])
            label = cipher_label(pieces[-1][1])
            check_chain(describe_row(aad), label, [(p[0], p[3]) for p in pieces])

    def load_channel_value(
        self, key: tuple[str, str, str], pieces: Sequence[tuple[str, str, bytes, str | None]]
    ) -> Any:
        """A channel's value from its stored pieces: a list through `piece_cache`
        (`list_piece`), anything else as `load_blob` decodes it.

        A thread read again, or at its next turn, decodes only its new pieces;
        what `list_piece` returns is the caller's own.
        """
        if not self.caches.max_bytes:
            return self.load_blob(key, pieces)
        self.check_sealed_chain(key, pieces)
        value: list[Any] = []
        raws: dict[int, tuple[str, bytes]] = {}
        for i, piece in enumerate(pieces):
            items, raw = self.list_piece(key, piece)
            if raw is not None:
                raws[i] = raw
            if items is None:
                return self.load_blob(key, pieces, raws)
            value.extend(items)
        self._teach_append_cache(key, pieces, raws)
        return value

    def list_piece(
        self, key: tuple[str, str, str], piece: tuple[str, str, bytes, str | None]
    ) -> tuple[list[Any] | None, tuple[str, bytes] | None]:
        """The items of a stored list's piece, None if it is not a list.

        Returns the items, the caller's own (`pgcheckpoint.core.sharing`), and
        what it unpacked of the piece, if anything (for `load_blob`, when the
        piece is no list). A piece (a full list, a delta on it) read a second
        time is kept decoded, keyed by a digest of its columns, if
        `piece_cache` takes it (a copy of it, if a copy can take it whole,
        within the budget). The first read only marks the piece as seen: a
        value read once (a new worker's first read of a thread) costs its
        decoding and nothing more.
        """
        if piece[1] == "msgpack" and array_header(piece[2]) is None:
            return None, None  # stored as it is, and visibly no list
        cache_key = seed_key(key, (piece,))
        kept = self.piece_cache.lookup(cache_key)
        if type(kept) is list:
            note_cache("piece", hit=True)
            return kept, None
        raw = self.unpack_piece(key, piece)
        if raw[0] != "msgpack" or array_header(raw[1]) is None:
            return None, raw
        items = self.decode(raw[0], raw[1], binding("blob", *key, piece[0]))
        if type(items) is not list:
            return None, raw
        note_cache("piece", hit=False)
        if kept is MISSING:
            self.piece_cache.keep(cache_key, _SEEN_ONCE)
        elif kept is _SEEN_ONCE and not (
            2 * len(raw[1]) <= self.caches.max_bytes and self.piece_cache.keep(cache_key, items)
        ):
            self.piece_cache.keep(cache_key, _NOT_KEPT)
        return items, raw

    def _teach_append_cache(
        self,
        key: tuple[str, str, str],
        pieces: Sequence[tuple[str, str, bytes, str | None]],
        raws: Mapping[int, tuple[str, bytes]],
    ) -> None:
        # a list read from pieces found decoded, when append_cache does not know it yet
        if not self.append_deltas or self.append_cache.holds(key, pieces[-1][0]):
            return
        parts = [
            (raws[i] if i in raws else self.unpack_piece(key, piece))[1]
            for i, piece in enumerate(pieces)
        ]
        self.join_and_remember(key, pieces[-1][0], parts, "msgpack")

    def open_record(
        self, row: Row, stored: Iterable[str] | None = None
    ) -> tuple[dict[str, Any], str | None]:
        """Decode a checkpoint row's record; return it and the parent a read returns.

        A record sealed in row format 2 holds its row's structure: the row's
        columns are checked against it (`pgcheckpoint.codec.integrity`), and
        `stored`, the channels the read found a stored value for, when given.
        The record comes back without the structure, with its channel versions.

        Raises:
            DecryptionError: The record, or a column of its row, was altered.
        """
        thread_id, ns, checkpoint_id = row_key(row)
        aad = binding("checkpoint", thread_id, ns, checkpoint_id)
        record = self.load_value(row["type"], row["checkpoint"], aad)
        parent: str | None = row["parent_checkpoint_id"]
        if self.sealed_format(row["type"]) != FORMAT_2:
            return record, parent
        structure = self.sealed_structure(record, aad, row["type"])
        label = cipher_label(row["type"])
        parent = check_checkpoint_columns(describe_row(aad), label, structure, row, stored)
        self.structure_cache.keep(self.structure_key(row), structure)
        return record, parent

    def sealed_structure(self, record: dict[str, Any], aad: bytes, type_: str) -> Structure:
        """The structure a format-2 checkpoint record holds, taken out of it.

        Raises:
            DecryptionError: The record has none, which no record pgcheckpoint
                seals lacks (it was sealed by something else with the key).
        """
        structure = take_structure(record)
        if structure is None:
            raise DecryptionError(
                f"{describe_row(aad)}, sealed under key {cipher_label(type_)!r}, has no "
                "structure in its sealed record, which every record pgcheckpoint seals has: "
                "it was written by another program; restore it from a backup"
            )
        return structure

    def structure_key(self, row: Row) -> tuple[str, ...]:
        """The key of a sealed checkpoint's structure in `structure_cache`: row and seal."""
        return (*row_key(row), row["type"], seal_id(row["checkpoint"]).hex())

    def cached_structure(self, row: Row) -> Structure | None:
        """The structure of a sealed checkpoint this saver checked before, or None."""
        found = self.structure_cache.lookup(self.structure_key(row))
        return found if isinstance(found, Structure) else None

    def open_metadata(self, row: Row) -> Any:
        """Decode a checkpoint row's metadata, checking its readable column (format 2).

        Raises:
            DecryptionError: The metadata, or its readable column, was altered.
        """
        thread_id, ns, checkpoint_id = row_key(row)
        aad = binding("metadata", thread_id, ns, checkpoint_id)
        if self.sealed_format(row["metadata_type"]) != FORMAT_2:
            return self.load_value(row["metadata_type"], row["metadata_blob"], aad)
        projection = row.get("sealed_metadata")
        metadata = self.load_value(
            row["metadata_type"], row["metadata_blob"], aad, (projection_keys(projection),)
        )
        label = cipher_label(row["metadata_type"])
        check_projection(describe_row(aad), label, metadata, projection)
        return metadata

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: a zero-padded counter and a random tail.

        Versions sort as strings in the order they were made, which keeps them
        compatible with rows written by `langgraph-checkpoint-postgres`.

        Example:
            >>> SaverState().get_next_version("00000000000000000000000000000007.5", None)[:33]
            '00000000000000000000000000000008.'
        """
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".", 1)[0])
        return f"{number + 1:032}.{random.random():016}"

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> SaverState:
        """A shallow copy whose serializer accepts more msgpack types (strict mode).

        LangGraph only knows how to widen its own serializers; an encrypting one
        widens its inner serializer through `with_msgpack_allowlist`. LangGraph
        asks at every run in strict mode, so one copy is kept per allowlist.
        The copy shares this saver's connection, lock, cache budget and
        stored-list cache, and keeps its own decoded DeltaChannel values (in the
        same budget): what a serializer decodes depends on its allowlist.

        Example:
            >>> saver.with_allowlist([("myapp", "Thing")]) is saver  # doctest: +SKIP
            False
        """
        key = frozenset(tuple(entry) for entry in extra_allowlist)
        clone = self.allowlist_clones.get(key)
        if clone is not None:
            return clone
        widen = getattr(self.serde, "with_msgpack_allowlist", None)
        if not isinstance(self.serde, Sealer) or widen is None:
            clone = cast(SaverState, super().with_allowlist(extra_allowlist))
        else:
            serde = widen(extra_allowlist)
            clone = self if serde is self.serde else copy.copy(self)
            clone.serde = serde
        if clone is not self:
            clone._own_caches()
            clone.allowlist_clones = {}
        self.allowlist_clones[key] = clone
        return clone

    def metadata_projection(self, metadata: Mapping[str, Any]) -> Any:
        """The part of the metadata stored as JSONB, which `list(filter=...)` searches.

        All of it by default. An encrypting serializer may name the keys that
        stay readable (`filterable_metadata`); the rest is only in the sealed copy.

        Example:
            >>> SaverState().metadata_projection({"step": 1})
            {'step': 1}
        """
        keys = getattr(self.serde, "filterable_metadata", None)
        if keys is not None:
            metadata = {k: v for k, v in metadata.items() if k in keys or k in STRUCTURAL_KEYS}
        return json_projection(metadata)[0]

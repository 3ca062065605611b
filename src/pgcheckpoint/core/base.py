"""What every operation of the core shares: settings, caches, values of channels.

Example:
    >>> from pgcheckpoint.core import SaverCore
    >>> SaverCore().get_next_version(None, None).startswith("0" * 31 + "1.")
    True
"""

from __future__ import annotations

import copy
import os
import random
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..appends import AppendCache, join_arrays
from ..caches import DecodedCache
from ..validate import STRUCTURAL_KEYS, json_projection
from ..values import Sealer, ValueCodec, binding

__all__ = ["CoreBase"]


def _env_flag(name: str, default: str) -> bool:
    return os.environ.get(name, default).lower() not in ("0", "false", "off", "no")


class CoreBase(BaseCheckpointSaver[str], ValueCodec):
    """The state the operations share; the ops themselves are in the sibling modules.

    Example:
        >>> CoreBase().full_value_every
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
    # DeltaChannel seeds kept decoded (see `DeltaHistory.load_seed`).
    seed_cache_size: int = 64
    # Writes on DeltaChannel paths kept decoded (see `DeltaHistory.load_delta_write`).
    write_cache_size: int = 4096

    def __init__(self, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        # what this saver last stored or read of each list channel (for deltas)
        self.append_cache = AppendCache()
        # (thread, namespace) where a put found its parent deleted: a run goes on
        # writing there (LangGraph raises a background put's error at the end)
        self.deleted_under_runs: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._own_caches()
        # the copies `with_allowlist` made, one per allowlist
        self.allowlist_clones: dict[frozenset[tuple[str, ...]], CoreBase] = {}

    def _own_caches(self) -> None:
        # decoded DeltaChannel seeds by (thread, namespace, channel, digest)
        self.seed_cache = DecodedCache(self.seed_cache_size)
        # decoded DeltaChannel writes by row and digest of the bytes
        self.write_cache = DecodedCache(self.write_cache_size)

    def load_blob(self, key: tuple[str, str, str], pieces: Sequence[tuple[str, str, bytes]]) -> Any:
        """Rebuild a channel value from its stored pieces (version, type, bytes).

        One piece is a whole value; more are a full list followed by the deltas
        on top of it, oldest first. Lists are remembered for the next delta.
        """
        thread_id, ns, channel = key
        raws = [
            self.unpack_value(type_, data, binding("blob", thread_id, ns, channel, version))
            for version, type_, data in pieces
        ]
        if len(raws) == 1:
            type_, data = raws[0]
        else:
            type_, data = raws[-1][0], join_arrays([raw for _, raw in raws])
        if type_ == "msgpack" and self.append_deltas:
            self.append_cache.remember(
                key,
                pieces[-1][0],
                data,
                chain=len(raws) - 1,
                chain_bytes=len(data) - len(raws[0][1]) if len(raws) > 1 else 0,
            )
        return self.inner_serde.loads_typed((type_, data))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: a zero-padded counter and a random tail.

        Versions sort as strings in the order they were made, which keeps them
        compatible with rows written by `langgraph-checkpoint-postgres`.

        Example:
            >>> CoreBase().get_next_version("00000000000000000000000000000007.5", None)[:33]
            '00000000000000000000000000000008.'
        """
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".", 1)[0])
        return f"{number + 1:032}.{random.random():016}"

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> CoreBase:
        """A shallow copy whose serializer accepts more msgpack types (strict mode).

        LangGraph only knows how to widen its own serializers; an encrypting one
        widens its inner serializer through `with_msgpack_allowlist`. LangGraph
        asks at every run in strict mode, so one copy is kept per allowlist.
        The copy shares this saver's connection, lock and stored-list cache, and
        keeps its own decoded DeltaChannel values: what a serializer decodes
        depends on its allowlist.

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
            clone = cast(CoreBase, super().with_allowlist(extra_allowlist))
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
            >>> CoreBase().metadata_projection({"step": 1})
            {'step': 1}
        """
        keys = getattr(self.serde, "filterable_metadata", None)
        if keys is not None:
            metadata = {k: v for k, v in metadata.items() if k in keys or k in STRUCTURAL_KEYS}
        return json_projection(metadata)[0]

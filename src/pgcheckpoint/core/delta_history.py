"""DeltaChannel history: the writes and seed along a checkpoint's parent chain.

A `DeltaChannel` stores only what each step appended; LangGraph rebuilds it
from the last snapshot (the seed) and the writes since. One statement walks
the chain; the decoded seeds and writes are kept (`pgcheckpoint.caches`), as
the next step of the same thread reads most of them again.

Example:
    >>> from pgcheckpoint.core import SaverCore
    >>> config = {"configurable": {"thread_id": "t1", "checkpoint_id": "c1"}}
    >>> next(SaverCore().delta_history_op(config, ["messages"])).name
    'delta_channel_history'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    writes_sort_key,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ..arrays import TextArray
from ..caches import MISSING, seed_key, write_key
from ..fastcopy import copies_whole, copy_containers, copy_items
from ..ops import MAX_CHAIN_DEPTH, Op, Row, Stmt
from ..telemetry import note_cache
from ..validate import check_id, thread_of
from ..values import binding
from .reads import Reads

__all__ = ["DeltaHistory"]


class DeltaHistory(Reads):
    """The DeltaChannel operations of `SaverCore`.

    Example:
        >>> from pgcheckpoint.core import SaverCore
        >>> isinstance(SaverCore(), DeltaHistory)
        True
    """

    def delta_history_op(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Op[dict[str, DeltaChannelHistory]]:
        """Per-channel writes and seed along the target's parent chain, in one query."""
        channels = list(dict.fromkeys(check_id("channel", ch) for ch in channels))
        if not channels:
            return {}
        thread_id, checkpoint_ns = thread_of(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            latest = yield from self.get_tuple_op(config)
            if latest is None:
                return {ch: {"writes": []} for ch in channels}
            checkpoint_id = latest.config["configurable"]["checkpoint_id"]
        rows = yield Stmt(
            "delta_channel_history",
            params={
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": check_id("checkpoint_id", checkpoint_id),
                "channels": TextArray(channels),
                "max_depth": MAX_CHAIN_DEPTH,
            },
            fetch=True,
        )
        return self.assemble_delta_history(thread_id, checkpoint_ns, channels, rows)

    def assemble_delta_history(
        self, thread_id: str, ns: str, channels: Sequence[str], rows: Sequence[Row]
    ) -> dict[str, DeltaChannelHistory]:
        writes: dict[str, list[tuple[int, tuple[str, str, int], PendingWrite]]] = {
            ch: [] for ch in channels
        }
        seeds: dict[str, Any] = {}
        seed_pieces: dict[str, list[Row]] = {}
        inline_rows: list[Row] = []
        for row in rows:
            kind = row["kind"]
            if kind == "w":
                value = self.load_delta_write(thread_id, ns, row)
                writes[row["channel"]].append(
                    (
                        row["depth"],
                        writes_sort_key(row["task_path"], row["task_id"], row["idx"]),
                        (row["task_id"], row["channel"], value),
                    )
                )
            elif kind == "s":
                seed_pieces.setdefault(row["channel"], []).append(row)
            elif kind == "i":
                inline_rows.append(row)
        for channel, chain in seed_pieces.items():
            # Piece 0 is the seed itself; the highest piece is the full value.
            chain.sort(key=lambda r: -r["idx"])
            if chain[-1]["type"] != "empty":
                seeds[channel] = self.load_seed(
                    (thread_id, ns, channel),
                    [(r["version"], r["type"], r["blob"]) for r in chain],
                )
        for row in inline_rows:
            aad = binding("checkpoint", thread_id, ns, row["checkpoint_id"])
            values = self.load_value(row["type"], row["blob"], aad)["channel_values"]
            for ch in row["found"]:
                if ch not in seeds and ch in values:
                    seeds[ch] = values[ch]
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            # Oldest checkpoint first (deepest), then live order within one.
            ordered = sorted(writes[ch], key=lambda w: (-w[0], w[1]))
            entry: DeltaChannelHistory = {"writes": [w[2] for w in ordered]}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            result[ch] = entry
        return result

    def load_seed(
        self, key: tuple[str, str, str], pieces: Sequence[tuple[str, str, bytes]]
    ) -> Any:
        """A DeltaChannel seed, decoded once per process while it stays the seed.

        A snapshot is read again at every step until the next one, and decoding
        it is most of the cost of rebuilding the channel. Stored values never
        change, so the decoded list is kept (within the saver's `cache_bytes`)
        and each caller gets a fresh list of copies of its items (their dicts
        and lists copied too).
        """
        if not self.caches.max_bytes:
            return self.load_blob(key, pieces)
        # Keyed by the stored bytes, not the version: a deleted thread written
        # again may reuse version strings, and its values must not be confused.
        cache_key = seed_key(key, pieces)
        cached = self.seed_cache.lookup(cache_key)
        note_cache("seed", hit=cached is not MISSING)
        if cached is MISSING:
            cached = self.load_blob(key, pieces)
            items = cached.value if isinstance(cached, _DeltaSnapshot) else cached
            if not isinstance(items, list) or not self.seed_cache.keep(cache_key, cached):
                return cached
        # the cached items outlive this call: what a caller edits, even inside
        # a message, must not reach them
        if isinstance(cached, _DeltaSnapshot):
            return _DeltaSnapshot(copy_items(cached.value, containers=True))
        return copy_items(cached, containers=True)

    def load_delta_write(self, thread_id: str, ns: str, row: Row) -> Any:
        """A write on a DeltaChannel's path, decoded once per process while it is cached.

        Rebuilding a channel replays every write since its snapshot, and the
        next rebuild of the same thread (the next turn, `get_state`) replays
        most of them again. Values that `copy_items` can copy whole (messages,
        lists, dicts, plain values), stored in at most 64 KiB, are kept within
        the saver's `cache_bytes`, keyed by the row and a digest of its bytes;
        each caller gets its own copy.
        """
        cache_key = write_key(thread_id, ns, row) if self.caches.max_bytes else None
        cached = MISSING if cache_key is None else self.write_cache.lookup(cache_key)
        note_cache("write", hit=cached is not MISSING)
        if cached is MISSING:
            aad = binding("write", thread_id, ns, row["checkpoint_id"], row["task_id"], row["idx"])
            cached = self.load_value(row["type"], row["blob"], aad)
            if (
                cache_key is None
                or not copies_whole(cached)
                or not self.write_cache.keep(cache_key, cached)
            ):
                return cached
        return copy_containers(cached)

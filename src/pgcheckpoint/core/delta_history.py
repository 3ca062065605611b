"""DeltaChannel history: the writes and seed along a checkpoint's parent chain.

A `DeltaChannel` stores only what each step appended; LangGraph rebuilds it
from the last snapshot (the seed) and the writes since. One statement walks
the chain; the decoded seeds and writes are kept (`pgcheckpoint.core.caches`), as
the next step of the same thread reads most of them again.

Example:
    >>> from pgcheckpoint.core.delta_history import delta_history_op
    >>> from pgcheckpoint.core.state import SaverState
    >>> config = {"configurable": {"thread_id": "t1", "checkpoint_id": "c1"}}
    >>> next(delta_history_op(SaverState(), config, ["messages"])).name
    'delta_channel_history'
"""

from __future__ import annotations

import json
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

from ..codec.binding import FORMAT_2, as_sealer, binding, describe_row, unseal_value
from ..codec.integrity import Structure, check_checkpoint_columns, seal_id, take_structure
from ..codec.labels import cipher_label
from ..errors import DecryptionError
from ..ops import Op, Row, Stmt
from ..statements.arrays import TextArray
from ..telemetry.activity import note_cache
from ..validate import check_id, thread_of
from .caches import MISSING, CacheKey, seed_key, write_columns, write_key
from .reads import get_tuple_op
from .rows import MAX_CHAIN_DEPTH, row_key
from .state import SaverState

__all__ = ["delta_history_op"]


def delta_history_op(
    saver: SaverState, config: RunnableConfig, channels: Sequence[str]
) -> Op[dict[str, DeltaChannelHistory]]:
    """Per-channel writes and seed along the target's parent chain, in one query."""
    channels = list(dict.fromkeys(check_id("channel", ch) for ch in channels))
    if not channels:
        return {}
    thread_id, checkpoint_ns = thread_of(config)
    checkpoint_id = get_checkpoint_id(config)
    if not checkpoint_id:  # None or "": the latest, as get_tuple reads it
        latest = yield from get_tuple_op(saver, config)
        if latest is None:
            return {ch: {"writes": []} for ch in channels}
        checkpoint_id = latest.config["configurable"]["checkpoint_id"]
    sealed = as_sealer(saver.serde) is not None
    rows = yield Stmt(
        "delta_channel_history_sealed" if sealed else "delta_channel_history",
        params={
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": check_id("checkpoint_id", checkpoint_id),
            "channels": TextArray(channels),
            "max_depth": MAX_CHAIN_DEPTH,
        },
        fetch=True,
    )
    if sealed:
        yield from check_walk_op(saver, thread_id, checkpoint_ns, channels, rows)
    return assemble_delta_history(saver, thread_id, checkpoint_ns, channels, rows)


def check_walk_op(
    saver: SaverState, thread_id: str, ns: str, channels: Sequence[str], rows: Sequence[Row]
) -> Op[None]:
    """Check the walk of `delta_channel_history_sealed` against what is sealed.

    At each checkpoint of the walk, the parent it went on to and the
    channels it found a value for must be what the checkpoint's sealed
    record says (rows sealed in row format 2; others cannot tell). The
    structures come from `structure_cache` (keyed by each record's nonce and
    tag, which the statement sends instead of the record); records this
    saver has not checked yet are read in one more statement. Each write
    the walk left out for its channel must have that channel sealed with
    it (`write_checks`, read the same way), so no write drops out of the
    history because its channel column was edited. A seed's version is
    checked against its holder's structure in `assemble_delta_history`.

    Raises:
        DecryptionError: A column the walk relied on differs from what is sealed.
    """
    yield from check_left_out_writes_op(saver, thread_id, ns, rows)
    walked = sorted((r for r in rows if r["kind"] == "a"), key=lambda r: r["depth"])
    for row in walked:
        row.update(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint=row["blob"],
            parent_checkpoint_id=row["version"],
            sealed_parent_id=row["base_version"],
            channel_versions=json.loads(row["task_path"]),
            sealed_inline_channels=json.loads(row["task_id"]),
        )
    sealed = [r for r in walked if saver.sealed_format(r["type"]) == FORMAT_2]
    missing = [r["checkpoint_id"] for r in sealed if saver.cached_structure(r) is None]
    # a cleared parent column is a deleted parent only if no checkpoint has its id
    cleared = [
        r["sealed_parent_id"]
        for r in sealed
        if r["parent_checkpoint_id"] is None and r["sealed_parent_id"]
    ]
    found: set[str] = set()
    if missing or cleared:
        records = yield Stmt(
            "sealed_records",
            {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_ids": sorted(set(missing) | set(cleared)),
            },
            fetch=True,
        )
        for record_row in records:
            found.add(record_row["checkpoint_id"])
            if (
                record_row["checkpoint_id"] in missing
                and saver.sealed_format(record_row["type"]) == FORMAT_2
            ):
                open_record_structure(saver, record_row)
    walking = set(channels)
    checked = {id(r) for r in sealed}
    for row in walked:
        row["sealed_parent_exists"] = row["sealed_parent_id"] in found
        structure = saver.cached_structure(row) if id(row) in checked else None
        if structure is None:
            # format 1, or rewritten between the two statements: nothing to check
            walking -= set(row["found"] or ()) if row["depth"] > 0 else set()
            continue
        aad = binding("checkpoint", thread_id, ns, row["checkpoint_id"])
        where, label = describe_row(aad), cipher_label(row["type"])
        # the walk went by these columns: they are the sealed ones, or it fails
        check_checkpoint_columns(where, label, structure, row, None)
        if row["depth"] > 0:
            here = set(row["found"] or ())
            # a value the record holds (inline, or stored with it) must be found
            absent = {ch for ch in walking if ch in structure.inline | structure.stored}
            absent -= here
            if absent:
                raise DecryptionError(
                    f"{where}, sealed under key {label!r}, holds values of channels "
                    f"{sorted(absent)!r} that are now missing or marked empty in "
                    "pgc_blobs; restore the rows from a backup, or delete the thread"
                )
            walking -= here
        row["structure"] = structure


def check_left_out_writes_op(
    saver: SaverState, thread_id: str, ns: str, rows: Sequence[Row]
) -> Op[None]:
    """Check the channel of each write the walk left out ('x' rows), once per process."""
    unchecked = [
        r
        for r in rows
        if r["kind"] == "x"
        and saver.sealed_format(r["type"]) == FORMAT_2
        and saver.write_checks.lookup(_checked_write(thread_id, ns, r)) is MISSING
    ]
    if not unchecked:
        return
    found = yield Stmt(
        "sealed_writes",
        {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_ids": [r["checkpoint_id"] for r in unchecked],
            "task_ids": [r["task_id"] for r in unchecked],
            "idxs": [r["idx"] for r in unchecked],
        },
        fetch=True,
    )
    sealer = as_sealer(saver.serde)
    for row in found:
        if sealer is None or saver.sealed_format(row["type"]) != FORMAT_2:
            continue
        aad = binding("write", thread_id, ns, row["checkpoint_id"], row["task_id"], row["idx"])
        unseal_value(sealer, row["type"], row["blob"], aad, (row["channel"], row["task_path"]))
        checked = {**row, "blob": seal_id(row["blob"])}
        saver.write_checks.keep(_checked_write(thread_id, ns, checked), True)


def open_record_structure(saver: SaverState, row: Row) -> Structure:
    """Decode a sealed checkpoint record and keep its structure in `structure_cache`."""
    aad = binding("checkpoint", *row_key(row))
    record = saver.load_value(row["type"], row["checkpoint"], aad)
    structure = saver.sealed_structure(record, aad, row["type"])
    saver.structure_cache.keep(saver.structure_key(row), structure)
    return structure


def assemble_delta_history(
    saver: SaverState, thread_id: str, ns: str, channels: Sequence[str], rows: Sequence[Row]
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
            value = load_delta_write(saver, thread_id, ns, row)
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
    holders = {r["depth"]: r.get("structure") for r in rows if r["kind"] == "a"}
    for channel, chain in seed_pieces.items():
        # Piece 0 is the seed itself; the highest piece is the full value.
        chain.sort(key=lambda r: -r["idx"])
        structure = holders.get(chain[-1]["depth"])
        if structure is not None and structure.versions.get(channel) != chain[-1]["version"]:
            aad = binding("checkpoint", thread_id, ns, chain[-1]["checkpoint_id"])
            raise DecryptionError(
                f"{describe_row(aad)}, sealed under key "
                f"{cipher_label(chain[-1]['type'])!r}, was altered: column "
                f"channel_versions names version {chain[-1]['version']!r} of channel "
                f"{channel!r}, its sealed record {structure.versions.get(channel)!r}; "
                "restore the row from a backup, or delete the thread"
            )
        if chain[-1]["type"] != "empty":
            seeds[channel] = load_seed(
                saver,
                (thread_id, ns, channel),
                [(r["version"], r["type"], r["blob"], r["base_version"]) for r in chain],
            )
    for row in inline_rows:
        aad = binding("checkpoint", thread_id, ns, row["checkpoint_id"])
        record = saver.load_value(row["type"], row["blob"], aad)
        take_structure(record)
        values = record["channel_values"]
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
    saver: SaverState,
    key: tuple[str, str, str],
    pieces: Sequence[tuple[str, str, bytes, str | None]],
) -> Any:
    """A DeltaChannel seed, decoded once per process while it stays the seed.

    A snapshot is read again at every step until the next one, and decoding
    it is most of the cost of rebuilding the channel. Stored values never
    change, so a decoded list (or a snapshot of one) is kept in `seed_cache`,
    within the saver's `cache_bytes`, if a copy can take it whole; each
    caller gets its own copy (`pgcheckpoint.core.sharing`).
    """
    if not saver.caches.max_bytes:
        return saver.load_blob(key, pieces)
    # Keyed by the stored bytes, not the version: a deleted thread written
    # again may reuse version strings, and its values must not be confused.
    cache_key = seed_key(key, pieces)
    cached = saver.seed_cache.lookup(cache_key)
    note_cache("seed", hit=cached is not MISSING)
    if cached is not MISSING:
        return cached
    seed = saver.load_blob(key, pieces)
    if isinstance(seed.value if isinstance(seed, _DeltaSnapshot) else seed, list):
        saver.seed_cache.keep(cache_key, seed)
    return seed


def load_delta_write(saver: SaverState, thread_id: str, ns: str, row: Row) -> Any:
    """A write on a DeltaChannel's path, decoded once per process while it is cached.

    Rebuilding a channel replays every write since its snapshot, and the
    next rebuild of the same thread (the next turn, `get_state`) replays
    most of them again. Writes stored in at most 64 KiB are kept in
    `write_cache`, within the saver's `cache_bytes`, keyed by the row and a
    digest of its bytes, if a copy can take them whole; each caller gets its
    own copy (`pgcheckpoint.core.sharing`).
    """
    cache_key = write_key(thread_id, ns, row) if saver.caches.max_bytes else None
    cached = MISSING if cache_key is None else saver.write_cache.lookup(cache_key)
    note_cache("write", hit=cached is not MISSING)
    if cached is not MISSING:
        return cached
    aad = binding("write", thread_id, ns, row["checkpoint_id"], row["task_id"], row["idx"])
    value = saver.load_value(row["type"], row["blob"], aad, (row["channel"], row["task_path"]))
    if cache_key is not None:
        saver.write_cache.keep(cache_key, value)
    return value


def _checked_write(thread_id: str, ns: str, row: Row) -> CacheKey:
    """A checked write's key in `write_checks`: its columns and (in `blob`) its seal."""
    # write_key holds every column a write is read with; for a write too large
    # for it, the seal id (a few bytes) stands for its bytes
    return write_key(thread_id, ns, row) or (
        *write_columns(thread_id, ns, row),
        seal_id(row["blob"]).hex(),
    )

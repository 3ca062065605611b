"""Reading checkpoints: `get_tuple` and `list`, and decoding their rows.

A checkpoint older than LangGraph's format v4 gets the sends its parent holds
(`pgcheckpoint.core.sends`): `get_tuple` reads them in one more statement,
for such a checkpoint only; `list` takes them from the listed parent, and
reads those of parents the page does not hold in one statement, after opening
the records of the checkpoints whose parent is not listed (usually the oldest
one) to learn their format. A listing of current checkpoints runs no more
statements than before.

Example:
    >>> from pgcheckpoint.core.reads import get_tuple_op
    >>> from pgcheckpoint.core.state import SaverState
    >>> next(get_tuple_op(SaverState(), {"configurable": {"thread_id": "t1"}})).name
    'get_latest_checkpoint'
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from psycopg.types.json import Jsonb

from ..codec.binding import as_sealer, binding
from ..codec.metadata import STRUCTURAL_KEYS, json_projection, metadata_matches
from ..errors import InvalidInputError, UnreadableValueError
from ..ops import Op, Row, Stmt
from ..validate import check_count, check_id, configurable, thread_of
from .rows import MAX_CHAIN_DEPTH, checkpoint_keys, read_channel_versions, row_key
from .sends import (
    WriteRow,
    load_sends,
    move_sends,
    parent_sends_op,
    sends_parent,
    tuple_sends_parent,
)
from .sharing import NotWhole, handout
from .state import SaverState

__all__ = [
    "ListingMemo",
    "Piece",
    "checkpoint_tuple",
    "decode_listed",
    "get_tuple_op",
    "list_op",
    "listed_values_op",
    "load_tuple",
    "pending_write_rows",
    "stored_pieces",
    "stored_values_op",
]


def get_tuple_op(saver: SaverState, config: RunnableConfig) -> Op[CheckpointTuple | None]:
    """Load the checkpoint a config names, or the thread's latest."""
    thread_id, checkpoint_ns = thread_of(config)
    checkpoint_id = get_checkpoint_id(config)
    params = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    # an encrypting saver reads the columns it checks against the seal too
    sealed = as_sealer(saver.serde) is not None
    if checkpoint_id:
        params["checkpoint_id"] = check_id("checkpoint_id", checkpoint_id)
        rows = yield Stmt(
            "get_checkpoint_by_id_sealed" if sealed else "get_checkpoint_by_id",
            params,
            fetch=True,
        )
    else:
        rows = yield Stmt(
            "get_latest_checkpoint_sealed" if sealed else "get_latest_checkpoint",
            params,
            fetch=True,
        )
    if not rows:
        return None
    tup = load_tuple(saver, rows[0])
    parent = tuple_sends_parent(tup)
    if parent is not None:
        found = yield from parent_sends_op(saver, [parent])
        move_sends(saver, tup.checkpoint, load_sends(saver, parent, found.get(parent, ())))
    return tup


def list_op(
    saver: SaverState,
    config: RunnableConfig | None,
    *,
    filter: Mapping[str, Any] | None = None,
    before: RunnableConfig | None = None,
    limit: int | None = None,
) -> Op[tuple[list[Row], Mapping[str, Any] | None]]:
    """Select the rows `list` yields, newest first.

    Returns the rows and, when the filter could not be expressed exactly in
    JSONB, the filter to re-check on each decoded tuple. With encryption on,
    a filter is checked here against each row's sealed metadata, and pages
    grow until `limit` rows match (`sealed_matches_op`).
    """
    conf = configurable(config)
    thread_id = conf.get("thread_id")
    ns = conf.get("checkpoint_ns")
    checkpoint_id = conf.get("checkpoint_id")
    before_id = _before_id(before)
    if limit is not None:
        limit = check_count("limit", limit, maximum=None)
    if filter is not None and not isinstance(filter, Mapping):
        raise InvalidInputError(f"filter must be a dict, not {type(filter).__name__}")
    readable = getattr(saver.serde, "filterable_metadata", None)
    if filter and readable is not None:
        # A key kept only in the encrypted copy would silently match nothing.
        hidden = [k for k in filter if k not in readable and k not in STRUCTURAL_KEYS]
        if hidden:
            raise InvalidInputError(
                f"cannot filter on metadata key {hidden[0]!r}: it is stored encrypted; "
                f"list it in EncryptedSerde(filterable_metadata=...) (now "
                f"{tuple(readable)!r}) to keep it readable in new checkpoints"
            )
    projection, lossy = json_projection(dict(filter)) if filter else (None, False)
    params = {
        "thread_id": None if thread_id is None else check_id("thread_id", thread_id),
        "checkpoint_ns": None if ns is None else check_id("checkpoint_ns", ns),
        "checkpoint_id": None
        if checkpoint_id is None
        else check_id("checkpoint_id", checkpoint_id),
        "before": None if before_id is None else check_id("checkpoint_id", before_id),
        "filter": None if projection is None else Jsonb(projection),
        # a limit past what a bigint holds is no limit at all
        "limit": None if lossy or (limit is not None and limit >= 2**63) else limit,
    }
    sealed = as_sealer(saver.serde) is not None
    if params["thread_id"] is None:
        stmt = Stmt("list_checkpoints_sealed" if sealed else "list_checkpoints", params, True)
    elif params["checkpoint_ns"] is None:
        stmt = Stmt(
            "list_thread_every_namespace_sealed" if sealed else "list_thread_every_namespace",
            params,
            True,
        )
    else:
        stmt = Stmt(
            "list_thread_checkpoints_sealed" if sealed else "list_thread_checkpoints",
            params,
            True,
        )
    rows = yield stmt
    if rows:
        rows = yield from listed_values_op(saver, rows)
    recheck = filter if lossy else None
    if filter and sealed:
        rows = yield from sealed_matches_op(saver, stmt, rows, filter, lossy, limit)
        recheck = None
    yield from unlisted_parent_sends_op(saver, rows)
    return rows, recheck


def _before_id(before: Mapping[str, Any] | None) -> Any:
    # A config names the checkpoint in `configurable`; LangGraph's Agent Server
    # passes its API's checkpoint instead: `checkpoint_id` at the top, no `configurable`.
    if not before:
        return None
    if "configurable" in before:
        return (before["configurable"] or {}).get("checkpoint_id")
    return before.get("checkpoint_id")


def sealed_matches_op(
    saver: SaverState,
    stmt: Stmt,
    rows: list[Row],
    filter: Mapping[str, Any],
    lossy: bool,
    limit: int | None,
) -> Op[list[Row]]:
    """The listed rows whose sealed metadata matches `filter`, up to `limit` of them.

    The readable metadata column chose the rows; each row's metadata is
    decrypted (and that column checked against it, for rows sealed in row
    format 2), and a row whose metadata does not match is left out. When
    that leaves fewer than `limit`, the page is read again, twice as long.
    """
    wanted = json_projection(dict(filter))[0]
    while True:
        matched = []
        for row in rows:
            metadata = row["_metadata"] = saver.open_metadata(row)
            if lossy:
                ok = metadata_matches(metadata, filter)
            else:
                ok = metadata_matches(json_projection(metadata)[0], wanted)
            if ok:
                matched.append(row)
                if limit is not None and len(matched) >= limit:
                    return matched
        page = stmt.params["limit"]
        if page is None or len(rows) < page:
            return matched
        stmt = Stmt(stmt.name, {**stmt.params, "limit": page * 2}, fetch=True)
        rows = yield stmt
        if rows:
            rows = yield from listed_values_op(saver, rows)


def unlisted_parent_sends_op(saver: SaverState, rows: list[Row]) -> Op[None]:
    """Read the sends of the listed pre-v4 checkpoints whose parent is not listed.

    The record of each listed checkpoint whose parent the page does not hold
    is opened here (and kept on its row for `load_tuple`) to learn its
    format; for those older than v4, their parents' sends are read in one
    statement and kept on the rows (`_parent_writes`) for `decode_listed`.
    A record that cannot be opened is left for `decode_listed` to raise at
    its turn, as it did before.
    """
    listed = {row_key(row) for row in rows}
    wanted: dict[tuple[str, str, str], list[Row]] = {}
    for row in rows:
        thread_id, ns, _ = row_key(row)
        if not row["parent_checkpoint_id"]:
            continue
        if (thread_id, ns, row["parent_checkpoint_id"]) in listed:
            continue
        try:
            row["_opened"] = opened = saver.open_record(row, _stored(stored_pieces(row)))
        except UnreadableValueError:
            continue  # raised when its turn comes, after the rows before it
        key = sends_parent(row_key(row), *opened)
        if key is not None:
            wanted.setdefault(key, []).append(row)
    if not wanted:
        return
    found = yield from parent_sends_op(saver, wanted)
    for key, children in wanted.items():
        for row in children:
            row["_parent_writes"] = found.get(key, [])


def listed_values_op(saver: SaverState, rows: list[Row]) -> Op[list[Row]]:
    """Give listed rows their stored values, fetched once for the page.

    Returns the rows whose checkpoints still exist, each with the `blob_*`
    columns of `checkpoint_tuple_from`: per channel its pieces, the full
    value first, then the deltas on it.
    """
    found = yield from stored_values_op(saver, checkpoint_keys(rows))
    pieces: dict[tuple[str, str, str, str], Row] = {}
    alive: set[tuple[str, str, str]] = set()
    for piece in found:
        if piece["kind"] == "c":
            alive.add(row_key(piece))
        else:
            thread_id, ns = piece["thread_id"], piece["checkpoint_ns"]
            pieces[(thread_id, ns, piece["channel"], piece["version"])] = piece
    kept = []
    for row in rows:
        if row_key(row) not in alive:
            continue
        columns: dict[str, list[Any]] = {
            "blob_channels": [],
            "blob_versions": [],
            "blob_bases": [],
            "blob_types": [],
            "blob_values": [],
        }
        versions = read_channel_versions(row)
        for channel in sorted(versions):
            chain: list[Row] = []
            # str: rows imported from the official saver's oldest schema have ints
            at: str | None = str(versions[channel])
            while at is not None and len(chain) <= MAX_CHAIN_DEPTH:
                found_piece = pieces.get((row["thread_id"], row["checkpoint_ns"], channel, at))
                if found_piece is None:
                    break
                chain.append(found_piece)
                at = found_piece["base_version"]
            for piece in reversed(chain):
                columns["blob_channels"].append(channel)
                columns["blob_versions"].append(piece["version"])
                columns["blob_bases"].append(piece["base_version"])
                columns["blob_types"].append(piece["type"])
                columns["blob_values"].append(piece["blob"])
        row.update(columns)
        kept.append(row)
    return kept


def stored_values_op(saver: SaverState, keys: dict[str, Any]) -> Op[list[Row]]:
    """The stored values of some checkpoints (`checkpoint_keys`), each piece once."""
    rows = yield Stmt("listed_values", keys, fetch=True)
    return rows


def load_tuple(saver: SaverState, row: Row, memo: ListingMemo | None = None) -> CheckpointTuple:
    """Decode one row of `checkpoint_tuple_from` into a `CheckpointTuple`.

    `memo` lets the rows of one `list` call share the decoding of list pieces.
    """
    thread_id, ns, checkpoint_id = row_key(row)
    versions = read_channel_versions(row)
    pieces = stored_pieces(row)
    stored = _stored(pieces)
    # opened already when `list` had to learn its format (unlisted_parent_sends_op)
    opened = row.pop("_opened", None)
    record, parent = opened if opened is not None else saver.open_record(row, stored)
    values = dict(record.get("channel_values") or {})
    for channel in stored:
        chain = pieces[channel]
        key = (thread_id, ns, channel)
        if memo is None:
            values[channel] = saver.load_channel_value(key, chain)
        else:
            values[channel] = load_listed_value(saver, key, chain, memo)
    record["channel_values"] = values
    record["channel_versions"] = versions
    pending = [
        (
            task_id,
            channel,
            saver.load_value(
                type_,
                data,
                binding("write", thread_id, ns, checkpoint_id, task_id, idx),
                (channel, path),
            ),
        )
        for task_id, idx, channel, path, type_, data in pending_write_rows(row)
    ]
    metadata = row["_metadata"] if "_metadata" in row else saver.open_metadata(row)
    return checkpoint_tuple(row_key(row), record, metadata, parent, pending)


def _stored(pieces: Mapping[str, Sequence[Piece]]) -> list[str]:
    # the channels a row has a stored value of (not marked empty)
    return [ch for ch, chain in pieces.items() if chain[-1][1] != "empty"]


def load_listed_value(
    saver: SaverState,
    key: tuple[str, str, str],
    pieces: Sequence[tuple[str, str, bytes, str | None]],
    memo: ListingMemo,
) -> Any:
    """A channel's value in a listing: a list's pieces decoded (or found in
    `piece_cache`) once per memo, anything else as `load_blob` decodes it.

    A piece that later checkpoints of the listing hold too is kept in the
    memo, and each checkpoint but the last to hold it gets a copy
    (`pgcheckpoint.core.sharing`); one a copy cannot take whole (a custom
    class, a bytearray...) is decoded again for each of them.
    """
    thread_id, ns, channel = key
    saver.check_sealed_chain(key, pieces)
    items_out: list[Any] = []
    for i, piece in enumerate(pieces):
        memo_key = (thread_id, ns, channel, piece[0])
        last = memo.release(memo_key)
        shared = memo.decoded.pop(memo_key, None) if last else memo.decoded.get(memo_key)
        if shared is not None:
            items_out.extend(shared if last else handout(shared))
            continue
        items, raw = saver.list_piece(key, piece)
        if items is None:
            return saver.load_blob(key, pieces, None if raw is None else {i: raw})
        if not last:
            try:
                copied = handout(items)
            except NotWhole:
                pass  # decoded again for the next checkpoint that holds it
            else:
                memo.decoded[memo_key] = items
                items = copied
        items_out.extend(items)
    return items_out


def decode_listed(
    saver: SaverState, rows: Iterable[Row], recheck: Mapping[str, Any] | None, limit: int | None
) -> Generator[CheckpointTuple, None, None]:
    """Decode listed rows lazily, applying a filter JSONB could not hold.

    A pre-v4 checkpoint gets its parent's sends: those `list_op` read, or
    those of the listed parent's row.
    """
    count = 0
    rows = list(rows)
    memo = ListingMemo.of(rows)
    page = {row_key(row): row for row in rows}
    for row in rows:
        if limit is not None and count >= limit:
            return
        tup = load_tuple(saver, row, memo)
        parent = tuple_sends_parent(tup)
        if parent is not None:
            writes: Iterable[WriteRow] = row.get("_parent_writes", ())
            if parent in page:
                writes = pending_write_rows(page[parent])
            move_sends(saver, tup.checkpoint, load_sends(saver, parent, writes))
        if recheck is not None and not metadata_matches(tup.metadata, recheck):
            continue
        count += 1
        yield tup


# A stored value's piece: (version, type, bytes, delta base).
Piece = tuple[str, str, bytes, str | None]


def stored_pieces(row: Row) -> dict[str, list[Piece]]:
    """The pieces of each channel's stored value in a `checkpoint_tuple_from` row.

    They come grouped by channel, a delta's bases first (see the fragment).

    Example:
        >>> stored_pieces({"blob_channels": None, "blob_versions": None,
        ...                "blob_bases": None, "blob_types": None, "blob_values": None})
        {}
    """
    pieces: dict[str, list[Piece]] = {}
    for channel, version, base, type_, data in zip(
        row["blob_channels"] or (),
        row["blob_versions"] or (),
        row["blob_bases"] or (),
        row["blob_types"] or (),
        row["blob_values"] or (),
        strict=True,
    ):
        pieces.setdefault(channel, []).append((version, type_, data, base))
    return pieces


def pending_write_rows(row: Row) -> Iterator[WriteRow]:
    """(task id, idx, channel, task path, type, bytes) of each pending write of a row.

    The task path is None when the row has none (a plain saver's statements
    do not read it: only a sealed write is bound to it).

    Example:
        >>> list(pending_write_rows({"write_task_ids": None, "write_idxs": None,
        ...     "write_channels": None, "write_types": None, "write_values": None}))
        []
    """
    task_ids = row["write_task_ids"] or ()
    return zip(
        task_ids,
        row["write_idxs"] or (),
        row["write_channels"] or (),
        row.get("write_task_paths") or [None] * len(task_ids),
        row["write_types"] or (),
        row["write_values"] or (),
        strict=True,
    )


def checkpoint_tuple(
    key: tuple[str, str, str],
    record: Mapping[str, Any],
    metadata: Any,
    parent: str | None,
    pending: list[tuple[str, str, Any]],
) -> CheckpointTuple:
    """The `CheckpointTuple` of a decoded row: (thread, namespace, id), its parts, its parent.

    Example:
        >>> checkpoint_tuple(("t", "", "c2"), {}, {}, "c1", []).parent_config["configurable"]
        {'thread_id': 't', 'checkpoint_ns': '', 'checkpoint_id': 'c1'}
    """
    thread_id, ns, checkpoint_id = key
    where = {"thread_id": thread_id, "checkpoint_ns": ns}
    return CheckpointTuple(
        config={"configurable": {**where, "checkpoint_id": checkpoint_id}},
        checkpoint=cast(Checkpoint, record),
        metadata=cast(CheckpointMetadata, metadata),
        parent_config={"configurable": {**where, "checkpoint_id": parent}} if parent else None,
        pending_writes=pending,
    )


class ListingMemo:
    """The list pieces the rows of one `list` call decode once and share.

    It counts the rows that use each piece, so the last one to use it takes
    the decoded items themselves and the others take copies.

    Example:
        >>> ListingMemo.of([]).release(("t", "", "m", "v1"))
        True
    """

    def __init__(self) -> None:
        self.decoded: dict[tuple[str, str, str, str], list[Any]] = {}
        self.uses: dict[tuple[str, str, str, str], int] = {}

    @classmethod
    def of(cls, rows: Sequence[Row]) -> ListingMemo:
        """A memo for the listed `rows`."""
        memo = cls()
        for row in rows:
            thread_id, ns = row["thread_id"], row["checkpoint_ns"]
            for channel, version in zip(row["blob_channels"], row["blob_versions"], strict=True):
                key = (thread_id, ns, channel, version)
                memo.uses[key] = memo.uses.get(key, 0) + 1
        return memo

    def release(self, key: tuple[str, str, str, str]) -> bool:
        """Count one use of a piece; True when no later row uses it."""
        left = self.uses.get(key, 0) - 1
        self.uses[key] = left
        return left <= 0

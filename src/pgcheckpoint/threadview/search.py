"""`pgcheckpoint threads --metadata` with a key: threads found by their sealed metadata.

The readable `metadata` column (JSONB) is a copy that whoever can write the
table can edit without the key: set `user_id` to `alice` on bob's rows and
remove it from alice's, and a filter on that column lists bob's thread as
alice's and misses hers. With a key, this search puts no filter in SQL, since
a filter on the column could leave out the very rows it looks for. It walks
the checkpoints newest first (`inspect_metadata_page`), decrypts each one's
metadata and matches the filter against that, the way `list(filter=...)`
checks what it returns.

A checkpoint sealed in row format 2 binds the key names of its readable
column, so one whose column lost or gained a key no longer decrypts as it
stands. It is tried again with one or two names put back or taken out, of
the filter's keys and the names the other rows of its page have: when one
of those decrypts, the metadata is the sealed one (GCM authenticates it with
those names), the column was edited, and the checkpoint is reported as
altered. One that does not decrypt at all cannot be matched; it is reported
too (`MetadataSearch.unreadable`).

The walk is bounded: it ends when it has found `limit` threads, read every
checkpoint (since `since`), or read `scan` checkpoints. In the last case
older threads were not searched, and `MetadataSearch.truncated` says so. A
thread's checkpoints are read until one matches; a thread matched on sealed
metadata is not read further.

Example:
    >>> op = sealed_search_op(saver, metadata=[{"user_id": "alice"}])  # doctest: +SKIP
    >>> [t.thread_id for t in saver.run(op).threads]  # doctest: +SKIP
    ['alice-chat']
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..codec.binding import FORMAT_2, binding
from ..codec.integrity import projection_keys
from ..codec.metadata import json_projection, metadata_matches
from ..core.rows import row_key
from ..core.state import SaverState
from ..errors import DecryptionError, UnreadableValueError
from ..ops import Op, Row, Stmt
from .model import ThreadSummary
from .ops import SEALED_MATCH, UNVERIFIED, thread_summaries_op

__all__ = ["DEFAULT_SCAN", "MetadataSearch", "sealed_search_op"]

DEFAULT_SCAN = 10_000
"""How many checkpoints a search reads at most, newest first."""

_PAGE = 1_000
# With more names to try than this, an altered row is tried with one name
# toggled, not two (n * (n + 1) / 2 decryptions at most).
_MAX_PAIRED_NAMES = 8


@dataclass
class MetadataSearch:
    """What `sealed_search_op` found, and how far it looked.

    Attributes:
        threads: The threads found, the one with the newest matching
            checkpoint first; `metadata_filter` says how each matched
            (`sealed`, or `unverified` for metadata no key authenticates:
            stored unencrypted and read with `allow_plaintext`, or in
            LangGraph's own format).
        scanned: How many checkpoints were read.
        truncated: The walk stopped after `scan` checkpoints, before it found
            `limit` threads or read the oldest: older threads were not searched.
        oldest: When the last checkpoint read was saved.
        altered: Checkpoints (thread, namespace, id) whose readable metadata
            column differs from their sealed metadata.
        unreadable: Checkpoints whose metadata could not be read or
            authenticated, with why; they were not matched.

    Example:
        >>> MetadataSearch([], 0, False).altered
        []
    """

    threads: list[ThreadSummary]
    scanned: int
    truncated: bool
    oldest: dt.datetime | None = None
    altered: list[tuple[str, str, str]] = field(default_factory=list)
    unreadable: list[tuple[tuple[str, str, str], str]] = field(default_factory=list)


def sealed_search_op(
    core: SaverState,
    *,
    metadata: Sequence[Mapping[str, Any]],
    schema: str = "public",
    limit: int = 20,
    since: dt.datetime | None = None,
    scan: int = DEFAULT_SCAN,
) -> Op[MetadataSearch]:
    """The `limit` threads with the newest checkpoints whose sealed metadata matches.

    Args:
        core: The saver; its serializer holds the keys.
        metadata: A checkpoint matches when its metadata contains one of
            these (as JSONB `@>` means it).
        schema: The schema of the tables (thread locks are keyed by it).
        limit: How many threads.
        since: Only checkpoints saved at or after this time.
        scan: How many checkpoints to read at most, newest first.

    Example:
        >>> op = sealed_search_op(saver, metadata=[{"user": "ada"}], scan=5000)  # doctest: +SKIP
    """
    filters = [json_projection(dict(m))[0] for m in metadata]
    keys = {str(k) for f in filters for k in f}
    found: dict[str, str] = {}
    search = MetadataSearch([], 0, False)
    after: tuple[Any, ...] = (None, None, None, None)
    while len(found) < limit:
        page = min(_PAGE, scan - search.scanned)
        if page <= 0:
            search.truncated = True
            break
        # a thread matched on its sealed metadata needs no more of its rows read
        done = [t for t, how in found.items() if how == SEALED_MATCH]
        rows = yield Stmt(
            "inspect_metadata_page",
            {
                "since": since,
                "after_at": after[0],
                "after_thread": after[1],
                "after_ns": after[2],
                "after_id": after[3],
                "matched": done,
                "limit": page + 1,  # one more than read says whether there are more
            },
            fetch=True,
        )
        # the names an edited column may have lost: those its neighbours have
        names = keys | {
            str(k) for r in rows if isinstance(r["metadata"], Mapping) for k in r["metadata"]
        }
        for row in rows[:page]:
            search.scanned += 1
            search.oldest = row["created_at"]
            if found.get(row["thread_id"]) == SEALED_MATCH:
                continue  # matched by a newer row of this page
            how = _match(core, row, filters, sorted(names), search)
            if how is not None and found.get(row["thread_id"]) != SEALED_MATCH:
                found[row["thread_id"]] = how
                if len(found) >= limit:
                    break
        if len(rows) <= page:
            break
        last = rows[page - 1]
        after = (last["created_at"], *row_key(last))
    rows = []
    if found:
        rows = yield Stmt("inspect_threads_by_id", {"thread_ids": list(found)}, fetch=True)
    search.threads = yield from thread_summaries_op(core, schema, rows, found)
    return search


def _match(
    core: SaverState,
    row: Row,
    filters: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    search: MetadataSearch,
) -> str | None:
    """How the row's metadata matches a filter (`sealed`, `unverified`), None if not."""
    try:
        metadata, altered = _sealed_metadata(core, row, names)
    except UnreadableValueError as exc:
        search.unreadable.append((row_key(row), str(exc)))
        return None
    if altered:
        search.altered.append(row_key(row))
    readable = json_projection(metadata)[0]
    if not any(metadata_matches(readable, f) for f in filters):
        return None
    return SEALED_MATCH if core.sealed_format(row["metadata_type"]) is not None else UNVERIFIED


def _sealed_metadata(core: SaverState, row: Row, names: Sequence[str]) -> tuple[Any, bool]:
    """A row's metadata as sealed, and whether its readable column was edited.

    `names` are the key names the column may have lost or gained.

    Raises:
        UnreadableValueError: It cannot be read or authenticated.
    """
    try:
        return core.open_metadata(row), False
    except DecryptionError as exc:
        if core.sealed_format(row["metadata_type"]) != FORMAT_2:
            raise
        first = exc
    type_, data = row["metadata_type"], row["metadata_blob"]
    aad = binding("metadata", *row_key(row))
    projection = row["metadata"]
    present = {str(k) for k in projection} if isinstance(projection, Mapping) else set()
    tries = [present, *(present ^ {name} for name in names)]
    if len(names) <= _MAX_PAIRED_NAMES:
        tries += [present ^ set(pair) for pair in itertools.combinations(names, 2)]
    for bound in tries:
        try:
            # the first try is the column's own names: it decrypts when only a
            # value of the column was edited (which open_metadata refused)
            metadata = core.load_value(type_, data, aad, (projection_keys(dict.fromkeys(bound)),))
        except DecryptionError:
            continue
        return metadata, True
    raise first

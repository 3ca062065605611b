"""The thread view's ops: read a thread from the tables, without its graph and without I/O.

Each op yields the `inspect_*` statements of `sql/queries/threadview.sql` and
turns their rows into the data of `pgcheckpoint.threadview.model`; run one
with `saver.run(op)` (awaited on the async saver). A checkpoint comes back as
a `CheckpointNode`: the step and source LangGraph recorded, the nodes that ran
to make it, the channels it changed (names and stored sizes, no values), the
tasks that saved writes against it (interrupts and errors with their payload)
and the nodes it triggers. Values go through the saver core, so they are
decrypted (and, sealed in row format 2, checked against their row) when its
serializer is an `EncryptedSerde`; a value encrypted under a key that is not
configured reads as `SEALED`, and one that cannot be read (corrupt, altered,
or refused) as an `Unreadable` holding the error, so one bad row never stops
a page or the list of threads.

Example:
    >>> page = saver.run(thread_page_op(saver, "support-1234", limit=20))  # doctest: +SKIP
    >>> [n.checkpoint_id for n in page.nodes]  # doctest: +SKIP
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, TASKS
from psycopg.types.json import Jsonb

from ..codec.binding import Columns, Sealer, binding
from ..codec.integrity import take_structure
from ..codec.labels import KEYS_ENV, PLAINTEXT_LABEL, cipher_label
from ..core.locks import thread_lock_key
from ..core.reads import checkpoint_tuple, load_tuple, pending_write_rows, stored_pieces
from ..core.rows import row_key
from ..core.state import SaverState
from ..errors import DecryptionError, UnreadableValueError
from ..ops import Op, Row, Stmt
from ..validate import check_id
from .damage import RowDamage, TornRowError, channel_versions_of, projection_of, versions_seen_of
from .model import (
    SEALED,
    ChannelChange,
    CheckpointNode,
    SubgraphInfo,
    TaskInfo,
    ThreadPage,
    ThreadSummary,
    Unreadable,
    link,
)
from .triggers import nodes_that_ran, send_packets, task_name, triggered_nodes

__all__ = [
    "checkpoint_values_op",
    "decode_value",
    "node_from_row",
    "recent_threads_op",
    "resolve_checkpoint_op",
    "thread_page_op",
]


def decode_value(
    core: SaverState, type_: str | None, data: bytes | None, aad: bytes, columns: Columns = ()
) -> Any:
    """A stored value; `SEALED` when it is encrypted and the core has no key.

    A value that cannot be read (corrupt, altered, refused) comes back as an
    `Unreadable` holding the error, for the view to show in its place.

    Example:
        >>> decode_value(SaverState(), "msgpack+aesgcm2:k1", b"...", b"")
        <encrypted>
    """
    if type_ is None:
        return None
    if cipher_label(type_) != PLAINTEXT_LABEL and not isinstance(core.serde, Sealer):
        return SEALED
    try:
        return core.load_value(type_, data, aad, columns)
    except UnreadableValueError as exc:
        return Unreadable(str(exc))


def _opened(core: SaverState, row: Row) -> tuple[Any, Any]:
    """The checkpoint record and metadata of a row, each checked as a read checks them."""
    if cipher_label(row["type"]) != PLAINTEXT_LABEL and not isinstance(core.serde, Sealer):
        record: Any = SEALED
    else:
        try:
            record = core.open_record(row)[0]
        except UnreadableValueError as exc:
            record = Unreadable(str(exc))
    label = cipher_label(row["metadata_type"])
    if label != PLAINTEXT_LABEL and not isinstance(core.serde, Sealer):
        metadata: Any = SEALED
    else:
        try:
            metadata = core.open_metadata(row)
        except UnreadableValueError as exc:
            metadata = Unreadable(str(exc))
    return record, metadata


def node_from_row(core: SaverState, row: Row) -> CheckpointNode:
    """Summarise one row of the `inspect_checkpoint_facts` fragment.

    A damaged row still gives a node, whose `damage` says what is wrong.

    Example:
        >>> node = node_from_row(saver, row)  # doctest: +SKIP
    """
    try:
        return _summarised(core, row)
    except (TypeError, ValueError, AttributeError) as exc:
        # a shape of damage no check foresaw (a record decoded into odd types):
        # the checkpoint still shows, as damaged, and so do the others
        found = RowDamage(core.schema, row_key(row))
        found.checkpoint("*", f"the row cannot be summarised ({type(exc).__name__}: {exc})")
        thread_id, ns, checkpoint_id = row_key(row)
        return CheckpointNode(
            thread_id,
            ns,
            checkpoint_id,
            parent_id=row["parent_checkpoint_id"],
            created_at=row["created_at"],
            run_id=row["run_id"],
            ran=None,
            next=None,
            damage=found.damage,
        )


def _summarised(core: SaverState, row: Row) -> CheckpointNode:
    thread_id, ns, checkpoint_id = row_key(row)
    found = RowDamage(core.schema, (thread_id, ns, checkpoint_id))
    record, metadata = _opened(core, row)
    if isinstance(record, Unreadable):
        found.checkpoint("type, checkpoint", record.error)
    if isinstance(metadata, Unreadable):
        found.checkpoint("metadata_type, metadata, metadata_blob", metadata.error)
    projection, problems = projection_of(row["metadata"])  # the readable JSONB column
    for problem in problems:
        found.checkpoint("metadata", problem)
    if not isinstance(metadata, Mapping):
        metadata = projection
    parent_id = row["parent_checkpoint_id"]
    parent_record = None
    if row["parent_type"] is not None:
        parent_record = decode_value(
            core,
            row["parent_type"],
            row["parent_checkpoint"],
            binding("checkpoint", thread_id, ns, parent_id),
        )
        if isinstance(parent_record, dict):
            take_structure(parent_record)
    versions, problems = channel_versions_of(row["channel_versions"])
    for problem in problems:
        found.checkpoint("channel_versions", problem)
    available = set(row["available_channels"] or ())
    trigger_values = _trigger_values(core, thread_id, ns, row, found)
    seen, problems = versions_seen_of(record)
    for problem in problems:
        found.checkpoint("type, checkpoint", problem)
    next_nodes: list[str] | None = None
    unknown = any(v is SEALED or isinstance(v, Unreadable) for v in trigger_values.values())
    if seen is not None and not unknown:
        next_nodes = triggered_nodes(seen, versions, available, trigger_values)
    ran: list[str] | None = None
    parent_seen = versions_seen_of(parent_record)[0]
    if parent_id is None or parent_record is None:
        ran = []  # the first checkpoint, or a parent pruned away
    elif isinstance(parent_record, Mapping) and seen is not None:
        ran = nodes_that_ran(parent_seen or {}, seen)
    changed = [
        ChannelChange(channel, version, stored, size)
        for channel, version, stored, size in zip(
            row["changed_channels"] or (),
            row["changed_versions"] or (),
            row["changed_stored"] or (),
            row["changed_bytes"] or (),
            strict=True,
        )
    ]
    sends = send_packets(trigger_values.get(TASKS))
    tasks = _tasks(core, row, sends, found)
    size = int(row["record_bytes"] or 0)
    size += sum(c.bytes or 0 for c in changed)
    size += sum(int(n or 0) for n in row["write_bytes"] or ())
    return CheckpointNode(
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        parent_id=parent_id,
        created_at=row["created_at"],
        run_id=row["run_id"],
        metadata=dict(metadata),
        ran=ran,
        sent=int(row["parent_push_tasks"] or 0),
        next=next_nodes,
        changed=changed,
        tasks=tasks,
        bytes=size,
        damage=found.damage,
    )


def _trigger_values(
    core: SaverState, thread_id: str, ns: str, row: Row, found: RowDamage
) -> dict[str, Any]:
    pieces: dict[str, list[tuple[str, str, bytes, str | None]]] = {}
    for channel, version, base, type_, data in zip(
        row["trigger_channels"] or (),
        row["trigger_versions"] or (),
        row["trigger_bases"] or (),
        row["trigger_types"] or (),
        row["trigger_blobs"] or (),
        strict=True,
    ):
        pieces.setdefault(channel, []).append((version, type_, data, base))
    values: dict[str, Any] = {}
    for channel, chain in pieces.items():
        sealed = any(cipher_label(piece[1]) != PLAINTEXT_LABEL for piece in chain)
        if sealed and not isinstance(core.serde, Sealer):
            values[channel] = SEALED
            continue
        try:
            values[channel] = core.load_blob((thread_id, ns, channel), chain)
        except UnreadableValueError as exc:
            values[channel] = Unreadable(str(exc))
            found.blob(channel, chain[-1][0], str(exc))
    return values


def _tasks(core: SaverState, row: Row, sends: Sequence[Any], found: RowDamage) -> list[TaskInfo]:
    thread_id, ns, checkpoint_id = row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"]
    tasks: dict[str, TaskInfo] = {}
    for task_id, path, idx, channel, type_, size, payload in zip(
        row["write_task_ids"] or (),
        row["write_task_paths"] or (),
        row["write_idxs"] or (),
        row["write_channels"] or (),
        row["write_types"] or (),
        row["write_bytes"] or (),
        row["write_payloads"] or (),
        strict=True,
    ):
        task = tasks.get(task_id)
        if task is None:
            task = tasks[task_id] = TaskInfo(task_id, task_name(path, sends), path)
        if idx >= 0:
            task.writes.append((channel, int(size or 0)))
            continue
        aad = binding("write", thread_id, ns, checkpoint_id, task_id, idx)
        value = decode_value(core, type_, payload, aad, (channel, path))
        if isinstance(value, Unreadable):
            found.write(task_id, idx, value.error)
        if channel == INTERRUPT:
            for interrupt in value if isinstance(value, list | tuple) else [value]:
                # an Interrupt (duck-typed: langgraph itself is not a dependency);
                # SEALED is an enum, whose `value` is its text, so it stays itself
                if interrupt is SEALED or isinstance(interrupt, Unreadable):
                    task.interrupts.append(interrupt)
                    task.interrupt_ids.append(None)
                    continue
                task.interrupts.append(getattr(interrupt, "value", interrupt))
                task.interrupt_ids.append(getattr(interrupt, "id", None))
        elif channel == ERROR:
            task.error = value
        elif channel == RESUME:
            task.resume.extend(value if isinstance(value, list) else [value])
    return list(tasks.values())


# -- a thread ----------------------------------------------------------------------


def thread_page_op(
    core: SaverState,
    thread_id: str,
    checkpoint_ns: str = "",
    *,
    limit: int = 50,
    until: str | None = None,
) -> Op[ThreadPage]:
    """Read the newest `limit` checkpoints of a namespace (at or before `until`).

    Reads a fixed number of rows however long the thread is: the page, the
    namespace's count, and the subgraphs that ran from the page.

    Example:
        >>> page = saver.run(thread_page_op(saver, "t1", limit=20))  # doctest: +SKIP
    """
    thread_id = check_id("thread_id", thread_id)
    checkpoint_ns = check_id("checkpoint_ns", checkpoint_ns)
    if until is not None:
        until = check_id("checkpoint_id", until)
    rows = yield Stmt(
        "inspect_namespace_counts",
        {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "until": until},
        fetch=True,
    )
    total, newer = int(rows[0]["total"]), int(rows[0]["newer"])
    if total == 0:
        rows = yield Stmt("inspect_thread_namespaces", {"thread_id": thread_id}, fetch=True)
        namespaces = {r["checkpoint_ns"]: int(r["checkpoints"]) for r in rows}
        return ThreadPage(thread_id, checkpoint_ns, 0, 0, [], namespaces=namespaces)
    # one row more than shown says where the page before this one ends
    rows = yield Stmt(
        "inspect_thread_page",
        {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "until": until,
            "limit": limit + 1,
        },
        fetch=True,
    )
    older_id = rows[limit]["checkpoint_id"] if len(rows) > limit else None
    nodes = [node_from_row(core, row) for row in rows[:limit]]
    ids = [n.checkpoint_id for n in nodes]
    later: list[Row] = []
    if until is not None and ids:
        later = yield Stmt(
            "inspect_later_children",
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "until": until,
                "checkpoint_ids": ids,
            },
            fetch=True,
        )
    link(nodes, [(r["parent_checkpoint_id"], r["source"]) for r in later])
    if ids:
        rows = yield Stmt(
            "inspect_child_namespaces",
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "prefix": f"{checkpoint_ns}|" if checkpoint_ns else "",
                "checkpoint_ids": ids,
            },
            fetch=True,
        )
        by_id = {n.checkpoint_id: n for n in nodes}
        for row in rows:
            latest = node_from_row(core, row)
            parents = latest.metadata.get("parents")
            parent = parents.get(checkpoint_ns) if isinstance(parents, Mapping) else None
            if parent in by_id:
                by_id[parent].subgraphs.append(
                    SubgraphInfo(row["checkpoint_ns"], int(row["checkpoints"]), latest)
                )
    holders, lock_seen = yield from lock_holders_op(core, core.schema, [thread_id])
    return ThreadPage(
        thread_id,
        checkpoint_ns,
        total,
        newer,
        nodes,
        older_id,
        locked_by=holders.get(thread_id),
        lock_seen=lock_seen,
    )


def lock_holders_op(
    core: SaverState, schema: str, thread_ids: Sequence[str]
) -> Op[tuple[dict[str, int], bool]]:
    """Which of the threads' `lock_thread` locks a session holds (thread id -> backend pid).

    Also whether the server can tell: a standby cannot see the primary's
    advisory locks (they are not replicated), so there it answers `({}, False)`
    without asking for them.

    Example:
        >>> saver.run(lock_holders_op(saver, "public", ["t1"]))  # doctest: +SKIP
        ({'t1': 4242}, True)
    """
    if not thread_ids:
        return {}, True
    rows = yield Stmt("inspect_server_in_recovery", fetch=True)
    if rows[0]["in_recovery"]:
        return {}, False
    keys = {thread_lock_key(t, schema): t for t in thread_ids}
    locks = yield Stmt("inspect_thread_lock_holders", {"keys": list(keys)}, fetch=True)
    return {keys[r["key"]]: int(r["holder_pid"]) for r in locks}, True


# -- many threads ------------------------------------------------------------------


def recent_threads_op(
    core: SaverState,
    *,
    schema: str = "public",
    limit: int = 20,
    since: dt.datetime | None = None,
    metadata: Sequence[Mapping[str, Any]] | None = None,
) -> Op[list[ThreadSummary]]:
    """The `limit` threads with the newest checkpoints, newest first.

    Args:
        core: The saver (its serializer decodes the values).
        schema: The schema of the tables (thread locks are keyed by it).
        limit: How many threads.
        since: Only threads with a checkpoint saved at or after this time.
        metadata: Only threads with a checkpoint whose metadata contains one
            of these (JSONB `@>` on the readable `metadata` column, which
            whoever can write the table can edit: each thread found is marked
            `unverified`; `pgcheckpoint.threadview.search` checks the sealed
            metadata instead).

    Example:
        >>> saver.run(recent_threads_op(saver, limit=5))  # doctest: +SKIP
    """
    filters = None if metadata is None else [Jsonb(dict(m)) for m in metadata]
    rows = yield Stmt(
        "inspect_recent_threads",
        {"since": since, "filters": filters, "limit": limit},
        fetch=True,
    )
    matched = (
        None if metadata is None else dict.fromkeys((r["thread_id"] for r in rows), UNVERIFIED)
    )
    return (yield from thread_summaries_op(core, schema, rows, matched))


def thread_summaries_op(
    core: SaverState, schema: str, rows: Sequence[Row], matched: Mapping[str, str] | None = None
) -> Op[list[ThreadSummary]]:
    """The `ThreadSummary` of each row of the `thread_summaries` fragment, with its lock.

    `matched` says how a metadata filter matched each thread (`sealed` or
    `unverified`), for `ThreadSummary.metadata_filter`.

    Example:
        >>> saver.run(thread_summaries_op(saver, "public", []))  # doctest: +SKIP
        []
    """
    holders, lock_seen = yield from lock_holders_op(core, schema, [r["thread_id"] for r in rows])
    summaries = []
    for row in rows:
        latest = node_from_row(core, row) if row["checkpoint_id"] is not None else None
        summaries.append(
            ThreadSummary(
                thread_id=row["thread_id"],
                checkpoints=int(row["checkpoints"]),
                namespaces=int(row["namespaces"]),
                last_activity=row["last_activity"],
                size_bytes=int(row["size_bytes"] or 0),
                latest=latest,
                locked_by=holders.get(row["thread_id"]),
                lock_seen=lock_seen,
                metadata_filter=None if matched is None else matched.get(row["thread_id"]),
            )
        )
    return summaries


# -- one checkpoint in full --------------------------------------------------------


def resolve_checkpoint_op(
    core: SaverState, thread_id: str, checkpoint_ns: str, ref: str
) -> Op[list[str]]:
    """The checkpoint ids of a namespace that are `ref` or end with it (at most 5).

    Example:
        >>> saver.run(resolve_checkpoint_op(saver, "t1", "", "9b512346"))  # doctest: +SKIP
        ['1f1ec4f0-3152-6245-8004-cdb09b512346']
    """
    rows = yield Stmt(
        "inspect_resolve_checkpoint",
        {
            "thread_id": check_id("thread_id", thread_id),
            "checkpoint_ns": check_id("checkpoint_ns", checkpoint_ns),
            "checkpoint_id": check_id("checkpoint_id", ref),
        },
        fetch=True,
    )
    return [r["checkpoint_id"] for r in rows]


def checkpoint_values_op(
    core: SaverState, thread_id: str, checkpoint_ns: str, checkpoint_id: str
) -> Op[CheckpointTuple | None]:
    """One checkpoint with its values and pending writes, decoded by the core.

    A value that cannot be read (corrupt, altered, refused) is an `Unreadable`
    holding the error, in the place of that value; the others still show.

    Raises:
        DecryptionError: The values are encrypted and no key is configured.

    Example:
        >>> saver.run(checkpoint_values_op(saver, "t1", "", cid)).checkpoint  # doctest: +SKIP
    """
    params = {
        "thread_id": check_id("thread_id", thread_id),
        "checkpoint_ns": check_id("checkpoint_ns", checkpoint_ns),
        "checkpoint_id": check_id("checkpoint_id", checkpoint_id),
    }
    sealed = isinstance(core.serde, Sealer)
    rows = yield Stmt(
        "get_checkpoint_by_id_sealed" if sealed else "get_checkpoint_by_id", params, fetch=True
    )
    if not rows:
        return None
    row = rows[0]
    if not isinstance(core.serde, Sealer):
        for type_ in [row["type"], row["metadata_type"], *(row["blob_types"] or ())]:
            label = cipher_label(type_)
            if label != PLAINTEXT_LABEL:
                raise DecryptionError(
                    f"the values of checkpoint {checkpoint_id!r} are encrypted under key "
                    f"{label!r} and no key is configured: set {KEYS_ENV} as the "
                    "application does"
                )
    _, problems = channel_versions_of(row["channel_versions"])
    if problems:  # which stored value is which channel's is lost with the column
        raise TornRowError(problems[0])
    try:
        return load_tuple(core, row)
    except UnreadableValueError:
        return _piece_by_piece(core, row)


# How a metadata filter matched a thread (`ThreadSummary.metadata_filter`).
SEALED_MATCH = "sealed"
UNVERIFIED = "unverified"

# The entries that stand for a record or metadata that cannot be read.
UNREADABLE_RECORD = "(checkpoint record)"
UNREADABLE_METADATA = "(metadata)"


def _piece_by_piece(core: SaverState, row: Row) -> CheckpointTuple:
    """`load_tuple`, with what cannot be read shown in its place as an `Unreadable`."""
    thread_id, ns, checkpoint_id = row_key(row)
    pieces = stored_pieces(row)
    stored = [ch for ch, chain in pieces.items() if chain[-1][1] != "empty"]
    values: dict[str, Any] = {}
    parent = row["parent_checkpoint_id"]
    record: dict[str, Any] = {}
    try:
        record, parent = core.open_record(row, stored)
        values.update(record.get("channel_values") or {})
    except UnreadableValueError as exc:
        values[UNREADABLE_RECORD] = Unreadable(str(exc))
    for channel in stored:
        try:
            values[channel] = core.load_blob((thread_id, ns, channel), pieces[channel])
        except UnreadableValueError as exc:
            values[channel] = Unreadable(str(exc))
    record["channel_values"] = values
    record["channel_versions"] = dict(row["channel_versions"])
    pending = [
        (
            task_id,
            channel,
            decode_value(
                core,
                type_,
                data,
                binding("write", thread_id, ns, checkpoint_id, task_id, idx),
                (channel, path),
            ),
        )
        for task_id, idx, channel, path, type_, data in pending_write_rows(row)
    ]
    try:
        metadata = core.open_metadata(row)
    except UnreadableValueError as exc:
        metadata = {UNREADABLE_METADATA: Unreadable(str(exc))}
    return checkpoint_tuple(row_key(row), record, metadata, parent, pending)

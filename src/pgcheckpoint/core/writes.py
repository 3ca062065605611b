"""Saving: a checkpoint with the values of its changed channels, and pending writes.

Example:
    >>> from pgcheckpoint.core.state import SaverState
    >>> from pgcheckpoint.core.writes import put_writes_op
    >>> config = {"configurable": {"thread_id": "t1", "checkpoint_id": "c1"}}
    >>> next(put_writes_op(SaverState(), config, [("a", 1)], "task")).name
    'insert_write'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg.errors import ForeignKeyViolation
from psycopg.types.json import Jsonb

from ..codec.binding import as_sealer, binding
from ..codec.integrity import add_structure, projection_keys
from ..errors import MissingCheckpointError, MissingParentError
from ..ops import Op, Stmt
from ..statements.arrays import ByteaArray, Int4Array, TextArray
from ..telemetry.activity import note_values
from ..validate import check_id, thread_of
from .appends import AppendPlan
from .locks import maintenance_lock_key
from .state import SaverState

__all__ = ["blob_params", "put_op", "put_writes_op"]

# Channel values stored inline in the checkpoint record, not as blobs.
_INLINE_TYPES = (str, int, float, bool)
# Namespaces remembered where a put found its parent deleted (`deleted_under_runs`).
_DELETED_UNDER_RUNS = 1024


def put_op(
    saver: SaverState,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> Op[RunnableConfig]:
    """Store a checkpoint and the values of the channels that changed."""
    thread_id, checkpoint_ns = thread_of(config)
    checkpoint_id = check_id("checkpoint_id", checkpoint["id"])
    parent_id = get_checkpoint_id(config)
    if parent_id is not None:
        parent_id = check_id("checkpoint_id", parent_id)
    record: dict[str, Any] = {
        k: v for k, v in checkpoint.items() if k not in ("channel_values", "channel_versions")
    }
    inline: dict[str, Any] = {}
    # channel -> (version, serde type, serialised bytes, delta plan or None)
    blobs: dict[str, tuple[str, str, bytes, AppendPlan | None]] = {}
    for channel, value in checkpoint["channel_values"].items():
        if (value is None or isinstance(value, _INLINE_TYPES)) and not isinstance(
            value, _DeltaSnapshot
        ):
            inline[channel] = value
        elif channel in new_versions:
            version = str(new_versions[channel])
            aad = binding("blob", thread_id, checkpoint_ns, channel, version)
            type_, data = saver.serialize(value, aad)
            plan = None
            if saver.append_deltas and type_ == "msgpack" and isinstance(value, list):
                key = (thread_id, checkpoint_ns, check_id("channel", channel))
                plan = saver.append_cache.plan(
                    key, version, data, full_every=saver.full_value_every
                )
            blobs[check_id("channel", channel)] = (version, type_, data, plan)
    record["channel_values"] = inline
    sealed_parent = None
    sealing = as_sealer(saver.serde) is not None
    if sealing:
        # what a read relies on goes under the seal with the record (row format 2)
        stored = [check_id("channel", ch) for ch in checkpoint["channel_values"]]
        add_structure(
            record,
            parent=parent_id,
            versions=checkpoint["channel_versions"],
            stored=[ch for ch in stored if ch not in inline],
        )
        sealed_parent = parent_id or ""
    where = (thread_id, checkpoint_ns, checkpoint_id)
    type_, data = saver.dump_value(record, binding("checkpoint", *where))
    # LangGraph's helper strips NULs from top-level strings (JSONB cannot hold
    # them); the blob can, so the caller's own values are kept as given.
    full_metadata = get_serializable_checkpoint_metadata(config, metadata)
    full_metadata.update({k: v for k, v in metadata.items() if k != "writes"})  # type: ignore[typeddict-item]
    projection = saver.metadata_projection(full_metadata)
    metadata_type, metadata_blob = saver.dump_value(
        full_metadata,
        binding("metadata", *where),
        (projection_keys(projection),) if sealing else (),
    )
    run_id = full_metadata.get("run_id")
    params = {
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns,
        "checkpoint_id": checkpoint_id,
        "parent_checkpoint_id": parent_id,
        "sealed_parent_id": sealed_parent,
        "lock_key": maintenance_lock_key(thread_id, saver.schema),
        "run_id": None if run_id is None else str(run_id),
        "type": type_,
        "checkpoint": data,
        "channel_versions": Jsonb({k: str(v) for k, v in checkpoint["channel_versions"].items()}),
        "inline_channels": TextArray(inline),
        "metadata_type": metadata_type,
        "metadata_blob": metadata_blob,
        "metadata": Jsonb(projection),
        **blob_params(saver, thread_id, checkpoint_ns, blobs, deltas=True),
    }
    try:
        rows = yield Stmt("put_checkpoint", params, fetch=True)
    except ForeignKeyViolation:
        # A delta's base was deleted (pruned) since this saver stored it:
        # store whole values instead.
        saver.append_cache.forget_thread(thread_id)
        params.update(blob_params(saver, thread_id, checkpoint_ns, blobs, deltas=False))
        rows = yield Stmt("put_checkpoint", params, fetch=True)
    where_ns = (thread_id, checkpoint_ns)
    if rows and not rows[0]["stored"]:
        # The parent is gone (retention, prune, delete_thread), perhaps while
        # the graph ran on it: a child saved anyway would cut its history short.
        # What the run's tasks saved since, on either, belongs to nothing now,
        # and what they save next is refused while the namespace stays empty.
        saver.deleted_under_runs[where_ns] = None
        while len(saver.deleted_under_runs) > _DELETED_UNDER_RUNS:
            saver.deleted_under_runs.popitem(last=False)
        yield from _forget_orphan_writes_op(
            saver, thread_id, checkpoint_ns, [cast(str, parent_id), checkpoint_id]
        )
        raise MissingParentError(thread_id, checkpoint_ns, checkpoint_id, cast(str, parent_id))
    note_values(cast(TextArray, params["blob_bases"]))
    saver.deleted_under_runs.pop(where_ns, None)
    if saver.append_deltas:
        for channel, (version, type_, data, plan) in blobs.items():
            if type_ == "msgpack":
                saver.append_cache.remember(
                    (thread_id, checkpoint_ns, channel),
                    version,
                    data,
                    chain=plan.chain if plan is not None else 0,
                    chain_bytes=plan.chain_bytes if plan is not None else 0,
                )
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def put_writes_op(
    saver: SaverState,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str = "",
    *,
    after_delete: bool = False,
) -> Op[bool]:
    """Store the writes of one task against a checkpoint; False to try again after a delete.

    Like a put, the writes hold the thread's maintenance lock shared, but
    they only try it: while a delete of the thread holds it, nothing is
    stored. When nothing was stored (a delete, or regular writes saved
    already) the op returns False, and the caller runs it again with
    `after_delete`, in one transaction: it waits for any delete, and saves
    only if a checkpoint of the namespace is left (`MissingCheckpointError`
    otherwise), in a snapshot taken after the delete, holding the lock.
    """
    thread_id, checkpoint_ns = thread_of(config)
    checkpoint_id = check_id("checkpoint_id", get_checkpoint_id(config))
    task_id = check_id("task_id", task_id)
    task_path = check_id("task_path", task_path or "")
    if not writes:
        return True
    idxs, channels, types, blobs = Int4Array(), TextArray(), TextArray(), ByteaArray()
    for position, (channel, value) in enumerate(writes):
        name = check_id("channel", channel)
        channels.append(name)
        idx = WRITES_IDX_MAP.get(channel, position)
        idxs.append(idx)
        aad = binding("write", thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        type_, data = saver.dump_value(value, aad, (name, task_path))
        types.append(type_)
        blobs.append(data)
    special = all(channel in WRITES_IDX_MAP for channel, _ in writes)
    where_ns = (thread_id, checkpoint_ns)
    params: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns,
        "checkpoint_id": checkpoint_id,
        "task_id": task_id,
        "task_path": task_path,
        "lock_key": maintenance_lock_key(thread_id, saver.schema),
    }
    one = len(writes) == 1  # most tasks write one channel: no arrays to unpack
    if one:
        params.update(idx=idxs[0], channel=channels[0], type=types[0], blob=blobs[0])
    else:
        params.update(idxs=idxs, channels=channels, types=types, blobs=blobs)
    # a run that goes on after its thread was deleted under it saves nothing
    deleted_under_run = where_ns in saver.deleted_under_runs
    checked = after_delete or deleted_under_run
    if checked:
        # the namespaces a checkpoint of which lets the writes in (namespace_left):
        # after a delete, a subgraph's namespace may have none yet, and only
        # a delete of the whole thread leaves the root namespace empty
        params["namespaces"] = TextArray(
            [checkpoint_ns] if deleted_under_run or not checkpoint_ns else [checkpoint_ns, ""]
        )
    if after_delete:
        yield Stmt("wait_for_thread_deletes", {"lock_key": params["lock_key"]}, fetch=True)
    save = Stmt(
        ("upsert_write_checked" if one else "upsert_writes_checked")
        if special and checked
        else ("upsert_write" if one else "upsert_writes")
        if special
        else ("insert_write_checked" if one else "insert_writes_checked")
        if checked
        else ("insert_write" if one else "insert_writes"),
        params,
        count=True,
    )
    saved = bool((yield save))
    if not saved and not after_delete:
        return False
    refused = False
    if not saved:
        # regular writes saved already (by an earlier try), or no checkpoint
        # of the namespace left
        keys = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "namespaces")
        where = {key: params[key] for key in keys}
        rows = yield Stmt("task_writes_or_namespace", where, fetch=True)
        refused = not (rows[0]["written"] or rows[0]["found"])
    elif not checked and where_ns in saver.deleted_under_runs:
        # a put found the thread deleted while these waited for a connection:
        # its clean-up may have run before they landed
        yield from _forget_orphan_writes_op(saver, thread_id, checkpoint_ns, [checkpoint_id])
        refused = True
    if refused:
        raise MissingCheckpointError(thread_id, checkpoint_ns, checkpoint_id, task_id)
    return True


def _forget_orphan_writes_op(
    saver: SaverState, thread_id: str, ns: str, checkpoint_ids: list[str]
) -> Op[None]:
    """Remove the writes of a run whose thread was deleted under it (forget_orphan_writes)."""
    lock_key = maintenance_lock_key(thread_id, saver.schema)
    yield Stmt("wait_for_thread_saves", {"lock_key": lock_key}, fetch=True)
    yield Stmt(
        "forget_orphan_writes",
        {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_ids": checkpoint_ids},
    )


def blob_params(
    saver: SaverState,
    thread_id: str,
    ns: str,
    blobs: Mapping[str, tuple[str, str, bytes, AppendPlan | None]],
    *,
    deltas: bool,
) -> dict[str, list[Any]]:
    params: dict[str, list[Any]] = {
        "blob_channels": TextArray(),
        "blob_versions": TextArray(),
        "blob_types": TextArray(),
        "blob_values": ByteaArray(),
        "blob_bases": TextArray(),
    }
    for channel, (version, type_, data, plan) in blobs.items():
        if deltas and plan is not None:
            data, base = plan.payload, plan.base_version
        else:
            base = None
        aad = binding("blob", thread_id, ns, channel, version)
        packed_type, packed = saver.pack_value(type_, data, aad, (base,))
        params["blob_channels"].append(channel)
        params["blob_versions"].append(version)
        params["blob_types"].append(packed_type)
        params["blob_values"].append(packed)
        params["blob_bases"].append(base)
    return params

"""Running the core's ops without a database: each statement answered with canned rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.conformance.test_utils import generate_config, generate_metadata

from pgcheckpoint.core.rows import MAX_CHAIN_DEPTH
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.core.writes import put_op, put_writes_op
from pgcheckpoint.ops import Op, Row, Stmt
from pgcheckpoint.statements.queries import statement_names
from support.checkpoints import with_values


def drive(op: Op[Any], replies: list[Any]) -> tuple[list[Stmt], Any]:
    """Run an op on canned replies: each a list of rows, or an exception raised at the yield.

    Returns the statements the op asked for, one per reply used, and its result.
    Fails when a statement has no name in `sql/queries/`, or when the op asks
    for more statements than there are replies.
    """
    sent: list[Stmt] = []
    try:
        stmt = next(op)
        for reply in replies:
            sent.append(stmt)
            assert stmt.name in statement_names(), f"no statement named {stmt.name!r}"
            stmt = op.throw(reply) if isinstance(reply, BaseException) else op.send(reply)
        raise AssertionError(f"the op asked for more than the canned replies: {stmt}")
    except StopIteration as done:
        return sent, done.value


def put(
    core: SaverState,
    thread_id: str,
    values: dict[str, Any],
    parent: Any = None,
    *,
    v: int | None = None,
) -> Stmt:
    """Save a checkpoint holding `values`: the put_checkpoint statement, run as stored.

    `v` is its format (the conformance suite's checkpoints are in format 1).
    """
    config = generate_config(thread_id)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent.params["checkpoint_id"]
    checkpoint, versions = with_values(values)
    if v is not None:
        checkpoint["v"] = v
    sent, _ = drive(
        put_op(core, config, checkpoint, generate_metadata(step=len(values)), versions),
        [[{"stored": True}]],
    )
    return sent[0]


def put_writes(core: SaverState, at: Stmt, writes: list[tuple[str, Any]], task_id: str) -> Stmt:
    config = generate_config(at.params["thread_id"], checkpoint_id=at.params["checkpoint_id"])
    sent, _ = drive(put_writes_op(core, config, writes, task_id), [[{}]])
    return sent[0]


def pieces_of(puts: Sequence[Stmt]) -> list[Row]:
    """The blob rows the puts stored."""
    return [
        {
            "thread_id": p.params["thread_id"],
            "checkpoint_ns": p.params["checkpoint_ns"],
            "channel": channel,
            "version": version,
            "base_version": base,
            "type": type_,
            "blob": data,
        }
        for p in puts
        for channel, version, base, type_, data in zip(
            p.params["blob_channels"],
            p.params["blob_versions"],
            p.params["blob_bases"],
            p.params["blob_types"],
            p.params["blob_values"],
            strict=True,
        )
    ]


def saved_writes(stmt: Stmt) -> list[tuple[int, str, str, bytes]]:
    """(idx, channel, type, blob) of each write a put_writes statement saves."""
    p = stmt.params
    if "idxs" not in p:  # a task's only write, as scalar parameters
        return [(p["idx"], p["channel"], p["type"], p["blob"])]
    return list(zip(p["idxs"], p["channels"], p["types"], p["blobs"], strict=True))


def keys_of(stmt: Stmt) -> list[tuple[str, str, str]]:
    """The checkpoints a statement names (`checkpoint_keys` parameters)."""
    assert stmt.params["max_depth"] == MAX_CHAIN_DEPTH
    return list(
        zip(
            stmt.params["thread_ids"],
            stmt.params["checkpoint_nss"],
            stmt.params["checkpoint_ids"],
            strict=True,
        )
    )


# What bounded_plans returns: the planner settings it turned off.
PLANNER_SETTINGS = [{"enable_nestloop": "on", "jit": "on"}]


def bounded(rows: list[Row]) -> list[list[Row]]:
    """The replies of a statement run by `with_bounded_plan_op`: the settings, its rows,
    and planner_settings'."""
    return [PLANNER_SETTINGS, rows, []]


def delta_chain(rows: Sequence[Row], stored: Sequence[str] = (), channel: str = "m") -> list[Row]:
    """`delta_links` rows for checkpoints of one namespace, oldest first, each the parent
    of the next: all have a version of DeltaChannel `channel`; those named in `stored`
    store a value of it."""
    links = []
    parent = None
    for row in rows:
        links.append(
            {
                "thread_id": row["thread_id"],
                "checkpoint_ns": row["checkpoint_ns"],
                "checkpoint_id": row["checkpoint_id"],
                "parent_checkpoint_id": parent,
                "delta": [channel],
                "stored": [channel] if row["checkpoint_id"] in stored else [],
                "sends_parent": False,
            }
        )
        parent = row["checkpoint_id"]
    return links

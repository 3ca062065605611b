"""The sends of a checkpoint older than LangGraph's format v4: the one rule.

From checkpoint format v4 on, the `Send` packets a step runs are a channel of
the checkpoint, `__pregel_tasks`. Before, they were pending writes of its
parent to that channel; older LangGraph wrote such checkpoints, and the
deprecated `langgraph.checkpoint.base.empty_checkpoint()` and
`create_checkpoint()` still do (format 2). A read hands one out as a current
checkpoint, as `langgraph-checkpoint-postgres` reads it: its parent's writes
to `__pregel_tasks`, in `writes_sort_key` order, become its
`channel_values["__pregel_tasks"]`, and the channel gets the newest of its
versions (a first version, when it has none). A checkpoint without a parent,
or whose parent wrote no sends, comes back as it is.

`pgcheckpoint.core.reads` reads the parents' writes: `get_tuple` in one more
statement, for such a checkpoint only; `list` from the listed parent when the
page holds it, else in one statement for the page. `keep_latest` keeps the
parent of such a head (`pgcheckpoint.core.deletes`).

Example:
    >>> from pgcheckpoint.core.sends import move_sends
    >>> from pgcheckpoint.core.state import SaverState
    >>> checkpoint = {"v": 1, "channel_values": {}, "channel_versions": {"a": "2.5"}}
    >>> move_sends(SaverState(), checkpoint, ["send-1"])
    >>> checkpoint["channel_values"], checkpoint["channel_versions"]["__pregel_tasks"]
    ({'__pregel_tasks': ['send-1']}, '2.5')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.checkpoint.base import Checkpoint, CheckpointTuple
from langgraph.checkpoint.serde.types import TASKS

from ..codec.binding import binding
from ..ops import Op, Stmt
from ..statements.arrays import TextArray
from .state import SaverState

__all__ = [
    "SENDS_FORMAT",
    "WriteRow",
    "load_sends",
    "move_sends",
    "parent_sends_op",
    "sends_parent",
    "tuple_sends_parent",
]

# The checkpoint format from which a checkpoint holds its own sends.
SENDS_FORMAT = 4

# A stored pending write: (task id, idx, channel, task path or None, type, bytes).
WriteRow = tuple[str, int, str, str | None, str, bytes]


def sends_parent(
    key: tuple[str, str, str], checkpoint: Mapping[str, Any], parent: str | None
) -> tuple[str, str, str] | None:
    """The key of the checkpoint whose writes hold the sends of checkpoint `key`
    (its record, its parent's id), None when it holds its own.

    Example:
        >>> key = ("t", "", "c2")
        >>> sends_parent(key, {"v": 1}, "c1"), sends_parent(key, {"v": 4}, "c1")
        (('t', '', 'c1'), None)
    """
    version = checkpoint.get("v")
    # bool is an int, but no checkpoint format
    if not parent or type(version) is not int or version >= SENDS_FORMAT:
        return None
    return (key[0], key[1], parent)


def tuple_sends_parent(tup: CheckpointTuple) -> tuple[str, str, str] | None:
    """`sends_parent` of a decoded checkpoint.

    Example:
        >>> config = {"configurable": {"thread_id": "t", "checkpoint_ns": "",
        ...                            "checkpoint_id": "c1"}}
        >>> tuple_sends_parent(CheckpointTuple(config, {"v": 1}, {}, config))
        ('t', '', 'c1')
    """
    conf = tup.config["configurable"]
    parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
    return sends_parent((conf["thread_id"], conf["checkpoint_ns"], ""), tup.checkpoint, parent)


def parent_sends_op(
    saver: SaverState, parents: Iterable[tuple[str, str, str]]
) -> Op[dict[tuple[str, str, str], list[WriteRow]]]:
    """The stored writes to `__pregel_tasks` of some checkpoints, by checkpoint key.

    Each checkpoint's are in `writes_sort_key` order; decode them with
    `load_sends`, once per checkpoint they go to.
    """
    keys = list(dict.fromkeys(parents))
    rows = yield Stmt(
        "parent_sends",
        {
            "thread_ids": TextArray([k[0] for k in keys]),
            "checkpoint_nss": TextArray([k[1] for k in keys]),
            "checkpoint_ids": TextArray([k[2] for k in keys]),
        },
        fetch=True,
    )
    found: dict[tuple[str, str, str], list[WriteRow]] = {}
    for row in rows:
        key = (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])
        found.setdefault(key, []).append(
            (
                row["task_id"],
                row["idx"],
                row["channel"],
                row["task_path"],
                row["type"],
                row["blob"],
            )
        )
    return found


def load_sends(
    saver: SaverState, parent: tuple[str, str, str], writes: Iterable[WriteRow]
) -> list[Any]:
    """The sends among a parent's stored `writes` (in their order), freshly decoded.

    Example:
        >>> load_sends(SaverState(), ("t", "", "c1"), [])
        []
    """
    return [
        saver.load_value(
            type_,
            data,
            binding("write", *parent, task_id, idx),
            (channel, path),
        )
        for task_id, idx, channel, path, type_, data in writes
        if channel == TASKS
    ]


def move_sends(saver: SaverState, checkpoint: Checkpoint, sends: list[Any]) -> None:
    """Give a pre-v4 checkpoint its parent's `sends` as its `__pregel_tasks` value.

    Nothing changes when there are none.

    Example:
        >>> checkpoint = {"v": 1, "channel_values": {}, "channel_versions": {}}
        >>> move_sends(SaverState(), checkpoint, [])
        >>> checkpoint["channel_versions"]
        {}
    """
    if not sends:
        return
    versions = checkpoint["channel_versions"]
    version = max(versions.values()) if versions else saver.get_next_version(None, None)
    checkpoint["channel_values"][TASKS] = sends
    checkpoint["channel_versions"][TASKS] = version

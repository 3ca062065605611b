"""A checkpoint row's key, the keys of a set of rows as statement parameters, and its versions.

Example:
    >>> from pgcheckpoint.core.rows import row_key
    >>> row_key({"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"})
    ('t', '', 'c')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import UnreadableValueError
from ..ops import Row
from ..statements.arrays import TextArray

__all__ = [
    "MAX_CHAIN_DEPTH",
    "channel_versions_of",
    "checkpoint_keys",
    "json_kind",
    "read_channel_versions",
    "row_key",
]

# Bounds a parent-chain walk; a real chain is far shorter (DeltaChannel
# snapshots at least every 5,000 super-steps), so this only stops a cycle.
MAX_CHAIN_DEPTH = 1_000_000


def checkpoint_keys(rows: Sequence[Row], *, thread_id: str | None = None) -> dict[str, Any]:
    """The parameters of a statement about a set of checkpoints: their keys as three
    parallel arrays, and the bound of a parent-chain walk (`delete_checkpoints`,
    `measure_checkpoints`, `rebuild_dependencies`, `listed_values`).

    `thread_id` names the thread of rows that do not carry it.

    Example:
        >>> checkpoint_keys([{"checkpoint_ns": "", "checkpoint_id": "c1"}], thread_id="t")[
        ...     "thread_ids"]
        ['t']
    """
    return {
        "thread_ids": TextArray(
            [r["thread_id"] for r in rows] if thread_id is None else [thread_id] * len(rows)
        ),
        "checkpoint_nss": TextArray([r["checkpoint_ns"] for r in rows]),
        "checkpoint_ids": TextArray([r["checkpoint_id"] for r in rows]),
        "max_depth": MAX_CHAIN_DEPTH,
    }


def row_key(row: Row) -> tuple[str, str, str]:
    """A checkpoint row's key: (thread_id, checkpoint_ns, checkpoint_id).

    Example:
        >>> row_key({"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"})
        ('t', '', 'c')
    """
    return (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])


def json_kind(value: Any) -> str:
    """What JSON value a column holds, for a message.

    Example:
        >>> json_kind([1]), json_kind(None), json_kind("x")
        ('a JSON array', 'JSON null', 'a JSON string')
    """
    if value is None:
        return "JSON null"
    if isinstance(value, bool):
        return "a JSON boolean"
    if isinstance(value, int | float):
        return "a JSON number"
    if isinstance(value, str):
        return "a JSON string"
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, Mapping):
        return "a JSON object"
    return type(value).__name__


def channel_versions_of(value: Any) -> tuple[dict[str, Any], list[str]]:
    """The usable versions of a `channel_versions` column, and what is wrong with it.

    Example:
        >>> channel_versions_of({"a": "1", "b": {"x": 1}})
        ({'a': '1'}, ["column channel_versions gives channel 'b' a JSON object, not a version"])
    """
    if not isinstance(value, Mapping):
        return {}, [f"column channel_versions is {json_kind(value)}, not an object"]
    versions: dict[str, Any] = {}
    problems = []
    for channel, version in value.items():
        # LangGraph's versions are text, int or float (ChannelVersions)
        if isinstance(version, str | int | float) and not isinstance(version, bool):
            versions[channel] = version
        else:
            problems.append(
                f"column channel_versions gives channel {channel!r} {json_kind(version)}, "
                "not a version"
            )
    return versions, problems


def read_channel_versions(row: Row) -> dict[str, Any]:
    """A checkpoint row's `channel_versions` for a read, refused unless it is an object
    of versions (text or numbers), as pgcheckpoint writes it.

    A row edited outside pgcheckpoint may hold any JSON there; a read names the
    row rather than hand out versions LangGraph cannot compare. (The thread view
    shows such a row instead, with `channel_versions_of`.)

    Example:
        >>> read_channel_versions({"channel_versions": {"a": "1"}})
        {'a': '1'}
    """
    versions, problems = channel_versions_of(row["channel_versions"])
    if problems:
        where = ", ".join(
            f"{k} {row[k]!r}" for k in ("thread_id", "checkpoint_ns", "checkpoint_id") if k in row
        )
        raise UnreadableValueError(
            f"the pgc_checkpoints row ({where}) was changed outside pgcheckpoint: "
            f"{problems[0]}; restore the row from a backup, or delete the checkpoint"
        )
    return versions

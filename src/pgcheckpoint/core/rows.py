"""A checkpoint row's key, and the keys of a set of rows as statement parameters.

Example:
    >>> from pgcheckpoint.core.rows import row_key
    >>> row_key({"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"})
    ('t', '', 'c')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..ops import Row
from ..statements.arrays import TextArray

__all__ = ["MAX_CHAIN_DEPTH", "checkpoint_keys", "row_key"]

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

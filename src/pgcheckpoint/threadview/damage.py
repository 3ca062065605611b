"""What is wrong with a damaged row, said where the thread view shows it.

A row that is not as pgcheckpoint writes it (edited by hand or by a tool, a
restore gone wrong, a disk fault) must not hide the others: `threads` still
lists every thread and `show` every checkpoint, and a damaged checkpoint says
what is wrong and gives the query that shows its row. The statements of
`sql/queries/threadview.sql` read such rows without failing; the checks here
say what a row holds instead of what it should:

- `channel_versions` that is no JSON object, or a version that is neither
  text nor a number;
- `metadata` (the readable column, shown when the stored metadata cannot be
  read) that is no JSON object;
- a checkpoint record with no `versions_seen` mapping of mappings;
- a record, metadata, channel value or write whose bytes do not decode (the
  ops find those as an `Unreadable` in the value's place).

Example:
    >>> channel_versions_of(["1"])
    ({}, ['column channel_versions is a JSON array, not an object'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg import sql

from ..core.rows import channel_versions_of, json_kind
from ..errors import UnreadableValueError
from .model import Damage

__all__ = [
    "RowDamage",
    "TornRowError",
    "channel_versions_of",
    "json_kind",
    "projection_of",
    "versions_seen_of",
]


class TornRowError(UnreadableValueError):
    """A checkpoint row whose values cannot even be told apart (its `channel_versions`
    is no object of versions), so none of them is shown; `show` says what is wrong."""


def projection_of(value: Any) -> tuple[dict[str, Any], list[str]]:
    """The readable `metadata` column as a dict, and what is wrong with it.

    Example:
        >>> projection_of("x")
        ({}, ['column metadata is a JSON string, not an object'])
    """
    if isinstance(value, Mapping):
        return dict(value), []
    return {}, [f"column metadata is {json_kind(value)}, not an object"]


def versions_seen_of(record: Any) -> tuple[Mapping[str, Mapping[str, Any]] | None, list[str]]:
    """A decoded checkpoint record's `versions_seen`, None when it has none to use.

    Example:
        >>> versions_seen_of({"versions_seen": {"a": 3}})
        (None, ["the checkpoint record's versions_seen of 'a' is int, not a mapping"])
    """
    if not isinstance(record, Mapping):
        return None, []  # sealed or unreadable: said elsewhere
    seen = record.get("versions_seen")
    if seen is None:
        return None, []
    if not isinstance(seen, Mapping):
        return None, [
            f"the checkpoint record's versions_seen is {type(seen).__name__}, not a mapping"
        ]
    for node, versions in seen.items():
        if versions is not None and not isinstance(versions, Mapping):
            return None, [
                f"the checkpoint record's versions_seen of {node!r} is "
                f"{type(versions).__name__}, not a mapping"
            ]
    return seen, []


class RowDamage:
    """The damage found in the rows of one checkpoint, each with the query that shows it.

    Example:
        >>> found = RowDamage("public", ("t", "", "c1"))
        >>> found.write("task-1", -3, "write -3 of task 'task-1' cannot be read")
        >>> for part in found.damage[0].look.split(" AND "):
        ...     print(part)
        SELECT channel, type, blob FROM "public"."pgc_writes" WHERE thread_id = 't'
        checkpoint_ns = ''
        checkpoint_id = 'c1'
        task_id = 'task-1'
        idx = -3
    """

    def __init__(self, schema: str, key: tuple[str, str, str]) -> None:
        self.schema = schema
        self.key = key
        self.damage: list[Damage] = []

    def _where(self, table: str, column: str, extra: dict[str, Any]) -> str:
        names: dict[str, Any] = {"thread_id": self.key[0], "checkpoint_ns": self.key[1]}
        if table != "pgc_blobs":  # a value belongs to its namespace, not to one checkpoint
            names["checkpoint_id"] = self.key[2]
        names.update(extra)
        conditions = " AND ".join(
            f"{name} = {value if isinstance(value, int) else sql.Literal(value).as_string(None)}"
            for name, value in names.items()
        )
        relation = sql.Identifier(self.schema, table).as_string(None)
        return f"SELECT {column} FROM {relation} WHERE {conditions}"

    def checkpoint(self, column: str, what: str) -> None:
        """A problem of the checkpoint's own row, in `column` of pgc_checkpoints."""
        self.damage.append(Damage(what, self._where("pgc_checkpoints", column, {})))

    def blob(self, channel: str, version: str, what: str) -> None:
        """A stored value of the checkpoint (pgc_blobs) that cannot be read."""
        look = self._where(
            "pgc_blobs", "type, base_version, blob", {"channel": channel, "version": version}
        )
        self.damage.append(Damage(what, look))

    def write(self, task_id: str, idx: int, what: str) -> None:
        """A write saved against the checkpoint (pgc_writes) that cannot be read."""
        look = self._where("pgc_writes", "channel, type, blob", {"task_id": task_id, "idx": idx})
        self.damage.append(Damage(what, look))

"""A batch's ops checked and turned into what the statements take.

A namespace is stored as its labels joined by `.`; no label holds a `.`, a
NUL or nothing, so the join is exact and a prefix P is the key range
`[P, P + '/')` minus what lies before `P + '.'` (`namespace_range`). Searches
and listings become JSON specs, one per op, that `store_search` and
`store_list_namespaces` read as rows (`jsonb_to_recordset`), so a batch's
searches are one statement whatever their filters.

Example:
    >>> namespace_range(("a", "b"))
    {'prefix': 'a.b', 'lo': 'a.b.', 'hi': 'a.b/'}
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    Op,
    PutOp,
    SearchOp,
    validate_op_namespace,
)

from ..errors import InvalidInputError
from .filters import compile_filter

__all__ = [
    "BatchPlan",
    "check_count",
    "list_spec",
    "namespace_labels",
    "namespace_range",
    "namespace_text",
    "plan_ops",
    "search_spec",
]

# The largest limit or offset a search or a listing takes (PostgreSQL's int).
_MAX_COUNT = 2**31 - 1


def namespace_text(namespace: Sequence[str]) -> str:
    """A namespace as the `ns` column holds it.

    Example:
        >>> namespace_text(("a", "b"))
        'a.b'
    """
    return ".".join(namespace)


def namespace_labels(text: str) -> tuple[str, ...]:
    """The inverse of `namespace_text`.

    Example:
        >>> namespace_labels("a.b")
        ('a', 'b')
    """
    return tuple(text.split("."))


def namespace_range(prefix: Sequence[str]) -> dict[str, str | None]:
    """The `prefix`, `lo`, `hi` of a spec: the range of `ns` a namespace prefix covers.

    An empty prefix covers everything (`prefix` None).

    Example:
        >>> namespace_range(())["prefix"] is None
        True
    """
    if not prefix:
        return {"prefix": None, "lo": None, "hi": None}
    text = namespace_text(prefix)
    return {"prefix": text, "lo": text + ".", "hi": text + "/"}


def check_count(name: str, value: Any, *, allow_none: bool = False) -> None:
    """A limit, offset or depth: a non-negative int PostgreSQL can take.

    Example:
        >>> check_count("limit", 10)
    """
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise InvalidInputError(f"{name} must be an int from 0 to {_MAX_COUNT}, not {value!r}")


def _check_key(key: Any) -> None:
    if not isinstance(key, str):
        raise InvalidInputError(f"an item key must be a string, not {type(key).__name__!r}")
    if "\x00" in key:
        raise InvalidInputError(
            f"item key {key!r} holds a NUL character, which PostgreSQL text cannot store; "
            "remove it from the key"
        )


def search_spec(
    op: SearchOp, index: int, *, omit_expired: bool, filterable: frozenset[str] | None
) -> dict[str, Any]:
    """The JSON spec `store_search` (or `store_search_vector`) reads for one search.

    Example:
        >>> search_spec(SearchOp(("a",)), 0, omit_expired=True, filterable=None)["lim"]
        10
    """
    check_count("limit", op.limit)
    check_count("offset", op.offset)
    contains, conds = compile_filter(op.filter, filterable)
    return {
        "i": index,
        **namespace_range(op.namespace_prefix),
        "contains": contains,
        "conds": conds or None,
        "lim": op.limit,
        "off": op.offset,
        "refresh": bool(op.refresh_ttl),
        "omit": omit_expired,
    }


def list_spec(op: ListNamespacesOp, index: int, *, omit_expired: bool) -> dict[str, Any] | None:
    """The JSON spec `store_list_namespaces` reads for one listing; None if none can match.

    Several prefix (or suffix) conditions are merged label by label, `*`
    matching any one label; two literal labels that differ match nothing.

    Example:
        >>> from langgraph.store.base import MatchCondition
        >>> op = ListNamespacesOp((MatchCondition("prefix", ("a", "*")),))
        >>> list_spec(op, 0, omit_expired=True)["pre"]
        ['a', None]
    """
    check_count("limit", op.limit)
    check_count("offset", op.offset)
    check_count("max_depth", op.max_depth, allow_none=True)
    merged: dict[str, list[str | None] | None] = {"prefix": None, "suffix": None}
    for condition in op.match_conditions or ():
        if condition.match_type not in merged:
            raise InvalidInputError(
                f"match_type must be 'prefix' or 'suffix', not {condition.match_type!r}"
            )
        path = tuple(condition.path)
        if not path:
            continue
        pattern = [None if label == "*" else label for label in path]
        if condition.match_type == "suffix":
            pattern.reverse()
        have = merged[condition.match_type]
        if have is None:
            merged[condition.match_type] = pattern
            continue
        longer, shorter = (have, pattern) if len(have) >= len(pattern) else (pattern, have)
        out = list(longer)
        for i, label in enumerate(shorter):
            if label is None:
                continue
            if out[i] is None:
                out[i] = label
            elif out[i] != label:
                return None
        merged[condition.match_type] = out
    pre, suf = merged["prefix"], merged["suffix"]
    if suf is not None:
        suf.reverse()
    literal: list[str] = []
    for label in pre or ():
        if label is None:
            break
        literal.append(label)
    depth = op.max_depth
    # The namespaces cut to the same `depth` labels all pass the conditions or
    # none does when only labels within the depth are tested: the walk of
    # `store_namespaces` then jumps past the rest of them (`jump`).
    same = depth is not None and suf is None and (pre is None or len(pre) <= depth)
    return {
        "i": index,
        **namespace_range(literal),
        "pre": pre,
        "suf": suf,
        "depth": depth,
        "jump": depth if same else None,
        "lim": op.limit,
        "off": op.offset,
        "omit": omit_expired,
    }


@dataclass
class BatchPlan:
    """A batch's ops, checked and grouped: what `batch.batch_op` runs.

    Attributes:
        size: How many ops the batch has (one result each).
        gets: (position, op) of each get.
        searches: (position, op) of each search without a query.
        queries: (position, op) of each search with a query (and an index).
        lists: (position, op) of each namespace listing.
        puts: The last put of each (namespace, key), in batch order.

    Example:
        >>> plan_ops([GetOp(("a",), "k")]).gets[0][0]
        0
    """

    size: int = 0
    gets: list[tuple[int, GetOp]] = field(default_factory=list)
    searches: list[tuple[int, SearchOp]] = field(default_factory=list)
    queries: list[tuple[int, SearchOp]] = field(default_factory=list)
    lists: list[tuple[int, ListNamespacesOp]] = field(default_factory=list)
    puts: dict[tuple[tuple[str, ...], str], PutOp] = field(default_factory=dict)

    @property
    def writes(self) -> bool:
        """Whether the batch puts or deletes."""
        return bool(self.puts)

    @property
    def mixed(self) -> bool:
        """Whether it both puts and deletes (run in one transaction)."""
        values = [op.value is None for op in self.puts.values()]
        return any(values) and not all(values)


def plan_ops(ops: Iterable[Op], *, vector_search: bool = False) -> BatchPlan:
    """Check every op of a batch and group them; raise before anything runs.

    Raises:
        InvalidNamespaceError: A label is empty, not a string, holds a `.` or a
            NUL, or a put names the empty namespace.
        InvalidInputError: A key, limit, offset or depth cannot be used.

    Example:
        >>> plan_ops([PutOp(("a",), "k", {"v": 1})]).writes
        True
    """
    plan = BatchPlan()
    for position, op in enumerate(ops):
        plan.size += 1
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            _check_key(op.key)
            plan.gets.append((position, op))
        elif isinstance(op, PutOp):
            if not op.namespace:
                raise InvalidNamespaceError(
                    "an item needs a namespace of at least one label; () names none"
                )
            _check_key(op.key)
            key = (tuple(op.namespace), op.key)
            plan.puts.pop(key, None)  # the last put wins, in batch order
            plan.puts[key] = op
        elif isinstance(op, SearchOp):
            if op.query and vector_search:
                plan.queries.append((position, op))
            else:
                plan.searches.append((position, op))
        elif isinstance(op, ListNamespacesOp):
            plan.lists.append((position, op))
        else:
            raise InvalidInputError(
                f"a store batch takes GetOp, PutOp, SearchOp and ListNamespacesOp, "
                f"not {type(op).__name__!r}"
            )
    return plan

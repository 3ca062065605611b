"""A search filter as the statements check it: one JSONB containment and typed conditions.

A filter means what `InMemoryStore` means by it, with JSON's types: a plain
value is equality (a missing field reads as null, so `{"x": None}` matches
an item without `x`); a dict without operators matches a dict holding at
least those keys, each compared the same way, at any depth; a list matches a
list of the same length, element by element; `$eq` and `$ne` compare whole
values (`$ne` keeps items that lack the field); `$gt`, `$gte`, `$lt` and
`$lte` compare numbers as numbers, strings by code point and booleans as
booleans, and never match a value of another type (nor a missing one).
Unlike Python, JSON keeps `true` apart from `1`.

Scalar equalities along dict keys become one containment (`doc @> ...`,
which an index can serve); the rest become conditions `{"p": path, "o": op,
"v": value}` for `store_filter`.

Example:
    >>> compile_filter({"color": "red", "score": {"$gt": 3}}, None)
    ({'color': 'red'}, [{'p': ['score'], 'o': 'gt', 'v': 3}])
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..codec.metadata import json_projection
from ..errors import InvalidInputError

__all__ = ["OPERATORS", "compile_filter"]

OPERATORS = {"$eq": "eq", "$ne": "ne", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
_ORDERED = frozenset({"gt", "gte", "lt", "lte"})


def _checked(value: Any, where: str) -> Any:
    def walk(v: Any) -> None:
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidInputError(f"filter {where} compares with {v!r}, which JSON cannot hold")
        if isinstance(v, Mapping):
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)

    walk(value)
    return json_projection(value)[0]


def compile_filter(
    filter: Mapping[str, Any] | None, filterable: frozenset[str] | None
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The containment and conditions of a filter; `filterable`: what a sealed store may read.

    Raises:
        InvalidInputError: An unknown operator, a comparison with a value that
            has no order (a list, a dict, null), a NaN, or (encrypting) a field
            not declared filterable.

    Example:
        >>> compile_filter({"meta": {"lang": "en"}}, None)
        ({'meta': {'lang': 'en'}}, [{'p': ['meta'], 'o': 'object', 'v': None}])
    """
    if not filter:
        return None, []
    if not isinstance(filter, Mapping):
        raise InvalidInputError(f"a filter must be a dict, not {type(filter).__name__!r}")
    contains: dict[str, Any] = {}
    conds: list[dict[str, Any]] = []

    def contain(path: list[str], value: Any) -> None:
        node = contains
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value

    def walk(path: list[str], want: Any, plain: bool) -> None:
        where = ".".join(path)
        if isinstance(want, Mapping) and any(str(k).startswith("$") for k in want):
            for name, operand in want.items():
                op = OPERATORS.get(name)
                if op is None:
                    raise InvalidInputError(
                        f"filter {where!r} uses {name!r}; the operators are " + ", ".join(OPERATORS)
                    )
                if op in _ORDERED and (
                    operand is None or not isinstance(operand, str | int | float)
                ):
                    raise InvalidInputError(
                        f"filter {where!r}: {name} compares numbers, strings or booleans, "
                        f"not {type(operand).__name__!r}"
                    )
                conds.append({"p": path, "o": op, "v": _checked(operand, repr(where))})
        elif isinstance(want, Mapping):
            conds.append({"p": path, "o": "object", "v": None})
            for k, v in want.items():
                walk([*path, str(k)], v, plain)
        elif isinstance(want, list | tuple):
            conds.append({"p": path, "o": "array", "v": len(want)})
            for i, v in enumerate(want):
                walk([*path, str(i)], v, False)
        elif want is None or not plain:
            conds.append({"p": path, "o": "eq", "v": _checked(want, repr(where))})
        else:
            contain(path, _checked(want, repr(where)))

    for name, want in filter.items():
        if filterable is not None and name not in filterable:
            raise InvalidInputError(
                f"filter on {name!r}, which this store does not keep readable: with "
                "encryption on, a filter reads only the fields declared in "
                f"filterable=[...]; add {name!r} there (it is then stored unencrypted)"
            )
        walk([str(name)], want, True)
    return contains or None, conds

"""Checkpoint metadata as the JSONB column holds it, and filters matched against it.

The metadata of a checkpoint is stored whole in a serialised (maybe sealed)
column, and as JSONB for `list(filter=...)` to search. JSONB cannot hold every
value: `json_projection` says what it holds and whether that lost anything,
and `metadata_matches` checks a filter in Python the way JSONB `@>` would.

Example:
    >>> from pgcheckpoint.codec.metadata import metadata_matches
    >>> metadata_matches({"step": 1, "source": "loop"}, {"step": 1})
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["STRUCTURAL_KEYS", "json_projection", "metadata_matches"]

# Metadata keys maintenance reads in SQL (which DeltaChannels a thread has,
# as LangGraph and LangGraph.js mark them): always in the JSONB projection,
# whatever an encrypting serializer hides.
STRUCTURAL_KEYS = frozenset({"counters_since_delta_snapshot", "delta_writes_versioned"})


def json_projection(value: Any) -> tuple[Any, bool]:
    """Metadata as JSONB can hold it, and whether that lost anything.

    JSONB cannot hold NUL characters, unpaired surrogates or non-finite
    floats; those are replaced (the full metadata is stored separately, so
    nothing is lost on read) and filters on them are re-checked in Python.

    Example:
        >>> json_projection({"a": "x\\x00y"})
        ({'a': 'x\\ufffdy'}, True)
    """
    lossy = False

    def walk(v: Any) -> Any:
        nonlocal lossy
        if isinstance(v, str):
            if "\x00" in v:
                lossy = True
                v = v.replace("\x00", "\ufffd")
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                lossy = True
                v = v.encode("utf-8", "replace").decode("utf-8")
            return v
        if isinstance(v, bool) or v is None or isinstance(v, int):
            return v
        if isinstance(v, float):
            if math.isfinite(v):
                return v
            lossy = True
            return repr(v)
        if isinstance(v, Mapping):
            return {walk(str(k)): walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        lossy = True
        return walk(str(v))

    return walk(value), lossy


def metadata_matches(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether `metadata` contains `filter` the way JSONB `@>` means it.

    Example:
        >>> metadata_matches({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 2}})
        True
    """

    def contains(have: Any, want: Any) -> bool:
        if isinstance(want, Mapping):
            return isinstance(have, Mapping) and all(
                k in have and contains(have[k], v) for k, v in want.items()
            )
        if isinstance(want, list | tuple):
            return isinstance(have, list | tuple) and all(
                any(contains(h, w) for h in have) for w in want
            )
        # JSON booleans are not numbers, though Python's True == 1
        if isinstance(have, bool) or isinstance(want, bool):
            return type(have) is type(want) and have == want
        return bool(have == want)

    return contains(metadata, filter)

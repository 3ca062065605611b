"""Checks on what callers pass in: ids, configs, and metadata as JSONB holds it.

Example:
    >>> from pgcheckpoint.validate import thread_of
    >>> thread_of({"configurable": {"thread_id": 7}})
    ('7', '')
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from .errors import InvalidInputError

__all__ = [
    "STRUCTURAL_KEYS",
    "check_id",
    "configurable",
    "json_projection",
    "metadata_matches",
    "thread_of",
]

# Identifiers go into primary keys; a btree entry holds at most ~2,700 bytes.
_MAX_ID_BYTES = {"thread_id": 1024, "checkpoint_ns": 1024}
_MAX_OTHER_ID_BYTES = 255
# Metadata keys maintenance reads in SQL (which DeltaChannels a thread has):
# always in the JSONB projection, whatever an encrypting serializer hides.
STRUCTURAL_KEYS = frozenset({"counters_since_delta_snapshot"})


def check_id(kind: str, value: Any) -> str:
    """Validate an identifier before it reaches the database.

    Ints, UUIDs and other scalars are turned into their string form, as
    LangGraph does. NUL characters, unpaired surrogates and over-long values are
    refused with a message that says what to change.

    Example:
        >>> check_id("thread_id", 42)
        '42'
    """
    if value is None:
        raise InvalidInputError(f"{kind!r} is missing; pass it in config['configurable']")
    if isinstance(value, bytes | bytearray):
        raise InvalidInputError(f"{kind!r} must be a string, not bytes")
    text = value if isinstance(value, str) else str(value)
    if "\x00" in text:
        raise InvalidInputError(
            f"{kind!r} contains a NUL character, which PostgreSQL text cannot store; "
            "remove it or encode the id (for example as hex)"
        )
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{kind!r} contains an unpaired surrogate and is not valid unicode; "
            "pass a properly encoded string"
        ) from None
    limit = _MAX_ID_BYTES.get(kind, _MAX_OTHER_ID_BYTES)
    if size > limit:
        raise InvalidInputError(
            f"{kind!r} is {size} bytes long; the limit is {limit} bytes. "
            "Use a shorter id, for example a hash of this one"
        )
    return text


def configurable(config: RunnableConfig | None) -> dict[str, Any]:
    """A copy of `config["configurable"]`, empty when there is none.

    Example:
        >>> configurable(None), configurable({"configurable": {"thread_id": "t"}})
        ({}, {'thread_id': 't'})
    """
    if not config:
        return {}
    return dict(config.get("configurable") or {})


def thread_of(config: RunnableConfig) -> tuple[str, str]:
    """The validated (thread_id, checkpoint_ns) of a config.

    Example:
        >>> thread_of({"configurable": {"thread_id": "t1"}})
        ('t1', '')
    """
    conf = configurable(config)
    if conf.get("thread_id") is None:
        raise InvalidInputError(
            "config has no 'thread_id': pass config={'configurable': {'thread_id': ...}}"
        )
    thread_id = check_id("thread_id", conf["thread_id"])
    return thread_id, check_id("checkpoint_ns", conf.get("checkpoint_ns") or "")


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

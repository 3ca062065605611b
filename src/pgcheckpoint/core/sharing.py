"""What a value a read hands out may share with anything else: the one rule.

Every value a read hands out (`get_tuple`, `list`, and so `get_state` and
`get_state_history`; `get_delta_channel_history`; the thread view) is the
caller's own: it shares nothing mutable with a cache, with what is stored, or
with another value of the same result, whatever its type. A caller, or a node,
may edit it in place, and no later read sees the edit.

1. What may be shared: what nothing can change in place (`shareable`): text,
   bytes, numbers, None, booleans, dates, times, UUIDs, decimals, enum members
   and classes (a decode hands out the same ones), and tuples and frozensets
   of those. Stored bytes are bytes.
2. When a value must be copied: a value just decoded belongs to no one, and
   is handed out as it is, once. A value anything else still holds (a cache's
   entry; a list piece that a later checkpoint of the same listing uses too)
   reaches a caller only as `handout(value)`.
3. How: `handout` copies every dict, list, set and tuple, every pydantic model
   (a LangChain message) and every plain dataclass in the value, at any depth,
   and shares only what (1) allows; a value holding anything else (an object
   of a class of the application's, a bytearray, a deque, a numpy array)
   raises `NotWhole`, and is not kept or shared: a cache refuses it
   (`pgcheckpoint.core.caches.DecodedCache`), a listing decodes it again for
   each checkpoint that holds it (`pgcheckpoint.core.reads`). For those, a
   fresh decode is the copy.

The copies are made without `copy.copy`, which dispatches through
`__reduce_ex__`: models as `BaseModel.__copy__` copies them, dataclasses by
their instance dict. Empty dicts and lists, most of a message's fields, cost
no call.

Example:
    >>> from pgcheckpoint.core.sharing import copies_whole, handout
    >>> kept = [{"a": [1]}]
    >>> copies_whole(kept), handout(kept)[0]["a"] is kept[0]["a"]
    (True, False)
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import uuid
from enum import Enum
from typing import Any

from pydantic import BaseModel

__all__ = ["NotWhole", "copies_whole", "handout", "shareable"]

# Types whose values nothing changes in place, matched exactly (a subclass may add state).
_IMMUTABLE = frozenset(
    {
        str,
        int,
        float,
        complex,
        bool,
        type(None),
        bytes,
        datetime.date,
        datetime.datetime,
        datetime.time,
        datetime.timedelta,
        datetime.timezone,
        uuid.UUID,
        decimal.Decimal,
    }
)
# Methods by which a class says how it is copied or rebuilt; a plain one keeps object's.
_COPY_HOOKS = ("__copy__", "__deepcopy__", "__reduce__", "__reduce_ex__", "__getstate__")
# Per class: how `handout` copies its instances (_MODEL, _DATACLASS), or None.
_KINDS: dict[type, str | None] = {}
_MODEL = "model"
_DATACLASS = "dataclass"


def shareable(value: Any) -> bool:
    """Whether `value` may be shared as it is: nothing can change it in place.

    Example:
        >>> shareable(("a", 1)), shareable(("a", [1]))
        (True, False)
    """
    kind = type(value)
    if kind in _IMMUTABLE:
        return True
    if kind is tuple or kind is frozenset:
        return all(shareable(v) for v in value)
    return isinstance(value, Enum | type)


class NotWhole(Exception):
    """What `handout` raises for a value holding something it cannot copy whole."""


def copies_whole(value: Any) -> bool:
    """Whether `handout` copies `value` (else it raises `NotWhole`).

    Example:
        >>> copies_whole({"a": [1, "x"]}), copies_whole(bytearray(b"x")), copies_whole(object())
        (True, False, False)
    """
    try:
        handout(value)
    except NotWhole:
        return False
    return True


def handout(value: Any) -> Any:
    """A copy of `value` that shares only what `shareable` allows, or `NotWhole`.

    It copies dicts (whose keys are `shareable`), lists, sets and frozensets
    of `shareable` items, tuples and NamedTuples, pydantic models without
    private attributes, and plain dataclasses (no slots, no copy hooks), at
    any depth; anything else it meets, unless `shareable`, raises `NotWhole`.

    Example:
        >>> inner = [1]
        >>> handout({"a": inner})["a"] is inner
        False
    """
    kind = type(value)
    if kind is list:
        # a list of messages, most often: each copied without the dispatch below
        return [
            v
            if type(v) in _IMMUTABLE
            else _copy_model(v)
            if _KINDS.get(type(v)) is _MODEL
            else handout(v)
            for v in value
        ]
    if kind is dict:
        copied = value.copy()
        for k, v in copied.items():
            if type(k) is not str and not shareable(k):
                raise NotWhole(f"a key of type {type(k).__name__!r}")
            if type(v) not in _IMMUTABLE:
                copied[k] = handout(v)
        return copied
    if kind in _IMMUTABLE:
        return value
    how = _how_copied(value)
    if how is _MODEL:
        return _copy_model(value)
    if how is _DATACLASS:
        new = _new(kind)  # its __new__ is object's (_how_copied)
        _set(new, "__dict__", handout(value.__dict__))  # frozen ones too
        return new
    if kind is set or kind is frozenset:
        if not all(map(shareable, value)):
            raise NotWhole(f"a {kind.__name__} of objects that are not shareable")
        return value.copy() if kind is set else value
    if isinstance(value, tuple) and (kind is tuple or hasattr(kind, "_make")):
        if shareable(value):
            return value
        items = [handout(v) for v in value]
        return tuple(items) if kind is tuple else kind._make(items)
    if shareable(value):
        return value
    raise NotWhole(f"a value of type {kind.__name__!r}")


def _how_copied(value: Any) -> str | None:
    cls = type(value)
    try:
        return _KINDS[cls]
    except KeyError:
        pass
    if len(_KINDS) > 4096:  # classes made at run time
        _KINDS.clear()
    how = None
    if cls.__new__ is object.__new__:  # type: ignore[comparison-overlap]
        if isinstance(value, BaseModel):
            if cls.__copy__ is BaseModel.__copy__:
                how = _MODEL
        elif (
            dataclasses.is_dataclass(cls)
            and not any("__slots__" in vars(base) for base in cls.__mro__[:-1])
            and all(getattr(cls, hook, None) is getattr(object, hook, None) for hook in _COPY_HOOKS)
        ):
            how = _DATACLASS
    _KINDS[cls] = how
    return how


def _copy_model(item: Any) -> Any:
    new = _new(type(item))  # its __new__ is object.__new__ (_how_copied)
    fields = item.__dict__.copy()
    for k, v in fields.items():
        kind = type(v)
        if kind in _IMMUTABLE:
            continue
        # most are empty (additional_kwargs, response_metadata...): no call
        if kind is dict:
            fields[k] = handout(v) if v else {}
        elif kind is list:
            fields[k] = handout(v) if v else []
        else:
            fields[k] = handout(v)
    private = item.__pydantic_private__
    if private:  # what a model keeps for itself, copied or not
        raise NotWhole(f"a {type(item).__name__!r} with private attributes")
    extra = item.__pydantic_extra__
    _set(new, "__dict__", fields)
    _set(new, "__pydantic_extra__", None if extra is None else handout(extra))
    _set(new, "__pydantic_fields_set__", item.__pydantic_fields_set__.copy())
    _set(new, "__pydantic_private__", None if private is None else {})
    return new


_new = object.__new__
_set = object.__setattr__

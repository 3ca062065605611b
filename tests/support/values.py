"""Values of the kinds LangGraph stores, and what a careless caller does to those it is handed.

`values(whole=...)` is a hypothesis strategy of nested values: plain ones,
dicts, lists, sets, tuples, LangChain messages, pydantic models, dataclasses
(frozen or not), enum members, dates; without `whole`, also what a copy cannot
take whole: bytearrays, custom classes, slotted dataclasses, deques, numpy
arrays (when numpy is installed). Custom classes need a serializer with
`pickle_fallback=True` (`SERDE`).

`vandalize` edits in place everything reachable in a value, inner parts
first (append, setitem, setattr, bytearray and array edits); `canon` is a form
of a value that compares with `==` (arrays by dtype, shape and bytes) and
sorts by its repr; `mutable_ids` the ids of everything in a value an edit can
reach.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import enum
import uuid
from typing import Any

from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel

try:
    import numpy
except ImportError:  # numpy arrays are tested where numpy is installed
    numpy = None  # type: ignore[assignment]

# What stores every value below, custom classes included.
SERDE = JsonPlusSerializer(pickle_fallback=True)
# What `vandalize` writes.
MARK = "vandal"


@dataclasses.dataclass
class Note:
    text: str
    tags: list[str]


@dataclasses.dataclass(frozen=True)
class Pin:
    label: str
    data: list[Any]


@dataclasses.dataclass(slots=True)
class Slotted:
    items: list[Any]


class Card(BaseModel):
    title: str
    items: list[Any] = []
    meta: dict[str, Any] = {}


class Box:
    """A class of the application's own: stored by pickle."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __eq__(self, other: object) -> bool:
        return type(other) is Box and other.items == self.items

    def __repr__(self) -> str:
        return f"Box({self.items!r})"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


_TEXT = st.text(max_size=12)
_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | _TEXT
    | st.binary(max_size=12)
)
_HASHABLE = _LEAVES | st.sampled_from(Color)
_STAMPS = st.datetimes(
    min_value=datetime.datetime(2000, 1, 1), timezones=st.just(datetime.timezone.utc)
)


def _messages(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    blocks = st.lists(st.builds(lambda t: {"type": "text", "text": t}, _TEXT), max_size=2)
    extra = st.dictionaries(_TEXT, children, max_size=2)
    calls = st.lists(
        st.builds(
            lambda n, a, i: {"name": n or "f", "args": a, "id": i, "type": "tool_call"},
            _TEXT,
            st.dictionaries(_TEXT, children, max_size=2),
            _TEXT,
        ),
        max_size=2,
    )
    # with an id: a graph gives a message without one a random id
    ids = st.text(min_size=1, max_size=12)
    return (
        st.builds(HumanMessage, content=_TEXT | blocks, additional_kwargs=extra, id=ids)
        | st.builds(AIMessage, content=_TEXT | blocks, tool_calls=calls, id=ids)
        | st.builds(ToolMessage, content=_TEXT, tool_call_id=_TEXT, artifact=children, id=ids)
    )


def values(*, whole: bool = False) -> st.SearchStrategy[Any]:
    """Nested values; with `whole`, only of kinds a copy can take whole (`copies_whole`)."""
    leaves = _LEAVES | st.sampled_from(Color) | _STAMPS | st.uuids()
    if not whole:
        leaves = leaves | st.binary(max_size=12).map(bytearray)
        if numpy is not None:
            leaves = leaves | st.lists(st.integers(-99, 99), max_size=6).map(
                lambda xs: numpy.array(xs, dtype=numpy.int64)
            )

    def nest(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        out = (
            st.lists(children, max_size=4)
            | st.dictionaries(_TEXT, children, max_size=4)
            | st.tuples(children, children)
            | st.sets(_HASHABLE, max_size=3)
            | st.builds(Note, _TEXT, st.lists(_TEXT, max_size=3))
            | st.builds(Pin, _TEXT, st.lists(children, max_size=3))
            | st.builds(Card, title=_TEXT, items=st.lists(children, max_size=3))
            | _messages(children)
        )
        if not whole:
            out = (
                out
                | st.builds(Box, st.lists(children, max_size=3))
                | st.builds(Slotted, st.lists(children, max_size=3))
                | st.lists(children, max_size=3).map(collections.deque)
            )
        return out

    return st.recursive(leaves, nest, max_leaves=8)


def _attributes(value: Any) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return dict(value.__dict__)
    slots = [
        name
        for base in type(value).__mro__
        for name in getattr(base, "__slots__", ())
        if hasattr(value, name) and not name.startswith("__")
    ]
    return {**getattr(value, "__dict__", {}), **{name: getattr(value, name) for name in slots}}


def _editable(value: Any) -> bool:
    """Whether `value` is an object of the application's data an edit can reach."""
    if isinstance(value, str | bytes | int | float | complex | type | enum.Enum) or value is None:
        return False
    if isinstance(value, datetime.date | datetime.time | datetime.timedelta | uuid.UUID):
        return False
    return isinstance(value, BaseModel) or not callable(value)


def vandalize(value: Any, seen: set[int] | None = None) -> None:
    """Edit in place everything reachable in `value`, inner parts first.

    Lists, dicts, sets and deques get an item set and one added; bytearrays
    bytes changed and added; writable arrays their items; models,
    dataclasses and other objects every attribute set (a frozen one keeps
    its own, but what it holds is edited).
    """
    seen = set() if seen is None else seen
    if id(value) in seen or not _editable(value):
        return
    seen.add(id(value))
    if isinstance(value, bytearray):
        if value:
            value[0] ^= 0xFF
        value.extend(b"!")
        return
    if numpy is not None and isinstance(value, numpy.ndarray):
        if value.flags.writeable and value.size:
            value.flat[0] = value.flat[0] + 1 if value.dtype.kind in "iuf" else value.flat[0]
        return
    if isinstance(value, dict):
        for item in list(value.values()):
            vandalize(item, seen)
        for key in list(value)[:1]:
            value[key] = MARK
        value[MARK] = [MARK]
        return
    if isinstance(value, list | collections.deque):
        for item in list(value):
            vandalize(item, seen)
        if value:
            value[0] = MARK
        value.append(MARK)
        return
    if isinstance(value, set):
        value.add(MARK)
        return
    if isinstance(value, tuple | frozenset):
        for item in value:
            vandalize(item, seen)
        return
    attributes = _attributes(value)
    for item in attributes.values():
        vandalize(item, seen)
    if isinstance(value, BaseModel):
        value.__pydantic_fields_set__.add(MARK)
    for name in attributes:
        # a frozen one refuses, a validating model may
        with contextlib.suppress(AttributeError, TypeError, ValueError):
            setattr(value, name, MARK)


def canon(value: Any) -> Any:
    """A form of `value` that compares with `==` and sorts by its repr."""
    if isinstance(value, str | bytes | int | float | complex | enum.Enum) or value is None:
        return value
    if isinstance(value, datetime.date | datetime.time | datetime.timedelta | uuid.UUID):
        return value
    if isinstance(value, bytearray):
        return ("bytearray", bytes(value))
    if numpy is not None and isinstance(value, numpy.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        items = [(canon(k), canon(v)) for k, v in value.items()]
        return (type(value).__name__, sorted(items, key=repr))
    if isinstance(value, set | frozenset):
        return (type(value).__name__, sorted(map(canon, value), key=repr))
    if isinstance(value, list | tuple | collections.deque):
        return (type(value).__name__, [canon(v) for v in value])
    if isinstance(value, BaseModel):
        extra = value.__pydantic_extra__ or {}
        return (type(value).__name__, canon(value.__dict__), canon(extra))
    return (type(value).__name__, canon(_attributes(value)))


def mutable_ids(value: Any) -> set[int]:
    """The ids of everything in `value` an edit in place can reach, inner dicts of objects too."""
    found: set[int] = set()
    stack = [value]
    while stack:
        obj = stack.pop()
        if id(obj) in found or not _editable(obj):
            continue
        if isinstance(obj, tuple | frozenset):
            stack.extend(obj)  # immutable itself; what it holds may not be
            continue
        found.add(id(obj))
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | set | collections.deque):
            stack.extend(obj)
        elif isinstance(obj, bytearray) or (numpy is not None and isinstance(obj, numpy.ndarray)):
            continue
        else:
            if isinstance(obj, BaseModel):
                stack.append(obj.__pydantic_fields_set__)
                stack.append(obj.__pydantic_extra__)
                stack.append(getattr(obj, "__pydantic_private__", None))
            if hasattr(obj, "__dict__"):
                stack.append(obj.__dict__)
            stack.extend(_attributes(obj).values())
    return found

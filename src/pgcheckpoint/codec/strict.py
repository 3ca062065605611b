"""LangGraph's serializer in strict mode, for tools that read rows they cannot trust.

LangGraph's `JsonPlusSerializer`, in its default mode, rebuilds a stored
object by importing the module and calling the function that the stored bytes
name: a row planted by anyone who can write to the database can run code as
whoever reads it. In strict mode it only rebuilds the types of LangGraph's
allowlist (messages, `Send`, `Interrupt`, dates, UUIDs, ...).
`StrictSerializer` is that mode, with one difference for people reading the
output: a value of any other type becomes a `Blocked` placeholder naming the
type, instead of its bare arguments. The command line (`pgcheckpoint threads`,
`show`, `rotate-key`, `import-langgraph`) reads every value through it.

Applications choose for themselves: `JsonPlusSerializer(allowed_msgpack_modules=None)`
(or `LANGGRAPH_STRICT_MSGPACK=true`) is LangGraph's strict mode, extended with
`allowed_msgpack_modules=[...]`; see docs/encryption.md.

Example:
    >>> from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    >>> import os
    >>> planted = JsonPlusSerializer().dumps_typed(os.path)  # doctest: +SKIP
    >>> StrictSerializer().loads_typed(planted)  # doctest: +SKIP
    <blocked: posixpath.module>
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

__all__ = ["Blocked", "StrictSerializer", "strict_ext_hook"]

# LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus).
_CONSTRUCTORS = (0, 1, 2, 4, 5)  # single arg, positional, keywords, pydantic v1, v2
_METHOD = 3
_DELTA_SNAPSHOT = 7


@dataclass(frozen=True)
class Blocked:
    """A stored object of a type strict mode does not rebuild, shown instead of it.

    Attributes:
        type_name: The `module.name` the stored bytes ask for.

    Example:
        >>> Blocked("os.system")
        <blocked: os.system>
    """

    type_name: str

    def __repr__(self) -> str:
        return f"<blocked: {self.type_name}>"


def _allowlists() -> tuple[frozenset[tuple[str, ...]], frozenset[tuple[str, ...]]]:
    try:
        from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
    except ImportError:  # a LangGraph without an allowlist: nothing is rebuilt
        return frozenset(), frozenset()
    return frozenset(SAFE_MSGPACK_TYPES), frozenset(SAFE_MSGPACK_METHODS)


def _strict_delegate() -> Callable[[int, bytes], Any] | None:
    # LangGraph's own strict hook rebuilds the allowed types (and numpy arrays)
    hook = getattr(JsonPlusSerializer(allowed_msgpack_modules=None), "_unpack_ext_hook", None)
    return hook if callable(hook) else None


def _peek(data: bytes) -> Any:
    # the (module, name, ...) tuple, without rebuilding anything inside it
    return ormsgpack.unpackb(
        data, ext_hook=lambda code, raw: None, option=ormsgpack.OPT_NON_STR_KEYS
    )


def strict_ext_hook(
    extra: frozenset[tuple[str, ...]] = frozenset(),
) -> Callable[[int, bytes], Any]:
    """A msgpack ext hook that rebuilds allow-listed types only, others as `Blocked`.

    Args:
        extra: More (module, name) pairs to rebuild, as LangGraph's
            `allowed_msgpack_modules` takes them.

    Example:
        >>> hook = strict_ext_hook()
        >>> hook(1, ormsgpack.packb(["os", "system", ["touch /tmp/x"]]))
        <blocked: os.system>
    """
    types, methods = _allowlists()
    types = types | extra
    delegate = _strict_delegate()

    def hook(code: int, data: bytes) -> Any:
        if code == _DELTA_SNAPSHOT:
            return _DeltaSnapshot(
                ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            )
        if code not in (*_CONSTRUCTORS, _METHOD):
            return delegate(code, data) if delegate is not None else None
        try:
            head = _peek(data)
            module, name = str(head[0]), str(head[1])
        except Exception:
            return Blocked("(unreadable)")
        if code == _METHOD:
            method = str(head[3]) if len(head) > 3 else ""
            allowed = (module, name, method) in methods
        else:
            allowed = (module, name) in types
        if not allowed or delegate is None:
            return Blocked(f"{module}.{name}")
        return delegate(code, data)

    return hook


class StrictSerializer(JsonPlusSerializer):
    """`JsonPlusSerializer` in strict mode, showing other types as `Blocked`.

    It writes exactly what `JsonPlusSerializer` writes; only reading differs.

    Example:
        >>> StrictSerializer().loads_typed(JsonPlusSerializer().dumps_typed({"a": 1}))
        {'a': 1}
    """

    def __init__(self) -> None:
        super().__init__(allowed_msgpack_modules=None, __unpack_ext_hook__=strict_ext_hook())

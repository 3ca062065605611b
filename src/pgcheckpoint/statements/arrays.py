"""Array parameters that psycopg sends without working out their type each time.

psycopg adapts a plain `list` in Python: it scans the items for their type,
picks a dumper for them and upgrades it for every statement a new cursor runs
(about 7 µs an array, 40-60 µs for the five arrays of a `put`, a sizeable part
of what the saver adds to a LangGraph super-step). These list subclasses carry
their PostgreSQL type, and their dumpers write the binary array format
directly.

A connection whose adapters psycopg had made before this module was imported
(it does so when the connection first runs a statement) does not know the
dumpers; there the values are still lists and psycopg adapts them the slow
way, with the same result.

Example:
    >>> import psycopg
    >>> from pgcheckpoint.statements.arrays import TextArray
    >>> psycopg.adapters.get_dumper(TextArray, psycopg.adapt.PyFormat.AUTO).__name__
    'TextArrayDumper'
"""

from __future__ import annotations

import struct
from typing import Any

import psycopg
from psycopg import DataError
from psycopg.abc import AdaptContext
from psycopg.adapt import Dumper
from psycopg.pq import Format

__all__ = ["ByteaArray", "Float8Array", "Int4Array", "TextArray"]

# ndim, has-null flag, element oid, then length and lower bound of the one dimension
_HEADER = struct.Struct("!iiIii")
_NULL = b"\xff\xff\xff\xff"
_TEXT_OID, _BYTEA_OID, _INT4_OID, _FLOAT8_OID = 25, 17, 23, 701
_INT4_ITEM = struct.Struct("!ii")
_FLOAT8_ITEM = struct.Struct("!id")
_EMPTY = struct.Struct("!iiI")  # no dimensions


class TextArray(list[str | None]):
    """A `text[]` parameter.

    Example:
        >>> conn.execute("SELECT %s::text[]", [TextArray(["a", None])])  # doctest: +SKIP
    """


class ByteaArray(list[bytes | None]):
    """A `bytea[]` parameter; items are bytes, bytearray or memoryview.

    Example:
        >>> conn.execute("SELECT %b::bytea[]", [ByteaArray([b"\\x00"])])  # doctest: +SKIP
    """


class Int4Array(list[int]):
    """An `int4[]` parameter.

    Example:
        >>> conn.execute("SELECT %s::int4[]", [Int4Array([-1, 2])])  # doctest: +SKIP
    """


class Float8Array(list[float | None]):
    """A `float8[]` parameter; items are floats (or ints), or None.

    Example:
        >>> conn.execute("SELECT %s::float8[]", [Float8Array([0.5, None])])  # doctest: +SKIP
    """


def _pack(items: list[bytes | None], element_oid: int) -> bytes:
    if not items:
        return _EMPTY.pack(0, 0, element_oid)
    out = [b""]
    has_null = 0
    for item in items:
        if item is None:
            out.append(_NULL)
            has_null = 1
        else:
            out.append(len(item).to_bytes(4, "big"))
            out.append(item)
    out[0] = _HEADER.pack(1, has_null, element_oid, len(items), 1)
    return b"".join(out)


class TextArrayDumper(Dumper):
    format = Format.BINARY
    oid = 1009  # text[]

    def __init__(self, cls: type, context: AdaptContext | None = None) -> None:
        super().__init__(cls, context)
        # binary text is read in the client encoding, as psycopg's own dumpers write it
        encoding = self.connection.info.encoding if self.connection else "utf-8"
        self._encoding = "utf-8" if encoding == "ascii" else encoding

    def dump(self, obj: Any) -> bytes:
        # PostgreSQL refuses a NUL inside text whichever format carries it
        encoding = self._encoding
        return _pack([None if s is None else s.encode(encoding) for s in obj], _TEXT_OID)


class ByteaArrayDumper(Dumper):
    format = Format.BINARY
    oid = 1001  # bytea[]

    def dump(self, obj: Any) -> bytes:
        # memoryview() refuses what is not a buffer (bytes(5) would be five NULs)
        return _pack(
            [b if b is None or type(b) is bytes else bytes(memoryview(b)) for b in obj],
            _BYTEA_OID,
        )


class Int4ArrayDumper(Dumper):
    format = Format.BINARY
    oid = 1007  # int4[]

    def dump(self, obj: Any) -> bytes:
        if not obj:
            return _EMPTY.pack(0, 0, _INT4_OID)
        head = _HEADER.pack(1, 0, _INT4_OID, len(obj), 1)
        try:
            return head + b"".join([_INT4_ITEM.pack(4, i) for i in obj])
        except struct.error as exc:
            raise DataError(f"an int4[] item is not an int in int4 range ({exc})") from exc


class Float8ArrayDumper(Dumper):
    format = Format.BINARY
    oid = 1022  # float8[]

    def dump(self, obj: Any) -> bytes:
        if not obj:
            return _EMPTY.pack(0, 0, _FLOAT8_OID)
        has_null = None in obj
        head = _HEADER.pack(1, int(has_null), _FLOAT8_OID, len(obj), 1)
        try:
            return head + b"".join(
                [_NULL if f is None else _FLOAT8_ITEM.pack(8, f) for f in obj]
            )
        except struct.error as exc:
            raise DataError(f"a float8[] item is not a number ({exc})") from exc


psycopg.adapters.register_dumper(TextArray, TextArrayDumper)
psycopg.adapters.register_dumper(ByteaArray, ByteaArrayDumper)
psycopg.adapters.register_dumper(Int4Array, Int4ArrayDumper)
psycopg.adapters.register_dumper(Float8Array, Float8ArrayDumper)

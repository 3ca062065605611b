"""Where a stored value belongs: the binding a seal authenticates, and the row formats.

Every value the savers store is bound to its row: `binding` encodes the kind
of row and its key (thread, namespace, checkpoint, channel, version, task,
idx), and an encrypting serializer (a `Sealer`) authenticates it, with the
row's columns a read relies on and the value's type (`sealed_aad`). A
ciphertext moved to another row does not open. `describe_row` turns a binding
back into words for error messages.

Row formats: rows sealed by pgcheckpoint 0.1.0 (format 1) authenticate the
binding and the type only; format 2, which every seal now writes, also binds
the columns (a blob's delta base, a write's channel and task path, the
metadata keys kept readable) and marks itself in the authenticated data, so a
format-2 value cannot be passed off as format 1.

Example:
    >>> from pgcheckpoint.codec.binding import binding, describe_binding
    >>> describe_binding(binding("blob", "t1", "", "messages", "v1"))
    "value of channel 'messages' version 'v1' in thread 't1', namespace ''"
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..errors import UnreadableValueError

__all__ = [
    "BINDING_TABLES",
    "BOUND_COLUMNS",
    "FORMAT_1",
    "FORMAT_2",
    "Columns",
    "Sealer",
    "as_sealer",
    "binding",
    "binding_kind",
    "describe_binding",
    "describe_row",
    "seal_value",
    "sealed_aad",
    "unseal_value",
]

# Row formats of sealed values (see the module's docstring).
FORMAT_1 = 1
FORMAT_2 = 2
# Starts the authenticated data of a format-2 value; no binding starts with it.
_FORMAT_2_TAG = b"2/"
# A column that is NULL, in the authenticated data (a real part is shorter).
_NULL_PART = b"\xff\xff\xff\xff"


@runtime_checkable
class Sealer(Protocol):
    """A serializer that encrypts, bound to where each value is stored.

    The codec serialises with `inner`, compresses when `compress` says so,
    then calls `seal` with the value's binding, row columns and type
    (`sealed_aad`) as authenticated data; `seal` writes format 2. Reading asks
    `row_format` which layout a stored type was sealed with, then calls
    `unseal`, which returns the type left once the cipher's part (the last `+`
    part of the stored type) is removed.

    Example:
        >>> isinstance(object(), Sealer)
        False
    """

    inner: SerializerProtocol
    compress: bool

    def seal(self, data: bytes, aad: bytes) -> tuple[str, bytes]: ...

    def unseal(self, type_: str, data: bytes, aad: bytes) -> tuple[str, bytes]: ...

    def row_format(self, type_: str) -> int: ...


def as_sealer(serde: object) -> Sealer | None:
    """`serde` if it is a `Sealer`, else None: `isinstance(serde, Sealer)`, made cheap.

    On Python 3.11 an isinstance check against a runtime-checkable protocol walks
    the protocol's members every time (about 30 µs), and the codec asks once or
    twice for every value it stores or loads; this checks the same members directly.

    Example:
        >>> as_sealer(object()) is None
        True
    """
    if hasattr(serde, "inner") and callable(getattr(serde, "seal", None)):
        return serde if callable(getattr(serde, "unseal", None)) else None  # type: ignore[return-value]
    return None


def binding(kind: str, *parts: str | int) -> bytes:
    """Where a stored value belongs, as bytes an encrypting serializer authenticates.

    Each part is length-prefixed, so no two locations share a binding.

    Example:
        >>> binding("blob", "t1", "", "messages", "v1")[:4]
        b'blob'
    """
    out = [kind.encode("ascii")]
    for part in parts:
        raw = (part if type(part) is str else str(part)).encode("utf-8", "surrogatepass")
        out += (len(raw).to_bytes(4, "big"), raw)
    return b"".join(out)


Columns = tuple[str | int | None, ...]


def sealed_aad(aad: bytes, type_: str, columns: Columns | None = None) -> bytes:
    """What a sealed value authenticates: its row's binding, row columns and type.

    With the type bound too, a stored type cannot be edited to have the
    plaintext read by another decoder (`bytes` as `pickle`, say). `columns`
    None is format 1 (binding and type only); a tuple, even empty, is format 2.

    Example:
        >>> sealed_aad(binding("blob", "t1"), "msgpack") == binding("blob", "t1", "msgpack")
        True
        >>> sealed_aad(binding("blob", "t1"), "msgpack", (None,)).startswith(b"2/blob")
        True
    """
    raw = type_.encode("utf-8", "surrogatepass")
    typed = len(raw).to_bytes(4, "big") + raw
    if columns is None:
        return aad + typed
    parts = [_FORMAT_2_TAG, aad]
    for column in columns:
        if column is None:
            parts.append(_NULL_PART)
        else:
            value = str(column).encode("utf-8", "surrogatepass")
            parts.append(len(value).to_bytes(4, "big") + value)
    parts.append(typed)
    return b"".join(parts)


def seal_value(
    sealer: Sealer, type_: str, data: bytes, aad: bytes, columns: Columns = ()
) -> tuple[str, bytes]:
    """Seal serialised bytes of type `type_` for the row `aad` and `columns` bind (format 2).

    Example:
        >>> seal_value(serde, "msgpack", b"...", aad)  # doctest: +SKIP
        ('msgpack+aesgcm2:k1', b'...')
    """
    suffix, sealed = sealer.seal(data, sealed_aad(aad, type_, columns))
    return f"{type_}+{suffix}", sealed


def unseal_value(
    sealer: Sealer, type_: str, data: bytes | None, aad: bytes, columns: Columns = ()
) -> tuple[str, bytes]:
    """The inverse of `seal_value`: the type under the seal, and the plaintext.

    A value sealed in format 1 (by pgcheckpoint 0.1.0) is checked against its
    binding and type only: `columns` are not part of it.

    Example:
        >>> unseal_value(serde, "msgpack+aesgcm2:k1", sealed, aad)  # doctest: +SKIP
        ('msgpack', b'...')
    """
    if data is None:
        raise UnreadableValueError(
            f"the {describe_row(aad)} is NULL although its type {type_!r} says it holds "
            "a value; the row was altered or damaged: restore it from a backup, or delete "
            "the thread"
        )
    bound = columns if sealer.row_format(type_) == FORMAT_2 else None
    return sealer.unseal(type_, data, sealed_aad(aad, type_.rpartition("+")[0], bound))


# What each binding kind's parts are, to describe a binding in an error; the
# unbound kind ("") is tried last, as every binding starts with it.
_BINDING_PARTS = {
    "checkpoint": ("thread", "namespace", "checkpoint"),
    "metadata": ("thread", "namespace", "checkpoint"),
    "blob": ("thread", "namespace", "channel", "version"),
    "write": ("thread", "namespace", "checkpoint", "task", "idx"),
    "item": ("namespace", "key"),
    "": (),
}
# The table that stores each kind of value, named in errors.
BINDING_TABLES = {
    "checkpoint": "pgc_checkpoints",
    "metadata": "pgc_checkpoints",
    "blob": "pgc_blobs",
    "write": "pgc_writes",
    "item": "pgc_store",
}
# The columns format 2 binds besides the row's key, named in errors.
BOUND_COLUMNS = {
    "checkpoint": (),
    "metadata": ("the keys of metadata",),
    "blob": ("base_version",),
    "write": ("channel", "task_path"),
    "item": ("the keys of its readable fields",),
}


def _binding_parts(rest: bytes) -> list[str] | None:
    parts = []
    while rest:
        if rest[:4] == _NULL_PART:
            parts.append("")
            rest = rest[4:]
            continue
        size = int.from_bytes(rest[:4], "big")
        if len(rest) < 4 + size:
            return None
        try:
            parts.append(rest[4 : 4 + size].decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            return None
        rest = rest[4 + size :]
    return parts


def binding_kind(aad: bytes) -> str:
    """The kind of row a binding (or `sealed_aad`) names: `checkpoint`, `blob`, ... or "".

    Example:
        >>> binding_kind(binding("blob", "t1", "", "c", "v"))
        'blob'
    """
    aad = aad.removeprefix(_FORMAT_2_TAG)
    for kind in _BINDING_PARTS:
        if kind and aad.startswith(kind.encode("ascii")):
            return kind
    return ""


def describe_row(aad: bytes) -> str:
    """`describe_binding` with the table that stores the row, for error messages.

    Example:
        >>> describe_row(binding("blob", "t1", "", "messages", "v1"))
        "value of channel 'messages' version 'v1' in thread 't1', namespace '' (table pgc_blobs)"
    """
    table = BINDING_TABLES.get(binding_kind(aad))
    where = describe_binding(aad)
    return f"{where} (table {table})" if table else where


def describe_binding(aad: bytes) -> str:
    """The row a `binding` (or `sealed_aad`) names, in words, for error messages.

    Example:
        >>> describe_binding(binding("write", "t1", "", "c1", "task", 0))
        "write 0 of task 'task' at checkpoint 'c1' in thread 't1', namespace ''"
    """
    format_2 = aad.startswith(_FORMAT_2_TAG)
    aad = aad.removeprefix(_FORMAT_2_TAG)
    for kind, names in _BINDING_PARTS.items():
        if not aad.startswith(kind.encode("ascii")):
            continue
        parts = _binding_parts(aad[len(kind) :])
        # one part more is the type `sealed_aad` adds; format 2 adds the columns
        extra = len(BOUND_COLUMNS.get(kind, ())) if format_2 else 0
        if parts is None or not len(names) <= len(parts) <= len(names) + extra + 1:
            continue
        p = dict(zip(names, parts, strict=False))
        if not kind:
            return "a value not bound to any row"
        if kind == "item":
            return f"value of item {p['key']!r} in store namespace {p['namespace']!r}"
        where = f"thread {p['thread']!r}, namespace {p['namespace']!r}"
        if kind == "blob":
            return f"value of channel {p['channel']!r} version {p['version']!r} in {where}"
        if kind == "write":
            return (
                f"write {p['idx']} of task {p['task']!r} at checkpoint {p['checkpoint']!r} "
                f"in {where}"
            )
        prefix = "metadata of checkpoint" if kind == "metadata" else "checkpoint"
        return f"{prefix} {p['checkpoint']!r} in {where}"
    return f"the row bound to {aad!r}"

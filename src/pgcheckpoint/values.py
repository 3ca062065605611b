"""The value codec: serialise, compress, bind to a row, seal.

Every value the savers store (a checkpoint, its metadata, a channel value, a
pending write) goes through `ValueCodec.dump_value`: the serializer's bytes,
compressed with zstd when that pays, then sealed by an encrypting serializer
(a `Sealer`) with the value's `binding` (where it is stored) as authenticated
data. `load_value` is the inverse.

Example:
    >>> from pgcheckpoint.values import binding, describe_binding
    >>> describe_binding(binding("blob", "t1", "", "messages", "v1"))
    "value of channel 'messages' version 'v1' in thread 't1', namespace ''"
"""

from __future__ import annotations

import threading
from typing import Any, Protocol, cast, runtime_checkable

import zstandard
from langgraph.checkpoint.serde.base import SerializerProtocol

from .errors import DecryptionError, UnserializableValueError

__all__ = [
    "COMPRESS_SUFFIX",
    "Sealer",
    "ValueCodec",
    "as_sealer",
    "binding",
    "describe_binding",
    "seal_value",
    "sealed_aad",
    "unseal_value",
]

# The stored type of a compressed value ends with this.
COMPRESS_SUFFIX = "+zstd"
_zstd = threading.local()


@runtime_checkable
class Sealer(Protocol):
    """A serializer that encrypts, bound to where each value is stored.

    The codec serialises with `inner`, compresses, then calls `seal` with the
    value's binding and type (`sealed_aad`) as authenticated data; reading
    calls `unseal`, which returns the type left once the cipher's part (the
    last `+` part of the stored type) is removed.

    Example:
        >>> isinstance(object(), Sealer)
        False
    """

    inner: SerializerProtocol

    def seal(self, data: bytes, aad: bytes) -> tuple[str, bytes]: ...

    def unseal(self, type_: str, data: bytes, aad: bytes) -> tuple[str, bytes]: ...


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
        raw = str(part).encode("utf-8", "surrogatepass")
        out.append(len(raw).to_bytes(4, "big") + raw)
    return b"".join(out)


def sealed_aad(aad: bytes, type_: str) -> bytes:
    """What a sealed value authenticates: its row's binding and its type under the seal.

    With the type bound too, a stored type cannot be edited to have the
    plaintext read by another decoder (`bytes` as `pickle`, say).

    Example:
        >>> sealed_aad(binding("blob", "t1"), "msgpack") == binding("blob", "t1", "msgpack")
        True
    """
    raw = type_.encode("utf-8", "surrogatepass")
    return aad + len(raw).to_bytes(4, "big") + raw


def seal_value(sealer: Sealer, type_: str, data: bytes, aad: bytes) -> tuple[str, bytes]:
    """Seal serialised bytes of type `type_` for the row `aad` binds; returns the stored pair.

    Example:
        >>> seal_value(serde, "msgpack", b"...", aad)  # doctest: +SKIP
        ('msgpack+aesgcm:k1', b'...')
    """
    suffix, sealed = sealer.seal(data, sealed_aad(aad, type_))
    return f"{type_}+{suffix}", sealed


def unseal_value(sealer: Sealer, type_: str, data: bytes | None, aad: bytes) -> tuple[str, bytes]:
    """The inverse of `seal_value`: the type under the seal, and the plaintext.

    Example:
        >>> unseal_value(serde, "msgpack+aesgcm:k1", sealed, aad)  # doctest: +SKIP
        ('msgpack', b'...')
    """
    return sealer.unseal(type_, data or b"", sealed_aad(aad, type_.rpartition("+")[0]))


# What each binding kind's parts are, to describe a binding in an error; the
# unbound kind ("") is tried last, as every binding starts with it.
_BINDING_PARTS = {
    "checkpoint": ("thread", "namespace", "checkpoint"),
    "metadata": ("thread", "namespace", "checkpoint"),
    "blob": ("thread", "namespace", "channel", "version"),
    "write": ("thread", "namespace", "checkpoint", "task", "idx"),
    "": (),
}


def _binding_parts(rest: bytes) -> list[str] | None:
    parts = []
    while rest:
        size = int.from_bytes(rest[:4], "big")
        if len(rest) < 4 + size:
            return None
        try:
            parts.append(rest[4 : 4 + size].decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            return None
        rest = rest[4 + size :]
    return parts


def describe_binding(aad: bytes) -> str:
    """The row a `binding` (or `sealed_aad`) names, in words, for error messages.

    Example:
        >>> describe_binding(binding("write", "t1", "", "c1", "task", 0))
        "write 0 of task 'task' at checkpoint 'c1' in thread 't1', namespace ''"
    """
    for kind, names in _BINDING_PARTS.items():
        if not aad.startswith(kind.encode("ascii")):
            continue
        parts = _binding_parts(aad[len(kind) :])
        # one part more is the type `sealed_aad` adds
        if parts is None or len(parts) not in (len(names), len(names) + 1):
            continue
        p = dict(zip(names, parts, strict=False))
        if not kind:
            return "a value not bound to any row"
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


def _refuse_sealed(type_: str, aad: bytes) -> None:
    # An encrypted value read by a saver without the encrypting serde: the
    # serializer's own error ("Unknown serialization type") would not say so.
    from .crypto import KEYS_ENV, LANGGRAPH_EAX_LABEL, LANGGRAPH_KEY_ENV, cipher_label

    label = cipher_label(type_)
    if label == LANGGRAPH_EAX_LABEL:
        written, env = "by LangGraph's EncryptedSerializer", LANGGRAPH_KEY_ENV
    elif type_.rpartition("+")[2].startswith("aesgcm:"):
        written, env = f"under key {label!r}", KEYS_ENV
    else:
        return
    raise DecryptionError(
        f"cannot read the {describe_binding(aad)}: it is encrypted {written} (type "
        f"{type_!r}) and this saver has no key; pass serde=EncryptedSerde.from_env() to "
        f"the saver, with {env} set as for the application that wrote it"
    )


def _compressor() -> zstandard.ZstdCompressor:
    comp = getattr(_zstd, "c", None)
    if comp is None:
        comp = _zstd.c = zstandard.ZstdCompressor(level=3)
    return cast(zstandard.ZstdCompressor, comp)


def _decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_zstd, "d", None)
    if dec is None:
        dec = _zstd.d = zstandard.ZstdDecompressor()
    return cast(zstandard.ZstdDecompressor, dec)


class ValueCodec:
    """Turns values into the (type, bytes) pairs stored, and back, for a `serde`.

    Example:
        >>> from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
        >>> codec = ValueCodec()
        >>> codec.serde = JsonPlusSerializer()
        >>> codec.load_value(*codec.dump_value([1, 2], b""), b"")
        [1, 2]
    """

    serde: SerializerProtocol
    # Values this small stay uncompressed: zstd's frame costs more than it saves.
    compress_min_bytes: int = 1024

    def dump_value(self, value: Any, aad: bytes) -> tuple[str, bytes]:
        """Serialise one value: compressed when that pays, sealed when encrypting.

        `aad` is the value's `binding`; an encrypting serializer authenticates it.
        """
        return self.pack_value(*self.serialize(value, aad), aad)

    def serialize(self, value: Any, aad: bytes) -> tuple[str, bytes]:
        """The inner serializer's type and bytes for a value bound to `aad`.

        A value the serializer refuses (a function, a socket, an int over 64
        bits) raises `UnserializableValueError` (an `InvalidInputError` and a
        `TypeError`) naming where it was to be stored, before any statement runs.
        """
        try:
            return self.inner_serde.dumps_typed(value)
        except Exception as exc:
            raise UnserializableValueError(
                f"cannot store the {describe_binding(aad)}: the serializer refused its "
                f"{type(value).__name__!r} value ({exc}); keep objects it cannot encode "
                "out of the graph's state, or pass a serde that handles them"
            ) from exc

    def load_value(self, type_: str, data: bytes | None, aad: bytes) -> Any:
        """The inverse of `dump_value`."""
        return self.inner_serde.loads_typed(self.unpack_value(type_, data, aad))

    @property
    def inner_serde(self) -> SerializerProtocol:
        """The serializer that turns values into bytes (inside any encryption)."""
        sealer = as_sealer(self.serde)
        return sealer.inner if sealer is not None else self.serde

    def pack_value(self, type_: str, data: bytes, aad: bytes) -> tuple[str, bytes]:
        """Compress (when that pays) and seal serialised bytes for storage."""
        if len(data) >= self.compress_min_bytes and "+" not in type_:
            packed = _compressor().compress(data)
            if len(packed) < len(data):
                type_, data = type_ + COMPRESS_SUFFIX, packed
        sealer = as_sealer(self.serde)
        if sealer is not None:
            type_, data = seal_value(sealer, type_, data, aad)
        return type_, data

    def unpack_value(self, type_: str, data: bytes | None, aad: bytes) -> tuple[str, bytes]:
        """The inverse of `pack_value`: the serializer's type and bytes."""
        sealer = as_sealer(self.serde)
        if sealer is not None:
            type_, data = unseal_value(sealer, type_, data, aad)
        elif "+aes" in type_:
            _refuse_sealed(type_, aad)
        if type_.endswith(COMPRESS_SUFFIX) and data is not None:
            type_ = type_[: -len(COMPRESS_SUFFIX)]
            data = _decompressor().decompress(data)
        return type_, data  # type: ignore[return-value]

"""The value codec: serialise, compress, bind to a row, seal.

Every value the savers store (a checkpoint, its metadata, a channel value, a
pending write) goes through `ValueCodec.dump_value`: the serializer's bytes,
compressed with zstd when that pays (only without encryption, unless the
`Sealer` asks for it: a compressed size tells what the content is), then
sealed by an encrypting serializer (a `Sealer`) with the value's `binding`
(where it is stored, `pgcheckpoint.codec.binding`) and the `columns` of its
row a read relies on as authenticated data. `load_value` is the inverse; a
value that cannot be read back (corrupt, truncated, NULL) raises
`UnreadableValueError` naming its row.

Example:
    >>> from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    >>> codec = ValueCodec()
    >>> codec.serde = JsonPlusSerializer()
    >>> codec.load_value(*codec.dump_value([1, 2], b""), b"")
    [1, 2]
"""

from __future__ import annotations

import threading
from typing import Any

import zstandard
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..errors import PgCheckpointError, UnreadableValueError, UnserializableValueError
from .binding import (
    Columns,
    as_sealer,
    describe_binding,
    describe_row,
    seal_value,
    unseal_value,
)
from .labels import COMPRESS_SUFFIX, unkeyed_read_error

__all__ = ["ValueCodec", "zstd_context_bytes"]


class _ZstdContexts:
    """zstd contexts shared by every thread: a compressor per size class, decompressors.

    A compressor's memory (40 KiB to megabytes) depends on the size of what
    it compresses, and zstd frees and allocates it again when that size
    moves. Kept per thread, with LangGraph saving from short-lived threads
    and values from 1 KiB to megabytes, that churn of large allocations (made
    without the GIL, while other threads allocate) left glibc holding 8 MiB
    more in a worker of 4 threads (bench/bench_memory.py). So there is one
    compressor per power of two of input size, used by one thread at a time
    (a compression takes tens of microseconds), and every context outlives
    the threads that used it.
    """

    def __init__(self) -> None:
        # the checksum makes a damaged frame fail to decompress, not decode as garbage
        self._lock = threading.Lock()
        self._compressors: dict[int, tuple[threading.Lock, zstandard.ZstdCompressor]] = {}
        self._decompressors: list[zstandard.ZstdDecompressor] = []

    def compress(self, data: bytes) -> bytes:
        size_class = max(len(data) - 1, 1).bit_length()
        found = self._compressors.get(size_class)
        if found is None:
            with self._lock:
                compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
                found = self._compressors.setdefault(size_class, (threading.Lock(), compressor))
        with found[0]:
            return found[1].compress(data)

    def decompress(self, data: bytes) -> bytes:
        with self._lock:
            free = self._decompressors
            dec = free.pop() if free else zstandard.ZstdDecompressor()
        try:
            return dec.decompress(data)
        finally:
            with self._lock:
                free.append(dec)

    def memory_bytes(self) -> int:
        with self._lock:
            contexts = [c for _, c in self._compressors.values()] + self._decompressors
        return sum(context.memory_size() for context in contexts)


_ZSTD = _ZstdContexts()


def zstd_context_bytes() -> int:
    """What the process's zstd contexts hold, in bytes (memory outside Python's count).

    The savers share them: a compressor per power of two of the sizes they
    compressed, and a decompressor per thread that decompressed at once.

    Example:
        >>> zstd_context_bytes() >= 0
        True
    """
    return _ZSTD.memory_bytes()


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

    def dump_value(self, value: Any, aad: bytes, columns: Columns = ()) -> tuple[str, bytes]:
        """Serialise one value: compressed when that pays, sealed when encrypting.

        `aad` is the value's `binding` and `columns` the row's columns a read
        relies on; an encrypting serializer authenticates both.
        """
        return self.pack_value(*self.serialize(value, aad), aad, columns)

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

    def load_value(self, type_: str, data: bytes | None, aad: bytes, columns: Columns = ()) -> Any:
        """The inverse of `dump_value`.

        Raises:
            UnreadableValueError: The stored value is corrupt, truncated or NULL,
                or (`DecryptionError`) fails decryption or authentication.
        """
        return self.decode(*self.unpack_value(type_, data, aad, columns), aad)

    def decode(self, type_: str, data: bytes, aad: bytes) -> Any:
        """The inner serializer's value of unpacked bytes, or an error naming the row."""
        try:
            return self.inner_serde.loads_typed((type_, data))
        except PgCheckpointError:
            raise
        except Exception as exc:
            unkeyed = unkeyed_read_error(type_, describe_row(aad)) if "+aes" in type_ else None
            if unkeyed is not None:  # encrypted, and this serializer has no key for it
                raise unkeyed from exc
            raise UnreadableValueError(
                f"cannot read the {describe_row(aad)}: the serializer cannot decode its "
                f"{type_!r} bytes ({type(exc).__name__}: {exc}); the row is damaged or was "
                "written by a serializer configured differently"
            ) from exc

    @property
    def inner_serde(self) -> SerializerProtocol:
        """The serializer that turns values into bytes (inside any encryption)."""
        sealer = as_sealer(self.serde)
        return sealer.inner if sealer is not None else self.serde

    def pack_value(
        self, type_: str, data: bytes, aad: bytes, columns: Columns = ()
    ) -> tuple[str, bytes]:
        """Compress (when that pays and is allowed) and seal serialised bytes for storage."""
        sealer = as_sealer(self.serde)
        if (
            len(data) >= self.compress_min_bytes
            and "+" not in type_
            and (sealer is None or sealer.compress)
        ):
            packed = _ZSTD.compress(data)
            if len(packed) < len(data):
                type_, data = type_ + COMPRESS_SUFFIX, packed
        if sealer is not None:
            type_, data = seal_value(sealer, type_, data, aad, columns)
        return type_, data

    def unpack_value(
        self, type_: str, data: bytes | None, aad: bytes, columns: Columns = ()
    ) -> tuple[str, bytes]:
        """The inverse of `pack_value`: the serializer's type and bytes."""
        sealer = as_sealer(self.serde)
        if sealer is not None:
            type_, data = unseal_value(sealer, type_, data, aad, columns)
        elif data is None and type_ not in ("null", "empty"):
            raise UnreadableValueError(
                f"the {describe_row(aad)} is NULL although its type {type_!r} says it "
                "holds a value; the row was altered or damaged: restore it from a backup, "
                "or delete the thread"
            )
        if type_.endswith(COMPRESS_SUFFIX) and data is not None:
            type_ = type_[: -len(COMPRESS_SUFFIX)]
            try:
                data = _ZSTD.decompress(data)
            except zstandard.ZstdError as exc:
                raise UnreadableValueError(
                    f"cannot read the {describe_row(aad)}: its zstd frame is corrupt or "
                    f"truncated ({exc}); the row was altered or damaged: restore it from a "
                    "backup, or delete the thread"
                ) from exc
        return type_, data  # type: ignore[return-value]

"""The checkpointer written once, without I/O.

Each operation is a generator: it yields `Stmt`s (a named statement from
`sql/queries.sql` with its parameters), receives the rows of each, and returns
the operation's result. A statement that fails raises its psycopg error at the
op's `yield`, where the op may handle it. `PostgresSaver` and
`AsyncPostgresSaver` only run these statements on a connection, so the logic
exists once for both.

Example:
    >>> from pgcheckpoint.core import Stmt
    >>> Stmt("thread_heads", {"thread_ids": ["t1"]}, fetch=True).name
    'thread_heads'
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import random
import threading
from collections import OrderedDict
from collections.abc import Collection, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import zstandard
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg.errors import ForeignKeyViolation
from psycopg.types.json import Jsonb
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .appends import AppendCache, AppendPlan, array_header, join_arrays
from .arrays import ByteaArray, Int4Array, TextArray
from .errors import InvalidInputError, MissingParentError, UnserializableValueError

__all__ = [
    "Op",
    "SaverCore",
    "Sealer",
    "Stmt",
    "binding",
    "describe_binding",
    "seal_value",
    "sealed_aad",
    "unseal_value",
]

T = TypeVar("T")
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Stmt:
    """One named statement to run, with its parameters.

    Attributes:
        name: The statement's name in `sql/queries.sql`.
        params: Named parameters.
        fetch: Whether the operation needs the rows back.

    Example:
        >>> Stmt("delete_thread", {"thread_id": "t1"}).fetch
        False
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    fetch: bool = False
    # None: psycopg's default (prepared after a few runs). False for statements
    # whose generic plan is far worse than a custom one: Postgres switches a
    # prepared statement to its generic plan after five runs, and for a
    # recursive walk over one thread that plan cannot use the parameters.
    prepare: bool | None = None


Op = Generator[Stmt, list[Row], T]

PRUNE_STRATEGIES = ("keep_latest", "delete")
# Bounds a parent-chain walk; a real chain is far shorter (DeltaChannel
# snapshots at least every 5,000 super-steps), so this only stops a cycle.
MAX_CHAIN_DEPTH = 1_000_000
# Identifiers go into primary keys; a btree entry holds at most ~2,700 bytes.
_MAX_ID_BYTES = {"thread_id": 1024, "checkpoint_ns": 1024}
_MAX_OTHER_ID_BYTES = 255
_COMPRESS_SUFFIX = "+zstd"
# Metadata keys maintenance reads in SQL: which DeltaChannels a thread has.
_STRUCTURAL_KEYS = frozenset({"counters_since_delta_snapshot"})
_INLINE_TYPES = (str, int, float, bool)
# Columns of `thread_checkpoints_page` that `insert_copied_rows` takes as arrays.
COPIED_CHECKPOINT_COLUMNS = (
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "run_id",
    "type",
    "checkpoint",
    "channel_versions",
    "inline_channels",
    "metadata_type",
    "metadata_blob",
    "metadata",
    "created_at",
)
COPIED_BLOB_COLUMNS = ("checkpoint_ns", "channel", "version", "type", "blob", "base_version")
COPIED_WRITE_COLUMNS = (
    "checkpoint_ns",
    "checkpoint_id",
    "task_id",
    "task_path",
    "idx",
    "channel",
    "type",
    "blob",
)
_zstd = threading.local()
_CACHE_LOCK = threading.Lock()


@runtime_checkable
class Sealer(Protocol):
    """A serializer that encrypts, bound to where each value is stored.

    The core serialises with `inner`, compresses, then calls `seal` with the
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
    the protocol's members every time (about 30 µs), and the core asks once or
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
        >>> describe_binding(binding("blob", "t1", "", "messages", "v1"))
        "value of channel 'messages' version 'v1' in thread 't1', namespace ''"
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


def copy_items(items: Iterable[Any], *, containers: bool = False) -> list[Any]:
    """Copies of decoded items, as `copy.copy` makes them.

    Pydantic models (LangChain messages) are copied the way their `__copy__`
    does it, without going through `copy.copy`: a quarter less time per message,
    which is most of what `list` and a DeltaChannel seed spend on copies. With
    `containers`, the dicts, lists and messages inside each item are copied too
    (a message's content blocks, tool calls, additional_kwargs), so editing them
    in place cannot reach the original; other objects inside stay shared.

    Example:
        >>> original = [{"a": [1]}]
        >>> copied = copy_items(original, containers=True)
        >>> copied == original and copied[0]["a"] is not original[0]["a"]
        True
    """
    out = []
    for item in items:
        if _plain_model(item):
            out.append(_copy_model(item, containers))
        else:
            out.append(_copy_containers(item) if containers else copy.copy(item))
    return out


def _plain_model(item: Any) -> bool:
    """Whether `item` is a pydantic model copied as BaseModel.__copy__ does it."""
    cls = type(item)
    plain = _PLAIN_PYDANTIC_COPY.get(cls)
    if plain is None:
        if len(_PLAIN_PYDANTIC_COPY) > 4096:  # classes made at run time
            _PLAIN_PYDANTIC_COPY.clear()
        plain = _PLAIN_PYDANTIC_COPY[cls] = (
            isinstance(item, BaseModel)
            and cls.__copy__ is BaseModel.__copy__
            and cls.__new__ is object.__new__  # type: ignore[comparison-overlap]
        )
    return plain


def _copy_model(item: Any, containers: bool) -> Any:
    new = object.__new__(type(item))  # its __new__ is object.__new__ (_plain_model)
    private = getattr(item, "__pydantic_private__", None)
    extra = item.__pydantic_extra__
    fields = item.__dict__.copy()
    if containers:
        for k, v in fields.items():
            kind = type(v)
            # most are empty (additional_kwargs, response_metadata...): no call
            if kind is dict:
                fields[k] = _copy_containers(v) if v else {}
            elif kind is list:
                fields[k] = _copy_containers(v) if v else []
            elif kind not in _IMMUTABLE:
                fields[k] = _copy_containers(v)
        extra = None if extra is None else _copy_containers(extra)
    else:
        extra = None if extra is None else extra.copy()
    _set = object.__setattr__
    _set(new, "__dict__", fields)
    _set(new, "__pydantic_extra__", extra)
    _set(new, "__pydantic_fields_set__", item.__pydantic_fields_set__.copy())
    _set(
        new,
        "__pydantic_private__",
        None
        if private is None
        else {k: v for k, v in private.items() if v is not PydanticUndefined},
    )
    return new


_PLAIN_PYDANTIC_COPY: dict[type, bool] = {}
# values a copy may share with its original (a tuple, if what it holds may be shared)
_IMMUTABLE = frozenset({str, int, float, bool, type(None), bytes, tuple})
_MISSING = object()
# a larger write (a big tool result) is decoded at each read instead of kept
_MAX_CACHED_WRITE_BYTES = 64 * 1024


def _copy_containers(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        copied = value.copy()
        for k, v in copied.items():
            if type(v) not in _IMMUTABLE:
                copied[k] = _copy_containers(v)
        return copied
    if kind is list:
        return [v if type(v) in _IMMUTABLE else _copy_containers(v) for v in value]
    if kind in _IMMUTABLE:
        return value
    if _plain_model(value):
        return _copy_model(value, True)
    return copy.copy(value)


def _lru_get(cache: OrderedDict[tuple[str, ...], Any], key: tuple[str, ...]) -> Any:
    with _CACHE_LOCK:
        value = cache.get(key, _MISSING)
        if value is not _MISSING:
            cache.move_to_end(key)
    return value


def _lru_put(
    cache: OrderedDict[tuple[str, ...], Any], key: tuple[str, ...], value: Any, size: int
) -> None:
    with _CACHE_LOCK:
        cache[key] = value
        while len(cache) > size:
            cache.popitem(last=False)


def _copies_whole(value: Any) -> bool:
    """Whether `copy_items(..., containers=True)` copies `value` so that the copy
    shares nothing mutable with it: plain values, dicts, lists, messages."""
    kind = type(value)
    if kind is tuple:
        return all(type(v) in _IMMUTABLE and _copies_whole(v) for v in value)
    if kind in _IMMUTABLE:
        return True
    if kind is dict:
        return all(_copies_whole(v) for v in value.values())
    if kind is list:
        return all(_copies_whole(v) for v in value)
    if _plain_model(value) and not getattr(value, "__pydantic_private__", None):
        return all(_copies_whole(v) for v in value.__dict__.values()) and all(
            _copies_whole(v) for v in (value.__pydantic_extra__ or {}).values()
        )
    return False


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


def _configurable(config: RunnableConfig | None) -> dict[str, Any]:
    if not config:
        return {}
    return dict(config.get("configurable") or {})


def thread_of(config: RunnableConfig) -> tuple[str, str]:
    """The validated (thread_id, checkpoint_ns) of a config.

    Example:
        >>> thread_of({"configurable": {"thread_id": "t1"}})
        ('t1', '')
    """
    conf = _configurable(config)
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


class SaverCore(BaseCheckpointSaver[str]):
    """The I/O-free half of both savers: builds statements, decodes rows.

    Subclasses provide the I/O: they run an `Op` to completion on a connection.

    Example:
        >>> core = SaverCore()
        >>> core.get_next_version(None, None).startswith("0" * 31 + "1.")
        True
    """

    # Values this small stay uncompressed: zstd's frame costs more than it saves.
    compress_min_bytes: int = 1024
    # Checkpoints per round trip when copy_thread goes through the client.
    copy_batch_size: int = 200
    # Store lists that grow by appending as deltas on an earlier version, with
    # a full copy at least every `full_value_every` versions.
    # DeltaChannel seeds kept decoded (see `_load_seed`).
    seed_cache_size: int = 64
    # Writes on DeltaChannel paths kept decoded (see `_load_delta_write`).
    write_cache_size: int = 4096
    append_deltas: bool = os.environ.get("PGCHECKPOINT_APPEND_DELTAS", "1").lower() not in (
        "0",
        "false",
        "off",
        "no",
    )
    full_value_every: int = 32

    # -- values -----------------------------------------------------------------

    def dump_value(self, value: Any, aad: bytes) -> tuple[str, bytes]:
        """Serialise one value: compressed when that pays, sealed when encrypting.

        `aad` is the value's `binding`; an encrypting serializer authenticates it.
        """
        return self.pack_value(*self.serialize(value, aad), aad)

    def serialize(self, value: Any, aad: bytes) -> tuple[str, bytes]:
        """The inner serializer's type and bytes for a value bound to `aad`.

        A value the serializer refuses (a function, a socket, an int over 64
        bits) raises `UnserializableValueError` (an `InvalidInputError` and a
        `TypeError`) naming where it was to be stored,
        before any statement runs.
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
                type_, data = type_ + _COMPRESS_SUFFIX, packed
        sealer = as_sealer(self.serde)
        if sealer is not None:
            type_, data = seal_value(sealer, type_, data, aad)
        return type_, data

    def unpack_value(self, type_: str, data: bytes | None, aad: bytes) -> tuple[str, bytes]:
        """The inverse of `pack_value`: the serializer's type and bytes."""
        sealer = as_sealer(self.serde)
        if sealer is not None:
            type_, data = unseal_value(sealer, type_, data, aad)
        if type_.endswith(_COMPRESS_SUFFIX) and data is not None:
            type_ = type_[: -len(_COMPRESS_SUFFIX)]
            data = _decompressor().decompress(data)
        return type_, data  # type: ignore[return-value]

    @property
    def append_cache(self) -> AppendCache:
        """What this saver last stored or read of each list channel (for deltas)."""
        cache = self.__dict__.get("_append_cache")
        if cache is None:
            cache = self.__dict__["_append_cache"] = AppendCache()
        return cast(AppendCache, cache)

    def load_blob(
        self,
        key: tuple[str, str, str],
        pieces: Sequence[tuple[str, str, bytes]],
        memo: ListingMemo | None = None,
    ) -> Any:
        """Rebuild a channel value from its stored pieces (version, type, bytes).

        One piece is a whole value; more are a full list followed by the deltas
        on top of it, oldest first. Lists are remembered for the next delta.
        With `memo` (one per `list` call), a list's pieces are decoded once for
        all the checkpoints that share them; each gets its own list of items,
        shallow copies but for the last checkpoint to use a piece, so no two
        returned values share an item.
        """
        thread_id, ns, channel = key
        if memo is not None:
            items = self._load_list_pieces(key, pieces, memo)
            if items is not None:
                return items
        raws = [
            self.unpack_value(type_, data, binding("blob", thread_id, ns, channel, version))
            for version, type_, data in pieces
        ]
        if len(raws) == 1:
            type_, data = raws[0]
        else:
            type_, data = raws[-1][0], join_arrays([raw for _, raw in raws])
        if type_ == "msgpack" and self.append_deltas:
            self.append_cache.remember(
                key,
                pieces[-1][0],
                data,
                chain=len(raws) - 1,
                chain_bytes=len(data) - len(raws[0][1]) if len(raws) > 1 else 0,
            )
        return self.inner_serde.loads_typed((type_, data))

    def _load_seed(
        self, key: tuple[str, str, str], pieces: Sequence[tuple[str, str, bytes]]
    ) -> Any:
        """A DeltaChannel seed, decoded once per process while it stays the seed.

        A snapshot is read again at every step until the next one, and decoding
        it is most of the cost of rebuilding the channel. Stored values never
        change, so the decoded list is kept (a bounded LRU) and each caller gets
        a fresh list of copies of its items (their dicts and lists copied too).
        """
        # Keyed by the stored bytes, not the version: a deleted thread written
        # again may reuse version strings, and its values must not be confused.
        digest = hashlib.blake2b(digest_size=16)
        for _, type_, data in pieces:
            digest.update(type_.encode("utf-8", "surrogatepass") + b"\x00")
            digest.update(len(data or b"").to_bytes(8, "big"))
            digest.update(data or b"")
        cache_key = (*key, digest.hexdigest())
        cached = _lru_get(self.seed_cache, cache_key)
        if cached is _MISSING:
            cached = self.load_blob(key, pieces)
            items = cached.value if isinstance(cached, _DeltaSnapshot) else cached
            if not isinstance(items, list):
                return cached
            _lru_put(self.seed_cache, cache_key, cached, self.seed_cache_size)
        # the cached items outlive this call: what a caller edits, even inside
        # a message, must not reach them
        if isinstance(cached, _DeltaSnapshot):
            return _DeltaSnapshot(copy_items(cached.value, containers=True))
        return copy_items(cached, containers=True)

    def _load_delta_write(self, thread_id: str, ns: str, row: Row) -> Any:
        """A write on a DeltaChannel's path, decoded once per process while it is cached.

        Rebuilding a channel replays every write since its snapshot, and the
        next rebuild of the same thread (the next turn, `get_state`) replays
        most of them again. Values that `copy_items` can copy whole (messages,
        lists, dicts, plain values), stored in at most 64 KiB, are kept in a
        bounded LRU keyed by the row and a digest of its bytes; each caller
        gets its own copy.
        """
        data = row["blob"] or b""
        kept = len(data) <= _MAX_CACHED_WRITE_BYTES
        cache_key = (
            thread_id,
            ns,
            row["checkpoint_id"],
            row["task_id"],
            str(row["idx"]),
            row["type"],
            hashlib.blake2b(data, digest_size=16).hexdigest() if kept else "",
        )
        cached = _lru_get(self.write_cache, cache_key) if kept else _MISSING
        if cached is _MISSING:
            aad = binding("write", thread_id, ns, row["checkpoint_id"], row["task_id"], row["idx"])
            cached = self.load_value(row["type"], row["blob"], aad)
            if not kept or not _copies_whole(cached):
                return cached
            _lru_put(self.write_cache, cache_key, cached, self.write_cache_size)
        return _copy_containers(cached)

    @property
    def write_cache(self) -> OrderedDict[tuple[str, ...], Any]:
        """Decoded DeltaChannel writes by row and digest of the bytes.

        Example:
            >>> len(SaverCore().write_cache)
            0
        """
        return self.__dict__.setdefault("_write_cache", OrderedDict())  # type: ignore[no-any-return]

    @property
    def seed_cache(self) -> OrderedDict[tuple[str, ...], Any]:
        """Decoded DeltaChannel seeds by (thread, namespace, channel, digest of the bytes).

        Example:
            >>> len(SaverCore().seed_cache)
            0
        """
        return self.__dict__.setdefault("_seed_cache", OrderedDict())  # type: ignore[no-any-return]

    def _load_list_pieces(
        self,
        key: tuple[str, str, str],
        pieces: Sequence[tuple[str, str, bytes]],
        memo: ListingMemo,
    ) -> list[Any] | None:
        """The items of a stored list, each piece decoded once per memo; None if not a list."""
        thread_id, ns, channel = key
        decoded_pieces: list[tuple[tuple[str, str, str, str], list[Any]]] = []
        for version, type_, data in pieces:
            memo_key = (thread_id, ns, channel, version)
            decoded = memo.decoded.get(memo_key)
            if decoded is None:
                aad = binding("blob", thread_id, ns, channel, version)
                inner_type, raw = self.unpack_value(type_, data, aad)
                if inner_type != "msgpack" or array_header(raw) is None:
                    return None
                decoded = self.inner_serde.loads_typed((inner_type, raw))
                if not isinstance(decoded, list):
                    return None
                memo.decoded[memo_key] = decoded
            decoded_pieces.append((memo_key, decoded))
        items: list[Any] = []
        for memo_key, decoded in decoded_pieces:
            if memo.release(memo_key):
                items.extend(decoded)  # no later checkpoint uses this piece
            else:
                items.extend(copy_items(decoded))
        return items

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: a zero-padded counter and a random tail.

        Versions sort as strings in the order they were made, which keeps them
        compatible with rows written by `langgraph-checkpoint-postgres`.

        Example:
            >>> SaverCore().get_next_version("00000000000000000000000000000007.5", None)[:33]
            '00000000000000000000000000000008.'
        """
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".", 1)[0])
        return f"{number + 1:032}.{random.random():016}"

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> SaverCore:
        """A shallow copy whose serializer accepts more msgpack types (strict mode).

        LangGraph only knows how to widen its own serializers; an encrypting one
        widens its inner serializer through `with_msgpack_allowlist`. LangGraph
        asks at every run in strict mode, so one copy is kept per allowlist.
        The copy shares this saver's connection, lock and stored-list cache, and
        keeps its own decoded DeltaChannel values: what a serializer decodes
        depends on its allowlist.
        """
        key = frozenset(tuple(entry) for entry in extra_allowlist)
        clones: dict[frozenset[tuple[str, ...]], SaverCore] = self.__dict__.setdefault(
            "_allowlist_clones", {}
        )
        clone = clones.get(key)
        if clone is not None:
            return clone
        _ = self.append_cache  # made now, so the copy shares it
        widen = getattr(self.serde, "with_msgpack_allowlist", None)
        if not isinstance(self.serde, Sealer) or widen is None:
            clone = cast(SaverCore, super().with_allowlist(extra_allowlist))
        else:
            serde = widen(extra_allowlist)
            clone = self if serde is self.serde else copy.copy(self)
            clone.serde = serde
        if clone is not self:
            for own in ("_seed_cache", "_write_cache", "_allowlist_clones"):
                clone.__dict__.pop(own, None)
        clones[key] = clone
        return clone

    def metadata_projection(self, metadata: Mapping[str, Any]) -> Any:
        """The part of the metadata stored as JSONB, which `list(filter=...)` searches.

        All of it by default. An encrypting serializer may name the keys that
        stay readable (`filterable_metadata`); the rest is only in the sealed copy.
        """
        keys = getattr(self.serde, "filterable_metadata", None)
        if keys is not None:
            metadata = {k: v for k, v in metadata.items() if k in keys or k in _STRUCTURAL_KEYS}
        return json_projection(metadata)[0]

    # -- operations ---------------------------------------------------------------

    def put_op(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Op[RunnableConfig]:
        """Store a checkpoint and the values of the channels that changed."""
        thread_id, checkpoint_ns = thread_of(config)
        checkpoint_id = check_id("checkpoint_id", checkpoint["id"])
        parent_id = get_checkpoint_id(config)
        if parent_id is not None:
            parent_id = check_id("checkpoint_id", parent_id)
        record: dict[str, Any] = {
            k: v for k, v in checkpoint.items() if k not in ("channel_values", "channel_versions")
        }
        inline: dict[str, Any] = {}
        # channel -> (version, serde type, serialised bytes, delta plan or None)
        blobs: dict[str, tuple[str, str, bytes, AppendPlan | None]] = {}
        for channel, value in checkpoint["channel_values"].items():
            if (value is None or isinstance(value, _INLINE_TYPES)) and not isinstance(
                value, _DeltaSnapshot
            ):
                inline[channel] = value
            elif channel in new_versions:
                version = str(new_versions[channel])
                aad = binding("blob", thread_id, checkpoint_ns, channel, version)
                type_, data = self.serialize(value, aad)
                plan = None
                if self.append_deltas and type_ == "msgpack" and isinstance(value, list):
                    key = (thread_id, checkpoint_ns, check_id("channel", channel))
                    plan = self.append_cache.plan(
                        key, version, data, full_every=self.full_value_every
                    )
                blobs[check_id("channel", channel)] = (version, type_, data, plan)
        record["channel_values"] = inline
        where = (thread_id, checkpoint_ns, checkpoint_id)
        type_, data = self.dump_value(record, binding("checkpoint", *where))
        # LangGraph's helper strips NULs from top-level strings (JSONB cannot hold
        # them); the blob can, so the caller's own values are kept as given.
        full_metadata = get_serializable_checkpoint_metadata(config, metadata)
        full_metadata.update({k: v for k, v in metadata.items() if k != "writes"})  # type: ignore[typeddict-item]
        projection = self.metadata_projection(full_metadata)
        metadata_type, metadata_blob = self.dump_value(full_metadata, binding("metadata", *where))
        run_id = full_metadata.get("run_id")
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent_id,
            "run_id": None if run_id is None else str(run_id),
            "type": type_,
            "checkpoint": data,
            "channel_versions": Jsonb(
                {k: str(v) for k, v in checkpoint["channel_versions"].items()}
            ),
            "inline_channels": TextArray(inline),
            "metadata_type": metadata_type,
            "metadata_blob": metadata_blob,
            "metadata": Jsonb(projection),
            **self._blob_params(thread_id, checkpoint_ns, blobs, deltas=True),
        }
        try:
            rows = yield Stmt("put_checkpoint", params, fetch=True)
        except ForeignKeyViolation:
            # A delta's base was deleted (pruned) since this saver stored it:
            # store whole values instead.
            self.append_cache.forget_thread(thread_id)
            params.update(self._blob_params(thread_id, checkpoint_ns, blobs, deltas=False))
            rows = yield Stmt("put_checkpoint", params, fetch=True)
        if rows and not rows[0]["stored"]:
            # The parent is gone (retention, prune, delete_thread), perhaps while
            # the graph ran on it: a child saved anyway would cut its history short.
            raise MissingParentError(thread_id, checkpoint_ns, checkpoint_id, cast(str, parent_id))
        if self.append_deltas:
            for channel, (version, type_, data, plan) in blobs.items():
                if type_ == "msgpack":
                    self.append_cache.remember(
                        (thread_id, checkpoint_ns, channel),
                        version,
                        data,
                        chain=plan.chain if plan is not None else 0,
                        chain_bytes=plan.chain_bytes if plan is not None else 0,
                    )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    def put_writes_op(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> Op[None]:
        """Store the writes of one task against a checkpoint."""
        thread_id, checkpoint_ns = thread_of(config)
        checkpoint_id = check_id("checkpoint_id", get_checkpoint_id(config))
        task_id = check_id("task_id", task_id)
        task_path = check_id("task_path", task_path or "")
        if not writes:
            return
        idxs, channels, types, blobs = Int4Array(), TextArray(), TextArray(), ByteaArray()
        for position, (channel, value) in enumerate(writes):
            channels.append(check_id("channel", channel))
            idx = WRITES_IDX_MAP.get(channel, position)
            idxs.append(idx)
            aad = binding("write", thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
            type_, data = self.dump_value(value, aad)
            types.append(type_)
            blobs.append(data)
        special = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        yield Stmt(
            "upsert_writes" if special else "insert_writes",
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path,
                "idxs": idxs,
                "channels": channels,
                "types": types,
                "blobs": blobs,
            },
        )

    def get_tuple_op(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        """Load the checkpoint a config names, or the thread's latest."""
        thread_id, checkpoint_ns = thread_of(config)
        checkpoint_id = get_checkpoint_id(config)
        params = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
        if checkpoint_id:
            params["checkpoint_id"] = check_id("checkpoint_id", checkpoint_id)
            rows = yield Stmt("get_checkpoint_by_id", params, fetch=True)
        else:
            rows = yield Stmt("get_latest_checkpoint", params, fetch=True)
        return self.load_tuple(rows[0]) if rows else None

    def list_op(
        self,
        config: RunnableConfig | None,
        *,
        filter: Mapping[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Op[tuple[list[Row], Mapping[str, Any] | None]]:
        """Select the rows `list` yields, newest first.

        Returns the rows and, when the filter could not be expressed exactly in
        JSONB, the filter to re-check on each decoded tuple.
        """
        conf = _configurable(config)
        thread_id = conf.get("thread_id")
        ns = conf.get("checkpoint_ns")
        checkpoint_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidInputError(f"limit must be a non-negative int or None, not {limit!r}")
        if filter is not None and not isinstance(filter, Mapping):
            raise InvalidInputError(f"filter must be a dict, not {type(filter).__name__}")
        readable = getattr(self.serde, "filterable_metadata", None)
        if filter and readable is not None:
            # A key kept only in the encrypted copy would silently match nothing.
            hidden = [k for k in filter if k not in readable and k not in _STRUCTURAL_KEYS]
            if hidden:
                raise InvalidInputError(
                    f"cannot filter on metadata key {hidden[0]!r}: it is stored encrypted; "
                    f"list it in EncryptedSerde(filterable_metadata=...) (now "
                    f"{tuple(readable)!r}) to keep it readable in new checkpoints"
                )
        projection, lossy = json_projection(dict(filter)) if filter else (None, False)
        params = {
            "thread_id": None if thread_id is None else check_id("thread_id", thread_id),
            "checkpoint_ns": None if ns is None else check_id("checkpoint_ns", ns),
            "checkpoint_id": None
            if checkpoint_id is None
            else check_id("checkpoint_id", checkpoint_id),
            "before": None if before_id is None else check_id("checkpoint_id", before_id),
            "filter": None if projection is None else Jsonb(projection),
            "limit": None if lossy else limit,
        }
        one_thread = params["thread_id"] is not None and params["checkpoint_ns"] is not None
        rows = yield Stmt(
            "list_thread_checkpoints" if one_thread else "list_checkpoints", params, fetch=True
        )
        if rows:
            rows = yield from self._listed_values_op(rows)
        return rows, (filter if lossy else None)

    def _listed_values_op(self, rows: list[Row]) -> Op[list[Row]]:
        """Give listed rows their stored values, fetched once for the page.

        Returns the rows whose checkpoints still exist, each with the `blob_*`
        columns of `checkpoint_tuple_from`: per channel its pieces, the full
        value first, then the deltas on it.
        """
        found = yield from self._stored_values_op(checkpoint_keys(rows))
        pieces: dict[tuple[str, str, str, str], Row] = {}
        alive: set[tuple[str, str, str]] = set()
        for piece in found:
            if piece["kind"] == "c":
                alive.add(_key(piece))
            else:
                thread_id, ns = piece["thread_id"], piece["checkpoint_ns"]
                pieces[(thread_id, ns, piece["channel"], piece["version"])] = piece
        kept = []
        for row in rows:
            if _key(row) not in alive:
                continue
            columns: dict[str, list[Any]] = {
                "blob_channels": [],
                "blob_versions": [],
                "blob_bases": [],
                "blob_types": [],
                "blob_values": [],
            }
            for channel in sorted(row["channel_versions"] or {}):
                chain: list[Row] = []
                # str: rows imported from the official saver's oldest schema have ints
                at: str | None = str(row["channel_versions"][channel])
                while at is not None and len(chain) <= MAX_CHAIN_DEPTH:
                    found_piece = pieces.get((row["thread_id"], row["checkpoint_ns"], channel, at))
                    if found_piece is None:
                        break
                    chain.append(found_piece)
                    at = found_piece["base_version"]
                for piece in reversed(chain):
                    columns["blob_channels"].append(channel)
                    columns["blob_versions"].append(piece["version"])
                    columns["blob_bases"].append(piece["base_version"])
                    columns["blob_types"].append(piece["type"])
                    columns["blob_values"].append(piece["blob"])
            row.update(columns)
            kept.append(row)
        return kept

    def _stored_values_op(self, keys: dict[str, Any]) -> Op[list[Row]]:
        """The stored values of some checkpoints (`checkpoint_keys`), each piece once."""
        rows = yield Stmt("listed_values", keys, fetch=True)
        return rows

    def delete_thread_op(self, thread_id: str) -> Op[None]:
        """Delete every checkpoint, blob and write of a thread."""
        thread_id = check_id("thread_id", thread_id)
        yield Stmt("delete_thread", {"thread_id": thread_id})
        self.append_cache.forget_thread(thread_id)

    def copy_thread_op(self, source_thread_id: str, target_thread_id: str) -> Op[None]:
        """Copy a thread's whole history, every namespace, to another thread id.

        Postgres copies the rows in one statement, unless the serializer seals
        values to their thread: then they go through the client, re-sealed
        for the target (`copy_thread_resealed_op`); the caller runs that in
        one transaction.
        """
        source = check_id("thread_id", source_thread_id)
        target = check_id("thread_id", target_thread_id)
        if isinstance(self.serde, Sealer):
            yield from self.copy_thread_resealed_op(self.serde, source, target)
            return
        yield Stmt("copy_thread", {"source_thread_id": source, "target_thread_id": target})

    def copy_thread_resealed_op(self, sealer: Sealer, source: str, target: str) -> Op[None]:
        """Copy a thread page by page, each value unsealed and sealed again for `target`.

        Each page copies some checkpoints with the values and writes they refer
        to, so rows a concurrent writer adds meanwhile are never half copied.
        """

        def reseal(kind: str, type_: str, data: bytes | None, *where: str | int) -> Any:
            if type_ == "empty":
                return type_, data
            inner, plain = unseal_value(sealer, type_, data, binding(kind, source, *where))
            return seal_value(sealer, inner, plain, binding(kind, target, *where))

        after: Row | None = None
        copied_blobs: set[tuple[str, str, str]] = set()
        while True:
            rows = yield Stmt(
                "thread_checkpoints_page",
                {
                    "thread_id": source,
                    "after_ns": None if after is None else after["checkpoint_ns"],
                    "after_id": None if after is None else after["checkpoint_id"],
                    "limit": self.copy_batch_size,
                },
                fetch=True,
            )
            if not rows:
                return
            page = {
                "thread_id": source,
                "checkpoint_nss": [r["checkpoint_ns"] for r in rows],
                "checkpoint_ids": [r["checkpoint_id"] for r in rows],
            }
            stored = yield from self._stored_values_op(checkpoint_keys(rows, thread_id=source))
            blobs = [b for b in stored if b["kind"] == "v"]
            writes = yield Stmt("thread_writes_of_checkpoints", page, fetch=True)
            params: dict[str, Any] = {"thread_id": target}
            for row in rows:
                where = (row["checkpoint_ns"], row["checkpoint_id"])
                row["type"], row["checkpoint"] = reseal(
                    "checkpoint", row["type"], row["checkpoint"], *where
                )
                row["metadata_type"], row["metadata_blob"] = reseal(
                    "metadata", row["metadata_type"], row["metadata_blob"], *where
                )
            for column in COPIED_CHECKPOINT_COLUMNS:
                params[column] = [r[column] for r in rows]
            new_blobs = []
            for blob in blobs:
                blob_key = (blob["checkpoint_ns"], blob["channel"], blob["version"])
                if blob_key not in copied_blobs:
                    copied_blobs.add(blob_key)
                    blob["type"], blob["blob"] = reseal(
                        "blob", blob["type"], blob["blob"], *blob_key
                    )
                    new_blobs.append(blob)
            for column in COPIED_BLOB_COLUMNS:
                params[f"blob_{column}"] = [b[column] for b in new_blobs]
            for w in writes:
                w["type"], w["blob"] = reseal(
                    "write",
                    w["type"],
                    w["blob"],
                    w["checkpoint_ns"],
                    w["checkpoint_id"],
                    w["task_id"],
                    w["idx"],
                )
            for column in COPIED_WRITE_COLUMNS:
                params[f"write_{column}"] = [w[column] for w in writes]
            yield Stmt("insert_copied_rows", params)
            if len(rows) < self.copy_batch_size:
                return
            after = rows[-1]

    def prune_op(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> Op[None]:
        """Prune threads in one transaction; the caller runs it in one.

        `keep_latest` keeps the newest checkpoint of every namespace, plus the
        ancestors and writes it needs to be rebuilt (a `DeltaChannel` between
        snapshots), and deletes the rest. Checkpoints saved while the prune
        runs are newer than the heads it read, so they are never deleted.
        """
        if isinstance(thread_ids, str):
            raise InvalidInputError("thread_ids must be a list of thread ids, not one string")
        if strategy not in PRUNE_STRATEGIES:
            raise InvalidInputError(
                f"unknown prune strategy {strategy!r}; use one of {PRUNE_STRATEGIES!r}"
            )
        ids = sorted({check_id("thread_id", t) for t in thread_ids})
        if not ids:
            return
        yield from self._lock_threads_op(ids)
        if strategy == "delete":
            yield Stmt("delete_threads", {"thread_ids": ids})
            return
        heads = yield Stmt("thread_heads", {"thread_ids": ids}, fetch=True)
        keep = yield from self._needed_for_op(heads)
        rows = yield Stmt("thread_checkpoint_ids", {"thread_ids": ids}, fetch=True)
        newest = {(h["thread_id"], h["checkpoint_ns"]): h["checkpoint_id"] for h in heads}
        doomed = [
            r
            for r in rows
            if _key(r) not in keep
            and r["checkpoint_id"] < newest.get((r["thread_id"], r["checkpoint_ns"]), "")
        ]
        yield from self._delete_checkpoints_op(doomed)

    def delete_for_runs_op(self, run_ids: Sequence[str]) -> Op[None]:
        """Delete the checkpoints (and their writes) that the given runs created.

        Checkpoints of other runs that still need a deleted one to be rebuilt
        (their `DeltaChannel` history runs through it) keep it.
        """
        if isinstance(run_ids, str):
            raise InvalidInputError("run_ids must be a list of run ids, not one string")
        ids = sorted({check_id("run_id", r) for r in run_ids})
        if not ids:
            return
        rows = yield Stmt("run_checkpoints", {"run_ids": ids}, fetch=True)
        if not rows:
            return
        threads = sorted({r["thread_id"] for r in rows})
        yield from self._lock_threads_op(threads)
        # Re-read under the lock: a concurrent writer may have added checkpoints.
        rows = yield Stmt("run_checkpoints", {"run_ids": ids}, fetch=True)
        doomed_keys = {_key(r) for r in rows}
        every = yield Stmt("thread_checkpoint_ids", {"thread_ids": threads}, fetch=True)
        survivors = [r for r in every if _key(r) not in doomed_keys]
        needed = yield from self._needed_for_op(survivors)
        doomed = [r for r in rows if _key(r) not in needed]
        yield from self._delete_checkpoints_op(doomed)

    def delta_history_op(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Op[dict[str, DeltaChannelHistory]]:
        """Per-channel writes and seed along the target's parent chain, in one query."""
        channels = list(dict.fromkeys(check_id("channel", ch) for ch in channels))
        if not channels:
            return {}
        thread_id, checkpoint_ns = thread_of(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            latest = yield from self.get_tuple_op(config)
            if latest is None:
                return {ch: {"writes": []} for ch in channels}
            checkpoint_id = latest.config["configurable"]["checkpoint_id"]
        rows = yield Stmt(
            "delta_channel_history",
            params={
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": check_id("checkpoint_id", checkpoint_id),
                "channels": TextArray(channels),
                "max_depth": MAX_CHAIN_DEPTH,
            },
            fetch=True,
        )
        return self._assemble_delta_history(thread_id, checkpoint_ns, channels, rows)

    # -- helpers ------------------------------------------------------------------

    def _blob_params(
        self,
        thread_id: str,
        ns: str,
        blobs: Mapping[str, tuple[str, str, bytes, AppendPlan | None]],
        *,
        deltas: bool,
    ) -> dict[str, list[Any]]:
        params: dict[str, list[Any]] = {
            "blob_channels": TextArray(),
            "blob_versions": TextArray(),
            "blob_types": TextArray(),
            "blob_values": ByteaArray(),
            "blob_bases": TextArray(),
        }
        for channel, (version, type_, data, plan) in blobs.items():
            if deltas and plan is not None:
                data, base = plan.payload, plan.base_version
            else:
                base = None
            aad = binding("blob", thread_id, ns, channel, version)
            packed_type, packed = self.pack_value(type_, data, aad)
            params["blob_channels"].append(channel)
            params["blob_versions"].append(version)
            params["blob_types"].append(packed_type)
            params["blob_values"].append(packed)
            params["blob_bases"].append(base)
        return params

    def _lock_threads_op(self, thread_ids: Sequence[str]) -> Op[None]:
        yield Stmt(
            "lock_threads_for_maintenance",
            {"thread_ids": list(thread_ids), "lock_class": LOCK_CLASS_MAINTENANCE},
            fetch=True,
        )

    def _needed_for_op(self, kept: Iterable[Row]) -> Op[set[tuple[str, str, str]]]:
        kept = list(kept)
        if not kept:
            return set()
        rows = yield Stmt(
            "rebuild_dependencies", prepare=False, params=checkpoint_keys(kept), fetch=True
        )
        return {_key(r) for r in rows}

    def _delete_checkpoints_op(self, doomed: Sequence[Row]) -> Op[None]:
        if not doomed:
            return
        yield Stmt("delete_checkpoints", checkpoint_keys(doomed))

    def _assemble_delta_history(
        self, thread_id: str, ns: str, channels: Sequence[str], rows: Sequence[Row]
    ) -> dict[str, DeltaChannelHistory]:
        writes: dict[str, list[tuple[int, tuple[str, str, int], PendingWrite]]] = {
            ch: [] for ch in channels
        }
        seeds: dict[str, Any] = {}
        seed_pieces: dict[str, list[Row]] = {}
        inline_rows: list[Row] = []
        for row in rows:
            kind = row["kind"]
            if kind == "w":
                value = self._load_delta_write(thread_id, ns, row)
                writes[row["channel"]].append(
                    (
                        row["depth"],
                        writes_sort_key(row["task_path"], row["task_id"], row["idx"]),
                        (row["task_id"], row["channel"], value),
                    )
                )
            elif kind == "s":
                seed_pieces.setdefault(row["channel"], []).append(row)
            elif kind == "i":
                inline_rows.append(row)
        for channel, chain in seed_pieces.items():
            # Piece 0 is the seed itself; the highest piece is the full value.
            chain.sort(key=lambda r: -r["idx"])
            if chain[-1]["type"] != "empty":
                seeds[channel] = self._load_seed(
                    (thread_id, ns, channel),
                    [(r["version"], r["type"], r["blob"]) for r in chain],
                )
        for row in inline_rows:
            aad = binding("checkpoint", thread_id, ns, row["checkpoint_id"])
            values = self.load_value(row["type"], row["blob"], aad)["channel_values"]
            for ch in row["found"]:
                if ch not in seeds and ch in values:
                    seeds[ch] = values[ch]
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            # Oldest checkpoint first (deepest), then live order within one.
            ordered = sorted(writes[ch], key=lambda w: (-w[0], w[1]))
            entry: DeltaChannelHistory = {"writes": [w[2] for w in ordered]}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            result[ch] = entry
        return result

    def load_tuple(self, row: Row, memo: ListingMemo | None = None) -> CheckpointTuple:
        """Decode one row of `checkpoint_tuple_from` into a `CheckpointTuple`.

        `memo` lets the rows of one `list` call share the decoding of list pieces.
        """
        thread_id, ns, checkpoint_id = _key(row)
        record = self.load_value(
            row["type"], row["checkpoint"], binding("checkpoint", thread_id, ns, checkpoint_id)
        )
        values = dict(record.get("channel_values") or {})
        # Pieces come grouped by channel, a delta's bases first (see the fragment).
        pieces: dict[str, list[tuple[str, str, bytes]]] = {}
        for channel, version, type_, data in zip(
            row["blob_channels"] or (),
            row["blob_versions"] or (),
            row["blob_types"] or (),
            row["blob_values"] or (),
            strict=True,
        ):
            pieces.setdefault(channel, []).append((version, type_, data))
        for channel, chain in pieces.items():
            if chain[-1][1] != "empty":
                values[channel] = self.load_blob((thread_id, ns, channel), chain, memo)
        record["channel_values"] = values
        record["channel_versions"] = dict(row["channel_versions"] or {})
        pending = [
            (
                task_id,
                channel,
                self.load_value(
                    type_, data, binding("write", thread_id, ns, checkpoint_id, task_id, idx)
                ),
            )
            for task_id, idx, channel, type_, data in zip(
                row["write_task_ids"] or (),
                row["write_idxs"] or (),
                row["write_channels"] or (),
                row["write_types"] or (),
                row["write_values"] or (),
                strict=True,
            )
        ]
        metadata = self.load_value(
            row["metadata_type"],
            row["metadata_blob"],
            binding("metadata", thread_id, ns, checkpoint_id),
        )
        parent = row["parent_checkpoint_id"]
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=cast(Checkpoint, record),
            metadata=cast(CheckpointMetadata, metadata),
            parent_config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": parent,
                }
            }
            if parent
            else None,
            pending_writes=pending,
        )

    def decode_listed(
        self, rows: Iterable[Row], recheck: Mapping[str, Any] | None, limit: int | None
    ) -> Generator[CheckpointTuple, None, None]:
        """Decode listed rows lazily, applying a filter JSONB could not hold."""
        count = 0
        rows = list(rows)
        memo = ListingMemo.of(rows)
        for row in rows:
            if limit is not None and count >= limit:
                return
            tup = self.load_tuple(row, memo)
            if recheck is not None and not metadata_matches(tup.metadata, recheck):
                continue
            count += 1
            yield tup


class ListingMemo:
    """The list pieces the rows of one `list` call decode once and share.

    It counts the rows that use each piece, so the last one to use it takes
    the decoded items themselves and the others take copies.
    """

    def __init__(self) -> None:
        self.decoded: dict[tuple[str, str, str, str], list[Any]] = {}
        self.uses: dict[tuple[str, str, str, str], int] = {}

    @classmethod
    def of(cls, rows: Sequence[Row]) -> ListingMemo:
        """A memo for the listed `rows`."""
        memo = cls()
        for row in rows:
            thread_id, ns = row["thread_id"], row["checkpoint_ns"]
            for channel, version in zip(row["blob_channels"], row["blob_versions"], strict=True):
                key = (thread_id, ns, channel, version)
                memo.uses[key] = memo.uses.get(key, 0) + 1
        return memo

    def release(self, key: tuple[str, str, str, str]) -> bool:
        """Count one use of a piece; True when no later row uses it."""
        left = self.uses.get(key, 0) - 1
        self.uses[key] = left
        return left <= 0


# First key of the transaction advisory locks that serialise maintenance
# (prune, delete_for_runs) of one thread ("pgct" in ASCII).
LOCK_CLASS_MAINTENANCE = 0x70676374


def checkpoint_keys(rows: Sequence[Row], *, thread_id: str | None = None) -> dict[str, Any]:
    """The parameters of a statement about a set of checkpoints: their keys as three
    parallel arrays, and the bound of a parent-chain walk (`delete_checkpoints`,
    `measure_checkpoints`, `rebuild_dependencies`, `listed_values`).

    `thread_id` names the thread of rows that do not carry it.

    Example:
        >>> checkpoint_keys([{"checkpoint_ns": "", "checkpoint_id": "c1"}], thread_id="t")[
        ...     "thread_ids"]
        ['t']
    """
    return {
        "thread_ids": TextArray(
            [r["thread_id"] for r in rows] if thread_id is None else [thread_id] * len(rows)
        ),
        "checkpoint_nss": TextArray([r["checkpoint_ns"] for r in rows]),
        "checkpoint_ids": TextArray([r["checkpoint_id"] for r in rows]),
        "max_depth": MAX_CHAIN_DEPTH,
    }


def _key(row: Row) -> tuple[str, str, str]:
    return (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])


def dumps_json(value: Any) -> str:
    """JSON text for the CLI and logs (non-JSON values as strings).

    Example:
        >>> dumps_json({"a": 1})
        '{"a": 1}'
    """
    return json.dumps(value, default=str, ensure_ascii=False)

"""What a saver keeps between calls, in one budget of bytes, and how it is keyed.

Rebuilding a `DeltaChannel` decodes its snapshot (the seed) and every write
since; the next step of the same thread does it again. Reading a stored list
decodes its pieces, which the thread's next checkpoints share. Storing a list
as a delta needs the list stored last (`pgcheckpoint.core.appends`). All of these live
in one `CacheBudget`: a least-recently-used store bounded by what its entries
add to the process's memory (`CacheBudget.cost`: the bytes of each value,
key and entry, and what the allocators add), shared by a saver and the
copies `with_allowlist` makes. Stored values never change, so decoded ones
are keyed by a digest of the stored bytes (a deleted thread written again may
reuse version strings). What a cache of values that reads hand out keeps, and what it
gives back, follow the one rule of `pgcheckpoint.core.sharing`: it keeps only
what a copy can take whole, and each lookup is a copy.

Example:
    >>> from pgcheckpoint.core.caches import CacheBudget, DecodedCache, MISSING
    >>> cache = DecodedCache(CacheBudget(max_bytes=5000), "seed")
    >>> [cache.keep(("t", key), key * 1000) for key in "abc"]
    [True, True, True]
    >>> cache.lookup(("t", "a")) is MISSING, cache.lookup(("t", "c"))[:3]
    (True, 'ccc')
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from enum import Enum
from types import ModuleType
from typing import Any, cast

from pydantic import BaseModel

from ..errors import InvalidInputError
from .sharing import NotWhole, handout

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "MAX_CACHED_WRITE_BYTES",
    "MISSING",
    "SMALL_OBJECT_BYTES",
    "CacheBudget",
    "CacheKey",
    "DecodedCache",
    "approx_size",
    "check_cache_bytes",
    "digest_of",
    "seed_key",
    "value_size",
    "write_columns",
    "write_key",
]

# What every saver may keep between calls unless told otherwise.
DEFAULT_CACHE_BYTES = 32 * 1024 * 1024
# What `lookup` returns for a key it does not hold.
MISSING: Any = object()
# A larger write (a big tool result) is decoded at each read instead of kept.
MAX_CACHED_WRITE_BYTES = 64 * 1024
# What an entry costs besides its value and its key: its slot in the OrderedDict
# (hash table and links), the (value, cost) pair and the int. Measured with
# tracemalloc on CPython 3.11 (157 to 174 bytes from 1,000 to 20,000 entries).
_ENTRY_BYTES = 170
# Objects larger than this come from the C allocator (malloc); smaller ones
# from Python's own pools of small blocks.
SMALL_OBJECT_BYTES = 512
# What a process's RSS grows by per byte kept, measured with
# bench/bench_memory.py (CPython 3.11, glibc) against tracemalloc's count of
# what the caches hold: Python's pools round each block up and keep a few part
# empty (1.1); malloc's heaps keep about 0.6 of a byte free for each byte of
# the values (message texts, serialised lists) that a full cache replaces all
# the time, in holes later values do not fit (0.35 with 4 threads, each with
# an arena of its own; 0.65 on one thread under asyncio). With both counted,
# a full budget is what the caches add to RSS.
_SMALL_OBJECT_FACTOR = 1.1
_LARGE_OBJECT_FACTOR = 1.6
# What a cache of decoded values is asked for: a thread id, then text or bytes that
# tell the value apart (the columns it was read from, digests).
CacheKey = tuple[str | bytes, ...]
# Values that hold no other object, counted without a walk.
_LEAVES = frozenset({str, bytes, int, float, complex})


def check_cache_bytes(cache_bytes: object) -> int:
    """`cache_bytes` if it is a usable budget, else `InvalidInputError`.

    Example:
        >>> check_cache_bytes(0)
        0
    """
    if type(cache_bytes) is not int or cache_bytes < 0:
        raise InvalidInputError(
            f"cache_bytes must be a number of bytes, 0 or more, not {cache_bytes!r}"
        )
    return cache_bytes


class CacheBudget:
    """Everything a saver keeps between calls: one LRU, bounded by bytes.

    Each value is kept at the `cost` of the size its keeper gives it; the
    least recently used go first when a new one would go over `max_bytes`,
    and a value larger than half the budget is not kept at all (it would
    flush everything else). Keys are tuples whose first item is a thread id,
    so a deleted thread's values can be dropped together, and whose second
    names the cache that kept it (`usage`). Safe to share between threads.

    Args:
        max_bytes: The budget; 0 keeps nothing.

    Example:
        >>> budget = CacheBudget(max_bytes=1 << 20)
        >>> budget.keep(("t", "seed"), b"value", size=1000)
        True
        >>> budget.lookup(("t", "seed")), 1000 < budget.used_bytes < 2000
        (b'value', True)
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = check_cache_bytes(max_bytes)
        self._entries: OrderedDict[tuple[Hashable, ...], tuple[Any, int]] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        """What the kept values cost, by `cost` (at most `max_bytes`)."""
        return self._used

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: tuple[Hashable, ...]) -> Any:
        """The value kept for `key` (now the most recently used), or `MISSING`."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return MISSING
            self._entries.move_to_end(key)
        return entry[0]

    def keep(self, key: tuple[Hashable, ...], value: Any, *, size: int, large: int = 0) -> bool:
        """Keep `value` for `key`, dropping the least recently used beyond the budget.

        `size` is the bytes the value's objects take, `large` those of them
        in objects over 512 bytes (`value_size`); the entry's and the key's
        bytes, and what each allocator adds, are added (`cost`). Returns
        whether it was kept.
        """
        cost = self.cost(key, size, large)
        if 2 * cost > self.max_bytes:
            self.discard(key)  # an older value for the key must not outlive this one
            return False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._used -= old[1]
            self._entries[key] = (value, cost)
            self._used += cost
            while self._used > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._used -= dropped
        return True

    def fits(self, key: tuple[Hashable, ...], size: int, large: int = 0) -> bool:
        """Whether `keep` would keep a value of `size` for `key` (at most half the budget)."""
        return 2 * self.cost(key, size, large) <= self.max_bytes

    @staticmethod
    def cost(key: tuple[Hashable, ...], size: int, large: int = 0) -> int:
        """What keeping a value of `size` bytes (`large` of them in large objects)
        for `key` adds to the process's memory, by the budget's count.

        The key's tuple and its items count but the second, the name of the
        cache, which every entry of that cache shares.

        Example:
            >>> CacheBudget.cost(("t", "seed0", b"d" * 16), 1000) > 1000
            True
        """
        small = size - large + _ENTRY_BYTES + sys.getsizeof(key)
        for i, part in enumerate(key):
            if i != 1:
                small += sys.getsizeof(part)
        return int(small * _SMALL_OBJECT_FACTOR + large * _LARGE_OBJECT_FACTOR)

    def usage(self) -> dict[str, int]:
        """What the budget holds, by the name of the cache that kept it (its keys' second item).

        Example:
            >>> budget = CacheBudget(1 << 20)
            >>> budget.keep(("t", "seed0", b"k"), "v", size=100)
            True
            >>> list(budget.usage())
            ['seed0']
        """
        with self._lock:
            entries = list(self._entries.items())
        held: dict[str, int] = {}
        for key, (_, cost) in entries:
            name = str(key[1]) if len(key) > 1 else ""
            held[name] = held.get(name, 0) + cost
        return held

    def discard(self, key: tuple[Hashable, ...]) -> None:
        """Drop what is kept for `key`, if anything."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._used -= old[1]

    def forget_thread(self, thread_id: str) -> None:
        """Drop everything kept for a thread (it was deleted, or its rows changed)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == thread_id]:
                self._used -= self._entries.pop(key)[1]

    def clear(self) -> None:
        """Drop everything.

        Example:
            >>> saver.caches.clear()  # doctest: +SKIP
        """
        with self._lock:
            self._entries.clear()
            self._used = 0


class DecodedCache:
    """Decoded values of one kind (seeds, writes) kept in a `CacheBudget`.

    A `with_allowlist` copy of a saver decodes with another serializer, so
    its values are kept under a `kind` of its own in the same budget. A key
    is kept as (thread id, kind, one digest of the rest of it).

    The values of a cache whose values reads hand out (`handed_out`, the
    default) stay the cache's, as `pgcheckpoint.core.sharing` says: it keeps
    a copy of a value `handout` copies whole and nothing else, and `lookup`
    returns a copy, so neither the caller who kept a value nor one who found
    it can change what the next one finds.

    Args:
        budget: Where the values are kept.
        kind: What tells these values apart from others in the budget.
        handed_out: False for values the core only consults (checked
            structures), kept and found as they are.

    Example:
        >>> cache = DecodedCache(CacheBudget(max_bytes=1 << 20), "write")
        >>> value = [1, [2]]
        >>> cache.keep(("t", "k"), value), cache.lookup(("t", "k"))
        (True, [1, [2]])
        >>> value[1].append(3); cache.lookup(("t", "k"))
        [1, [2]]
    """

    def __init__(self, budget: CacheBudget, kind: str, *, handed_out: bool = True) -> None:
        self.budget = budget
        self.kind = kind
        self.handed_out = handed_out

    def lookup(self, key: CacheKey) -> Any:
        """The value kept for `key` (its first item a thread id), or `MISSING`."""
        if not self.budget.max_bytes:
            return MISSING
        found = self.budget.lookup(self._budget_key(key))
        if found is MISSING or not self.handed_out:
            return found
        return handout(found)

    def keep(self, key: CacheKey, value: Any) -> bool:
        """Keep a decoded value, sized by `value_size`; whether it was kept.

        The caller's `value` stays its own: what is kept is a copy of it.
        """
        if not self.budget.max_bytes:
            return False
        full_key = self._budget_key(key)
        size, large = value_size(value)
        if self.handed_out:
            copied = MISSING
            if self.budget.fits(full_key, size, large):  # else not copied for nothing
                with contextlib.suppress(NotWhole):
                    copied = handout(value)
            if copied is MISSING:
                self.budget.discard(full_key)  # an older value must not outlive this one
                return False
            value = copied
        return self.budget.keep(full_key, value, size=size, large=large)

    def _budget_key(self, key: CacheKey) -> tuple[str, str, bytes]:
        # (thread, this cache's name, one digest of the rest): a key of columns
        # as text took 300 to 600 bytes an entry, a digest takes 49
        rest = key[1:]
        if len(rest) == 1 and type(rest[0]) is bytes:
            return (cast(str, key[0]), self.kind, rest[0])  # a digest already
        texts = [part if type(part) is str else repr(part) for part in rest]
        kinds = "".join("s" if type(part) is str else "r" for part in rest)
        return (cast(str, key[0]), self.kind, digest_of([kinds, *texts]))


def digest_of(texts: Sequence[str], *blobs: bytes) -> bytes:
    """A digest (16 bytes) that tells any two different (`texts`, `blobs`) apart.

    The texts are joined by NULs, which text read from PostgreSQL cannot
    hold (one that does is hashed by its `repr` instead, tagged apart), after
    their count and each blob's length; then the blobs (stored bytes) as
    they are.

    Example:
        >>> digest_of(["ab", "c"]) == digest_of(["a", "bc"]), len(digest_of(["a"], b"\\x90"))
        (False, 16)
    """
    joined = "\x00".join(texts)
    if joined.count("\x00") != max(len(texts) - 1, 0):
        joined = "r" + repr(tuple(texts))
    lengths = ",".join([str(len(texts)), *(str(len(blob)) for blob in blobs)])
    digest = hashlib.blake2b(f"{lengths}:{joined}".encode("utf-8", "surrogatepass"), digest_size=16)
    for blob in blobs:
        digest.update(blob)
    return digest.digest()


def approx_size(value: Any) -> int:
    """About the bytes `value` and everything it holds take in memory.

    Each container, pydantic model (a LangChain message) and object with an
    instance dict counts once, by `sys.getsizeof`, with what it holds; `None`,
    booleans, classes, enum members and the field names of a model are shared
    with everything else and count nothing. Within a tenth of what tracemalloc
    sees a decoded list of messages allocate (tests/unit/test_caches.py), in
    about half the time decoding it took.

    Example:
        >>> approx_size(["x" * 1000]) > 1000
        True
    """
    return value_size(value)[0]


def value_size(value: Any) -> tuple[int, int]:
    """`approx_size(value)`, and how many of those bytes are in objects over 512 bytes.

    Python keeps small objects in pools of its own and asks the C allocator
    for larger ones (a message's text, serialised bytes), which leaves more of
    what they free unused (`CacheBudget.cost`).

    Example:
        >>> value_size(["x" * 1000])[1] > 1000 > value_size(["x" * 10])[0]
        True
    """
    sizeof = sys.getsizeof
    kind = type(value)
    if kind in _LEAVES:
        size = sizeof(value)
        return size, size if size > SMALL_OBJECT_BYTES else 0
    seen: set[int] = set()
    stack = [value]
    total = large = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        size = sizeof(obj)
        total += size
        if size > SMALL_OBJECT_BYTES:
            large += size
        kind = type(obj)
        if kind is list or kind is tuple or kind is set or kind is frozenset:
            children: Any = obj
        elif kind is dict:
            for key in obj:
                if type(key) in _LEAVES:
                    size = sizeof(key)
                    total += size
                    if size > SMALL_OBJECT_BYTES:
                        large += size
                elif not _shared(key):
                    stack.append(key)
            children = obj.values()
        elif isinstance(obj, BaseModel):
            # the field names are the class's; the set of them is the instance's
            fields = obj.__dict__
            total += sizeof(fields) + sizeof(obj.__pydantic_fields_set__)
            children = [
                *fields.values(),
                obj.__pydantic_extra__,
                getattr(obj, "__pydantic_private__", None),
            ]
        elif isinstance(obj, list | tuple | set | frozenset):  # a NamedTuple (_DeltaSnapshot)
            children = obj
        elif isinstance(obj, dict):
            children = [*obj.keys(), *obj.values()]
        else:
            attrs = getattr(obj, "__dict__", None)
            slots = getattr(kind, "__slots__", ())
            children = [
                getattr(obj, name, None) for name in ((slots,) if isinstance(slots, str) else slots)
            ]
            if type(attrs) is dict:
                children.append(attrs)
        for child in children:
            if type(child) in _LEAVES:
                size = sizeof(child)
                total += size
                if size > SMALL_OBJECT_BYTES:
                    large += size
            elif not _shared(child):
                stack.append(child)
    return total, large


def _shared(obj: Any) -> bool:
    return (
        obj is None
        or type(obj) is bool
        or isinstance(obj, type | ModuleType | Enum)
        or (callable(obj) and not isinstance(obj, BaseModel))
    )


def seed_key(
    key: tuple[str, str, str], pieces: Sequence[tuple[str, str, bytes, str | None]]
) -> tuple[str, bytes]:
    """The cache key of a stored value: (thread, digest of where it is and of its pieces).

    The digest covers the namespace, the channel and every column a piece is
    read with (version, type, bytes, delta base): a piece whose columns were
    edited is not found in the cache, and is decoded, and checked, again.

    Example:
        >>> thread, digest = seed_key(("t", "", "m"), [("v1", "msgpack", b"\\x90", None)])
        >>> thread, len(digest)
        ('t', 16)
    """
    texts = [key[1], key[2]]
    for version, type_, _, base in pieces:
        texts += (version, type_, "-" if base is None else "+" + base)
    return (key[0], digest_of(texts, *(data or b"" for _, _, data, _ in pieces)))


def write_key(thread_id: str, ns: str, row: dict[str, Any]) -> tuple[str, bytes] | None:
    """The cache key of a stored write, or None when it is too large to keep.

    Its digest covers every column the write is read with and its bytes, so a
    write whose channel or task path was edited is decoded, and checked, again.

    Example:
        >>> row = {"checkpoint_id": "c", "task_id": "k", "idx": 0, "type": "msgpack",
        ...        "blob": b"", "channel": "m", "task_path": ""}
        >>> key = write_key("t", "", row)
        >>> key[0], write_key("t", "", {**row, "idx": 1}) == key
        ('t', False)
    """
    data = row["blob"] or b""
    if len(data) > MAX_CACHED_WRITE_BYTES:
        return None
    return (thread_id, digest_of(write_columns(thread_id, ns, row)[1:], data))


def write_columns(thread_id: str, ns: str, row: dict[str, Any]) -> tuple[str, ...]:
    """Every column a stored write is read with, but its bytes, as text.

    Example:
        >>> row = {"checkpoint_id": "c", "task_id": "k", "idx": 0, "type": "msgpack",
        ...        "channel": "m", "task_path": ""}
        >>> write_columns("t", "", row)
        ('t', '', 'c', 'k', '0', 'm', '', 'msgpack')
    """
    return (
        thread_id,
        ns,
        row["checkpoint_id"],
        row["task_id"],
        str(row["idx"]),
        row["channel"],
        row["task_path"],
        row["type"],
    )

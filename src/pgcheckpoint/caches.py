"""The decoded values a saver keeps between calls, and how they are keyed.

Rebuilding a `DeltaChannel` decodes its snapshot (the seed) and every write
since; the next step of the same thread does it again. Stored values never
change, so the decoded ones are kept in bounded LRUs, keyed by a digest of
the stored bytes (a deleted thread written again may reuse version strings),
and every caller gets its own copy (`pgcheckpoint.fastcopy`). The caches are
made with the saver; `with_allowlist` copies get their own, as what a
serializer decodes depends on its allowlist.

Example:
    >>> from pgcheckpoint.caches import DecodedCache, MISSING
    >>> cache = DecodedCache(max_entries=1)
    >>> cache.keep(("a",), 1); cache.keep(("b",), 2)
    >>> cache.lookup(("a",)) is MISSING, cache.lookup(("b",))
    (True, 2)
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_CACHED_WRITE_BYTES", "MISSING", "DecodedCache", "seed_key", "write_key"]

# What `DecodedCache.lookup` returns for a key it does not hold.
MISSING: Any = object()
# A larger write (a big tool result) is decoded at each read instead of kept.
MAX_CACHED_WRITE_BYTES = 64 * 1024
# One lock for every cache: each holds it for a dict operation only.
_LOCK = threading.Lock()


class DecodedCache(OrderedDict[tuple[str, ...], Any]):
    """A bounded LRU of decoded values, shared by the threads of a process.

    Args:
        max_entries: How many values it keeps; the least recently used go first.

    Example:
        >>> len(DecodedCache(max_entries=4))
        0
    """

    def __init__(self, max_entries: int) -> None:
        super().__init__()
        self.max_entries = max_entries

    def lookup(self, key: tuple[str, ...]) -> Any:
        """The value kept for `key` (now the most recently used), or `MISSING`."""
        with _LOCK:
            value = self.get(key, MISSING)
            if value is not MISSING:
                self.move_to_end(key)
        return value

    def keep(self, key: tuple[str, ...], value: Any) -> None:
        """Keep `value` for `key`, dropping the least recently used beyond the bound."""
        with _LOCK:
            self[key] = value
            while len(self) > self.max_entries:
                self.popitem(last=False)


def seed_key(
    key: tuple[str, str, str], pieces: Sequence[tuple[str, str, bytes, str | None]]
) -> tuple[str, ...]:
    """The cache key of a stored value: (thread, namespace, channel, digest of its pieces).

    The digest covers every column a piece is read with (version, type, bytes,
    delta base): a piece whose columns were edited is not found in the cache,
    and is decoded, and checked, again.

    Example:
        >>> seed_key(("t", "", "m"), [("v1", "msgpack", b"\\x90", None)])[:3]
        ('t', '', 'm')
    """
    digest = hashlib.blake2b(digest_size=16)
    for version, type_, data, base in pieces:
        for text in (version, type_, "\x00" if base is None else base):
            raw = text.encode("utf-8", "surrogatepass")
            digest.update(len(raw).to_bytes(8, "big") + raw)
        digest.update(len(data or b"").to_bytes(8, "big"))
        digest.update(data or b"")
    return (*key, digest.hexdigest())


def write_key(thread_id: str, ns: str, row: dict[str, Any]) -> tuple[str, ...] | None:
    """The cache key of a stored write, or None when it is too large to keep.

    It holds every column the write is read with, so a write whose channel or
    task path was edited is decoded, and checked, again.

    Example:
        >>> row = {"checkpoint_id": "c", "task_id": "k", "idx": 0, "type": "msgpack",
        ...        "blob": b"", "channel": "m", "task_path": ""}
        >>> write_key("t", "", row)[:5]
        ('t', '', 'c', 'k', '0')
    """
    data = row["blob"] or b""
    if len(data) > MAX_CACHED_WRITE_BYTES:
        return None
    return (
        thread_id,
        ns,
        row["checkpoint_id"],
        row["task_id"],
        str(row["idx"]),
        row["channel"],
        row["task_path"],
        row["type"],
        hashlib.blake2b(data, digest_size=16).hexdigest(),
    )

"""What tracemalloc sees allocated, split as the cache budget counts it."""

from __future__ import annotations

import tracemalloc

# What the cache budget counts for each byte tracemalloc sees, in blocks Python's
# pools serve (up to 512 bytes: rounded up, a few pools part empty) and in blocks
# malloc serves (message texts, serialised lists: the holes a full cache leaves in
# malloc's heaps as it replaces them), as bench/bench_memory.py measured RSS.
SMALL_BLOCK_COUNT, LARGE_BLOCK_COUNT = 1.1, 1.6


def block_bytes() -> tuple[int, int]:
    """The bytes tracemalloc (started) sees allocated: in blocks of up to 512 bytes, and larger."""
    sizes = [trace.size for trace in tracemalloc.take_snapshot().traces]
    return sum(s for s in sizes if s <= 512), sum(s for s in sizes if s > 512)


def counted(small: int, large: int) -> float:
    """What the budget should count for blocks of these bytes."""
    return SMALL_BLOCK_COUNT * small + LARGE_BLOCK_COUNT * large

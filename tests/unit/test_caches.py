"""The cache budget: what a saver keeps, bounded by bytes, and sizes that match memory."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import ormsgpack
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from support.memory import block_bytes, counted

from pgcheckpoint import InvalidInputError, PostgresSaver
from pgcheckpoint.core.appends import AppendCache
from pgcheckpoint.core.caches import (
    DEFAULT_CACHE_BYTES,
    MISSING,
    CacheBudget,
    DecodedCache,
    approx_size,
    seed_key,
    write_key,
)
from pgcheckpoint.core.state import SaverState


def chat(count: int, size: int) -> list[Any]:
    """Messages as a chat holds them: human, AI with a tool call, tool result."""
    out: list[Any] = []
    for i in range(count):
        content = f"message {i} " + "lorem ipsum dolor sit amet " * (size // 27)
        if i % 3 == 0:
            out.append(HumanMessage(content=content, id=f"h{i}"))
        elif i % 3 == 1:
            call = {"name": "lookup", "args": {"query": f"q{i}"}, "id": f"c{i}"}
            out.append(AIMessage(content=content, id=f"a{i}", tool_calls=[call]))
        else:
            out.append(ToolMessage(content=content, tool_call_id=f"c{i}", id=f"t{i}"))
    return out


def traced_size(make: Any) -> tuple[Any, int]:
    """What `make()` returns, and the bytes it left allocated (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        value = make()
        return value, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("count", "size"), [(16, 2000), (300, 500), (100, 50), (20, 20_000), (1000, 300)]
)
def test_the_size_of_decoded_messages_is_what_tracemalloc_sees(count: int, size: int) -> None:
    serde = JsonPlusSerializer()
    stored = serde.dumps_typed(chat(count, size))
    serde.loads_typed(stored)  # the first decode of a class builds its validators
    value, allocated = traced_size(lambda: serde.loads_typed(stored))
    assert 0.9 <= approx_size(value) / allocated <= 1.15


def test_the_size_of_plain_values() -> None:
    value, allocated = traced_size(
        lambda: ormsgpack.unpackb(ormsgpack.packb([{"text": "x" * 500, "n": 10**6}] * 50))
    )
    assert 0.9 <= approx_size(value) / allocated <= 1.15
    # what every value shares is not counted: a thousand Nones are one list
    assert approx_size([None] * 1000) < 8200
    inner = ["y" * 1000]
    assert approx_size([inner, inner]) < 1200  # a container reached twice counts once


def traced_blocks(make: Any) -> tuple[int, int]:
    """The bytes of the blocks `make()` left allocated: in blocks of up to 512 bytes, and larger."""
    gc.collect()
    tracemalloc.start()
    try:
        make()
        gc.collect()
        return block_bytes()
    finally:
        tracemalloc.stop()


def _row(n: int) -> dict[str, Any]:
    return {
        "checkpoint_id": f"1f0{n:033x}",
        "task_id": f"{n:08x}-7d4e-8b58-2a3c-{n:012x}",
        "idx": n % 3,
        "type": "msgpack",
        "blob": ormsgpack.packb(n),
        "channel": "messages",
        "task_path": "~__pregel_pull, reply",
    }


def _pieces(budget: CacheBudget) -> None:
    serde, cache = JsonPlusSerializer(), DecodedCache(budget, "piece0")
    for n in range(400):
        items = serde.loads_typed(serde.dumps_typed(chat(4, 2000)))
        cache.keep(
            seed_key((f"t{n % 50}", "", "messages"), [(f"v{n}", "msgpack", b"", None)]), items
        )


def _writes(budget: CacheBudget) -> None:
    serde, cache = JsonPlusSerializer(), DecodedCache(budget, "write0")
    for n in range(1000):
        value = serde.loads_typed(serde.dumps_typed(chat(1, 2000)))
        cache.keep(write_key(f"t{n % 50}", "", _row(n)), value)  # type: ignore[arg-type]


def _marks(budget: CacheBudget) -> None:
    # what a piece read once leaves, and a checked write: entries that are all key
    pieces, checks = DecodedCache(budget, "piece0"), DecodedCache(budget, "checked0")
    for n in range(5000):
        pieces.keep(
            seed_key((f"t{n % 50}", "", "messages"), [(f"v{n}", "msgpack", b"", None)]), "seen once"
        )
        checks.keep(write_key(f"t{n % 50}", "", _row(n)), True)  # type: ignore[arg-type]


def _lists(budget: CacheBudget) -> None:
    appends = AppendCache(budget)
    for n in range(300):
        data = ormsgpack.packb([f"item {i} of {n} " + "x" * 2000 for i in range(16)])
        appends.remember((f"t{n}", "", "messages"), f"v{n}", data, chain=n % 3, chain_bytes=n)


@pytest.mark.parametrize("fill", [_pieces, _writes, _marks, _lists], ids=lambda f: f.__name__[1:])
def test_what_the_budget_counts_is_what_its_entries_add_to_memory(fill: Any) -> None:
    """Each cache's entries, filled with values as a worker keeps them, count for
    the blocks tracemalloc sees them take (values, keys, the entries themselves),
    with what each allocator adds: not less, which lets the caches outgrow the
    budget, nor much more, which leaves it holding fewer threads."""
    budget = CacheBudget(1 << 30)
    # within a tenth either way: a thread id or a marker that entries share counts in each
    expected = counted(*traced_blocks(lambda: fill(budget)))
    assert 0.9 * expected <= budget.used_bytes <= 1.1 * expected
    assert budget.used_bytes == sum(budget.usage().values())


def test_a_full_budget_holds_no_more_than_it_counts() -> None:
    budget = CacheBudget(2 * 1024 * 1024)
    assert 0.9 * counted(*traced_blocks(lambda: _writes(budget))) <= budget.used_bytes
    assert budget.used_bytes <= budget.max_bytes


def test_a_budget_is_never_exceeded_and_drops_the_least_recently_used() -> None:
    budget = CacheBudget(10_000)
    for n in range(50):
        assert budget.keep(("t", str(n)), n, size=1_000)
        assert budget.used_bytes <= budget.max_bytes
        assert budget.lookup(("t", "0")) == 0  # in use, so kept
    assert budget.lookup(("t", "1")) is MISSING
    assert budget.lookup(("t", "49")) == 49
    assert budget.lookup(("t", "0")) == 0


def test_a_value_over_half_the_budget_is_not_kept_nor_its_older_value() -> None:
    budget = CacheBudget(10_000)
    assert budget.keep(("t", "k"), "small", size=100)
    assert not budget.keep(("t", "k"), "large", size=6_000)
    assert budget.lookup(("t", "k")) is MISSING and budget.used_bytes == 0


def test_zero_keeps_nothing() -> None:
    budget = CacheBudget(0)
    assert not budget.keep(("t", "k"), 1, size=0)
    assert len(budget) == 0 and budget.used_bytes == 0
    cache = DecodedCache(budget, "seed")
    assert not cache.keep(("t", "k"), [1]) and cache.lookup(("t", "k")) is MISSING
    appends = AppendCache(budget)
    data = ormsgpack.packb(["x" * 300])
    appends.remember(("t", "", "m"), "v1", data, chain=0, chain_bytes=0)
    bigger = ormsgpack.packb(["x" * 300, "y"])
    assert appends.plan(("t", "", "m"), "v2", bigger, full_every=32) is None


def test_a_list_remembered_again_at_its_version_keeps_the_bytes_read_last() -> None:
    # a read of a list already remembered skips the copy only when nothing changed:
    # the same version with other bytes (a thread deleted and written again) replaces it
    appends = AppendCache(CacheBudget(1 << 20))
    first, other = ormsgpack.packb(["x" * 300] * 4), ormsgpack.packb(["y" * 300] * 4)
    appends.remember(("t", "", "m"), "v1", first, chain=0, chain_bytes=0)
    appends.remember(("t", "", "m"), "v1", first, chain=0, chain_bytes=0)
    appends.remember(("t", "", "m"), "v1", other, chain=0, chain_bytes=0)
    grown = ormsgpack.packb(["y" * 300] * 4 + ["z"])
    plan = appends.plan(("t", "", "m"), "v2", grown, full_every=32)
    assert plan is not None and plan.base_version == "v1"
    assert (
        appends.plan(("t", "", "m"), "v2", ormsgpack.packb(["x" * 300] * 4 + ["z"]), full_every=32)
        is None
    )


def test_every_cache_of_a_saver_shares_one_budget() -> None:
    core = SaverState(cache_bytes=200_000)
    clone = core.with_allowlist([("my.module", "Thing")])
    assert clone.caches is core.caches
    data = ormsgpack.packb(["x" * 40_000])
    core.append_cache.remember(("t1", "", "m"), "v1", data, chain=0, chain_bytes=0)
    core.seed_cache.keep(("t2", "", "m", "d"), ["s" * 40_000])
    clone.write_cache.keep(("t3", "", "c", "k", "0", "msgpack", "d"), ["w" * 40_000])
    assert 120_000 < core.caches.used_bytes <= 200_000
    # a fourth and fifth value push out the first ones, whoever kept them
    clone.seed_cache.keep(("t4", "", "m", "d"), ["s" * 40_000])
    core.write_cache.keep(("t5", "", "c", "k", "0", "msgpack", "d"), ["w" * 40_000])
    assert core.caches.used_bytes <= 200_000
    assert core.append_cache.plan(("t1", "", "m"), "v2", data + b"", full_every=32) is None


def test_forgetting_a_thread_drops_its_decoded_values_too() -> None:
    core = SaverState()
    core.seed_cache.keep(("t1", "", "m", "d"), ["a"])
    core.write_cache.keep(("t1", "", "c", "k", "0", "msgpack", "d"), ["b"])
    core.seed_cache.keep(("t2", "", "m", "d"), ["c"])
    core.append_cache.forget_thread("t1")
    assert len(core.caches) == 1
    core.caches.clear()
    assert len(core.caches) == 0 and core.caches.used_bytes == 0


@pytest.mark.parametrize("bad", [-1, 1.5, "32M", True, None])
def test_cache_bytes_must_be_a_number_of_bytes(bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="cache_bytes must be a number of bytes"):
        SaverState(cache_bytes=bad)


def test_the_default_budget() -> None:
    assert SaverState().caches.max_bytes == DEFAULT_CACHE_BYTES == 32 * 1024 * 1024
    assert PostgresSaver.__init__.__kwdefaults__["cache_bytes"] == DEFAULT_CACHE_BYTES


def test_keys_that_differ_in_any_column_are_told_apart() -> None:
    piece = ("v1", "msgpack", b"\x90", None)
    seeds = {
        seed_key(("t", "", "m"), [piece]),
        seed_key(("t", "", "m"), [(*piece[:3], "")]),
        seed_key(("t", "", "m"), [(*piece[:3], "-")]),
        seed_key(("t", "", "m"), [(*piece[:2], b"\x90\x00", None)]),
        seed_key(("t", "", "m"), [piece, piece]),
        seed_key(("t", "m", ""), [piece]),
        seed_key(("t", "", "m\x00v1"), [("", *piece[1:])]),
    }
    assert len(seeds) == 7
    row = _row(1)
    writes = {write_key("t", "", {**row, column: "x\x00"}) for column in ("task_id", "channel")}
    writes |= {write_key("t", "", row), write_key("t", "", {**row, "idx": 11})}
    assert len(writes) == 4
    cache = DecodedCache(CacheBudget(1 << 20), "checked0", handed_out=False)
    assert cache.keep(("t", "a", "b"), True) and cache.lookup(("t", "a\x00b")) is MISSING
    assert cache.lookup(("t", "a", "b")) is True and cache.lookup(("t", b"a", "b")) is MISSING

"""The sharing rule (`pgcheckpoint.core.sharing`) and the caches that follow it."""

from __future__ import annotations

import collections
import copy
import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from pydantic import BaseModel, PrivateAttr
from support.values import Box, Card, Color, Note, Pin, Slotted, canon, mutable_ids, vandalize
from support.values import values as any_values

from pgcheckpoint.core.caches import MISSING, CacheBudget, DecodedCache
from pgcheckpoint.core.sharing import NotWhole, copies_whole, handout, shareable


class _WithPrivate(BaseModel):
    name: str
    _cache: dict[str, int] = PrivateAttr(default_factory=dict)


class _OwnCopy(BaseModel):
    name: str

    def __copy__(self) -> _OwnCopy:
        return _OwnCopy(name=self.name + " (copied)")


@dataclasses.dataclass
class _Reduced:
    items: list[int]

    def __reduce__(self) -> Any:
        return (_Reduced, ([*self.items, 0],))


def ai_message() -> AIMessage:
    return AIMessage(
        content=[{"type": "text", "text": "hi"}],
        id="a1",
        tool_calls=[{"name": "lookup", "args": {"q": ["x"]}, "id": "c1"}],
        additional_kwargs={"k": {"n": [1]}},
    )


def test_a_message_handed_out_is_equal_and_shares_nothing_an_edit_reaches() -> None:
    tool = ToolMessage(content="42", tool_call_id="c1", id="t1")
    items = [ai_message(), tool, HumanMessage("yo")]
    copied = handout(items)
    assert copied == items and [type(c) for c in copied] == [type(i) for i in items]
    for got, original in zip(copied, items, strict=True):
        assert got.__dict__ == original.__dict__
        assert got.__pydantic_fields_set__ == original.__pydantic_fields_set__
    assert not mutable_ids(copied) & mutable_ids(items)
    vandalize(copied)
    assert items[0] == ai_message()


@pytest.mark.parametrize(
    "value",
    [
        [ai_message(), {"k": [1, "s", None]}, ("t", 1)],
        ("t", [1]),  # a tuple's list is copied with it
        {"s": {1, "a"}, "f": frozenset({2}), "c": Color.RED},
        Note("n", ["a"]),
        Pin("p", [{"x": [1]}]),  # frozen: copied by its instance dict
        Card(title="c", items=[Note("n", [])], meta={"m": [1]}),
        _DeltaSnapshot([Note("n", ["a"])]),
    ],
    ids=["messages", "tuple", "sets", "dataclass", "frozen", "model", "snapshot"],
)
def test_values_a_copy_takes_whole_are_handed_out_sharing_nothing(value: Any) -> None:
    assert copies_whole(value)
    copied = handout(value)
    assert canon(copied) == canon(value) and type(copied) is type(value)
    assert not mutable_ids(copied) & mutable_ids(value)


@pytest.mark.parametrize(
    "value",
    [
        [object()],
        bytearray(b"x"),
        {"b": bytearray(b"x")},
        collections.deque([1]),
        collections.defaultdict(list),
        Box([1]),
        Slotted([1]),
        _Reduced([1]),  # its own way to be copied
        _OwnCopy(name="o"),
        {"n": Note("n", [object()])},
    ],
    ids=[
        "object",
        "bytearray",
        "nested-bytearray",
        "deque",
        "defaultdict",
        "custom",
        "slots",
        "reduce",
        "own-copy",
        "nested-object",
    ],
)
def test_values_a_copy_cannot_take_whole_are_not(value: Any) -> None:
    assert not copies_whole(value)


def test_a_model_with_private_attributes_is_not_copied_whole() -> None:
    private = _WithPrivate(name="p")
    private._cache["x"] = 1
    with pytest.raises(NotWhole):
        handout([{"m": private}])


def test_what_nothing_changes_in_place_is_shared() -> None:
    assert all(map(shareable, ["s", b"b", 1, 2.5, None, True, Color.RED, int, ("a", (1,))]))
    assert not any(map(shareable, [[1], ("a", [1]), bytearray(b"x"), {1}, Note("n", [])]))
    frozen = ("a", (1, frozenset({2})))
    assert handout(frozen) is frozen


@settings(max_examples=150)
@given(any_values(whole=True))
def test_any_value_of_kinds_copied_whole_is_handed_out_whole(value: Any) -> None:
    assert copies_whole(value)
    before = canon(value)
    copied = handout(value)
    assert canon(copied) == before
    assert not mutable_ids(copied) & mutable_ids(value)
    vandalize(copied)
    assert canon(value) == before


@settings(max_examples=150)
@given(any_values())
def test_a_cache_hands_out_only_copies_of_what_it_can_copy_whole(value: Any) -> None:
    cache = DecodedCache(CacheBudget(max_bytes=1 << 24), "seed")
    before = canon(value)
    reference = copy.deepcopy(value)
    kept = cache.keep(("t", "k"), value)
    assert kept == copies_whole(value)
    vandalize(value)  # the keeper edits what it kept
    found = cache.lookup(("t", "k"))
    if not kept:
        assert found is MISSING
        return
    assert canon(found) == before == canon(reference)
    vandalize(found)  # and so does the one who found it
    assert canon(cache.lookup(("t", "k"))) == before


def test_a_value_refused_drops_what_was_kept_for_its_key() -> None:
    cache = DecodedCache(CacheBudget(max_bytes=1 << 20), "write")
    assert cache.keep(("t", "k"), [1])
    assert not cache.keep(("t", "k"), [bytearray(b"x")])
    assert cache.lookup(("t", "k")) is MISSING


def test_a_cache_the_core_only_consults_keeps_values_as_they_are() -> None:
    cache = DecodedCache(CacheBudget(max_bytes=1 << 20), "structure", handed_out=False)
    value = Box([1])
    assert cache.keep(("t", "k"), value)
    assert cache.lookup(("t", "k")) is value

"""The store's ops fed canned rows: what each batch sends, and what it makes of the rows."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from support.ops import drive

from pgcheckpoint.errors import InvalidInputError
from pgcheckpoint.store.batch import prepare_batch, read_op, sweep_op, write_op
from pgcheckpoint.store.filters import compile_filter
from pgcheckpoint.store.plans import list_spec, namespace_range
from pgcheckpoint.store.state import StoreState
from pgcheckpoint.store.values import decode_value, encode_value

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def _run(ops: list[Any], replies: list[Any], state: StoreState | None = None) -> tuple[Any, Any]:
    state = state or StoreState()
    prepared = prepare_batch(state, ops)
    sent, results = drive(read_op(state, prepared, omit_expired=True), replies[:1])
    if prepared.puts:
        writes, _ = drive(write_op(state, prepared), replies[1:])
        sent += writes
    return sent, results


def _row(state: StoreState, ns: tuple[str, ...], key: str, value: dict[str, Any]) -> dict[str, Any]:
    type_, data, doc = encode_value(
        state.codec, ns, key, value, filterable=state.filterable, max_bytes=10**6
    )
    return {
        "ns": ".".join(ns),
        "key": key,
        "type": type_,
        "value": data,
        "doc": json.loads(doc),
        "created_at": NOW,
        "updated_at": NOW,
    }


def test_every_get_of_a_batch_is_one_statement_matched_back_to_its_op() -> None:
    state = StoreState()
    ops = [GetOp(("a", "b"), "k1"), GetOp(("c",), "k2", refresh_ttl=False), GetOp(("a", "b"), "x")]
    sent, results = _run(ops, [[_row(state, ("c",), "k2", {"v": 2})]], state)
    assert [s.name for s in sent] == ["store_get"]
    assert sent[0].params["nss"] == ["a.b", "c", "a.b"]
    assert sent[0].params["refresh"] == [True, False, True]
    assert results[0] is None and results[2] is None
    assert results[1].value == {"v": 2} and results[1].namespace == ("c",)


def test_a_mixed_batch_reads_first_then_writes_puts_and_deletes_in_one_pass() -> None:
    ops = [
        PutOp(("a",), "k", {"v": 1}),
        GetOp(("a",), "k"),
        PutOp(("a",), "gone", None),
        PutOp(("a",), "k", {"v": 2}),  # the last put of a key wins
    ]
    prepared = prepare_batch(StoreState(), ops)
    assert prepared.atomic
    sent, results = drive(read_op(StoreState(), prepared, omit_expired=True), [[]])
    sent += drive(write_op(StoreState(), prepared), [[], []])[0]
    assert [s.name for s in sent] == ["store_get_one", "store_put", "store_drop_tombstones"]
    put = sent[1].params
    assert put["keys"] == ["gone", "k"] and put["types"][0] == "deleted"
    assert json.loads(put["docs"][1]) == {"v": 2}
    assert sent[2].params["keys"] == ["gone"]
    assert results == [None, None, None, None]


def test_a_put_alone_in_its_batch_sends_its_columns_as_parameters() -> None:
    # the last put of a key wins, so two puts of one key are a lone put too
    ops = [PutOp(("a", "b"), "k", {"v": 1}), PutOp(("a", "b"), "k", {"v": 2}, ttl=1.5)]
    sent, _ = drive(write_op(StoreState(), prepare_batch(StoreState(), ops)), [[]])
    assert [s.name for s in sent] == ["store_put_one"]
    params = sent[0].params
    assert (params["ns"], params["key"], params["ttl"]) == ("a.b", "k", 1.5)
    assert json.loads(params["doc"]) == {"v": 2}


def test_a_get_alone_in_its_batch_sends_its_key_as_parameters() -> None:
    state = StoreState()
    row = _row(state, ("a", "b"), "k", {"v": 1})
    sent, results = _run([GetOp(("a", "b"), "k", refresh_ttl=False)], [[row]], state)
    assert [s.name for s in sent] == ["store_get_one"]
    assert (sent[0].params["ns"], sent[0].params["key"]) == ("a.b", "k")
    assert sent[0].params["refresh"] is False and results[0].value == {"v": 1}


def test_a_batch_of_deletes_only_is_one_delete() -> None:
    prepared = prepare_batch(StoreState(), [PutOp(("a",), "k", None), PutOp(("b",), "k", None)])
    sent, _ = drive(write_op(StoreState(), prepared), [[]])
    assert [s.name for s in sent] == ["store_delete"]
    assert not prepare_batch(StoreState(), [PutOp(("a",), "k", None)]).atomic


def test_searches_of_a_batch_are_one_statement_and_pages_go_back_to_their_ops() -> None:
    state = StoreState()
    ops = [SearchOp(("a",), filter={"x": 1}), SearchOp(("b", "c"), limit=2, offset=4)]
    row = {**_row(state, ("a",), "k", {"x": 1}), "i": 0}
    sent, results = _run(ops, [[row]], state)
    assert [s.name for s in sent] == ["store_search"] and sent[0].params["count"] == 2
    specs = json.loads(sent[0].params["specs"])
    assert [s["i"] for s in specs] == [0, 1]
    assert specs[0]["contains"] == {"x": 1} and specs[0]["prefix"] == "a"
    assert specs[1]["prefix"] == "b.c" and (specs[1]["lim"], specs[1]["off"]) == (2, 4)
    assert [i.key for i in results[0]] == ["k"] and results[1] == []


def test_a_search_over_the_whole_store_reads_the_table_in_a_statement_of_its_own() -> None:
    state = StoreState()
    prepared = prepare_batch(state, [SearchOp(()), SearchOp(("a",))])
    sent, results = drive(read_op(state, prepared, omit_expired=True), [[], []])
    assert [s.name for s in sent] == ["store_search_one", "store_search_all_one"]
    assert sent[1].params["prefix"] is None
    assert results == [[], []]


def test_a_lone_search_of_equalities_sends_its_spec_as_parameters() -> None:
    # one search per batch is the usual call: `store_spec` lets its generic plan serve
    state = StoreState()
    op = SearchOp(("a", "b"), filter={"x": 1}, limit=3, offset=1)
    sent, _ = _run([op], [[]], state)
    params = sent[0].params
    assert sent[0].name == "store_search_one" and "specs" not in params
    assert (params["prefix"], params["lim"], params["off"], params["i"]) == ("a.b", 3, 1, 0)
    assert json.loads(params["contains"]) == {"x": 1} and params["conds"] is None
    # a comparison needs the conditions' subplan: the statement of specs, planned each call
    sent, _ = _run([SearchOp(("a",), filter={"n": {"$gt": 2}})], [[]], state)
    assert sent[0].name == "store_search" and sent[0].params["count"] == 1


def test_listings_are_one_statement_and_a_listing_that_cannot_match_sends_nothing() -> None:
    ops = [
        ListNamespacesOp((MatchCondition("prefix", ("a", "*")),), max_depth=2),
        ListNamespacesOp((MatchCondition("prefix", ("a",)), MatchCondition("prefix", ("b",)))),
    ]
    sent, results = _run(ops, [[{"i": 0, "labels": ["a", "x"]}]])
    specs = json.loads(sent[0].params["specs"])
    assert len(specs) == 1 and specs[0]["pre"] == ["a", None] and specs[0]["depth"] == 2
    assert results == [[("a", "x")], []]


@pytest.mark.parametrize(
    "op",
    [
        PutOp((), "k", {"v": 1}),
        PutOp(("a.b",), "k", {"v": 1}),
        GetOp(("a", ""), "k"),
        SearchOp(("x\x00",)),
        ListNamespacesOp((MatchCondition("suffix", ("a.b",)),)),
    ],
)
def test_a_bad_namespace_fails_the_batch_before_any_statement(op: Any) -> None:
    with pytest.raises(InvalidNamespaceError):
        prepare_batch(StoreState(), [PutOp(("ok",), "k", {"v": 1}), op])


@pytest.mark.parametrize(
    "op",
    [
        PutOp(("a",), "k", ["ab", "cd"]),  # type: ignore[arg-type]
        PutOp(("a",), "k", {"v": float("nan")}),
        PutOp(("a",), "k\x00", {"v": 1}),
        PutOp(("a",), "k", {"v": 1}, ttl=-1),
        SearchOp(("a",), filter={"v": {"$gt": [1]}}),
        SearchOp(("a",), filter={"v": {"$regex": "x"}}),
        SearchOp(("a",), limit=-1),
    ],
)
def test_bad_input_fails_the_batch_before_any_statement(op: Any) -> None:
    with pytest.raises(InvalidInputError):
        prepare_batch(StoreState(), [op])


def test_a_huge_value_is_refused() -> None:
    state = StoreState(max_value_bytes=1000)
    with pytest.raises(InvalidInputError, match="max_value_bytes"):
        prepare_batch(state, [PutOp(("a",), "k", {"v": "x" * 2000})])


def test_a_value_reads_back_as_put() -> None:
    state = StoreState()
    value = {"z": 1, "a": "x\x00y", "u": "\u2603", "n": None, "when": NOW}
    row = _row(state, ("a",), "k", value)
    assert row["type"] == "msgpack"  # a datetime: the serializer's bytes
    back = decode_value(state.codec, "a", "k", row["type"], row["value"], row["doc"], sealed=False)
    assert back == value and list(back) == list(value)
    plain = _row(state, ("a",), "k", {"z": 1, "a": "x\x00y", "big": 2**80})
    assert plain["type"] == "json" and plain["doc"]["a"] == "x\ufffdy"
    assert list(decode_value(state.codec, "a", "k", "json", plain["value"], {}, sealed=False)) == [
        "z",
        "a",
        "big",
    ]


def test_namespace_ranges_are_literal() -> None:
    assert namespace_range(("user_1",)) == {"prefix": "user_1", "lo": "user_1.", "hi": "user_1/"}
    assert namespace_range(("a%b", "\\")) == {"prefix": "a%b.\\", "lo": "a%b.\\.", "hi": "a%b.\\/"}


def test_filters_compile_to_typed_conditions() -> None:
    contains, conds = compile_filter(
        {"a": 1, "b": None, "c": {"$ne": 2, "$gte": 1}, "d": [1, {"e": "x"}], "f": {"g": True}},
        None,
    )
    assert contains == {"a": 1, "f": {"g": True}}
    assert {"p": ["b"], "o": "eq", "v": None} in conds
    assert {"p": ["c"], "o": "ne", "v": 2} in conds and {"p": ["c"], "o": "gte", "v": 1} in conds
    assert {"p": ["d"], "o": "array", "v": 2} in conds
    assert {"p": ["d", "1", "e"], "o": "eq", "v": "x"} in conds
    with pytest.raises(InvalidInputError, match="filterable"):
        compile_filter({"secret": 1}, frozenset({"public"}))


def test_several_prefix_conditions_merge_label_by_label() -> None:
    op = ListNamespacesOp(
        (MatchCondition("prefix", ("a", "*", "c")), MatchCondition("prefix", ("*", "b")))
    )
    spec = list_spec(op, 0, omit_expired=True)
    assert spec is not None and spec["pre"] == ["a", "b", "c"] and spec["prefix"] == "a.b.c"
    both = ListNamespacesOp((MatchCondition("suffix", ("x",)), MatchCondition("suffix", ("y",))))
    assert list_spec(both, 0, omit_expired=True) is None


def test_the_sweep_deletes_in_batches_until_one_is_short() -> None:
    sent, total = drive(sweep_op(limit=2), [[{}, {}], [{}]])
    assert [s.name for s in sent] == ["store_sweep", "store_sweep"] and total == 3


def test_in_memory_store_keeps_items_that_lack_the_field_for_ne() -> None:
    # the behaviour the store matches: $ne keeps an item without the field
    memory = InMemoryStore()
    memory.put(("a",), "with", {"x": 1})
    memory.put(("a",), "without", {"y": 1})
    assert {i.key for i in memory.search(("a",), filter={"x": {"$ne": 1}})} == {"without"}
    _, conds = compile_filter({"x": {"$ne": 1}}, None)
    assert conds == [{"p": ["x"], "o": "ne", "v": 1}]

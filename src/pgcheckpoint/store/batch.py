"""The store's ops: a batch of `BaseStore` ops, the TTL sweep, the count of items.

`prepare_batch` checks a batch and encodes its puts (so that bad input fails
before any statement); the driver then embeds `Prepared.texts` and the
queries' texts with no connection held, and runs `read_op`, then `write_op`
(apart: a read's TTL refresh must not hold locks in the writes' transaction),
which yield:
one `store_get` for every get (`store_get_one` for a lone one), one
`store_search` for every search without a query (`store_search_one` for a
lone one of equalities), one `store_search_vector` per search with one, one
`store_list_namespaces` for every listing, then the writes: `store_put` (or
`store_put_vectors`, which replaces the items' vectors; `_one` of each for a
put alone in its batch), or `store_delete`, or
for a batch that does both `store_put` with tombstones and
`store_drop_tombstones` in one transaction (`Prepared.atomic`).

Example:
    >>> from pgcheckpoint.store.state import StoreState
    >>> from langgraph.store.base import GetOp
    >>> prepared = prepare_batch(StoreState(), [GetOp(("a",), "k")])
    >>> next(read_op(StoreState(), prepared, omit_expired=True)).name
    'store_get_one'
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from langgraph.store.base import Item, Op, Result, SearchItem, SearchOp

from ..errors import InvalidInputError
from ..ops import Op as StoreOp
from ..ops import Row, Stmt
from ..statements.arrays import ByteaArray, Float8Array, TextArray
from .plans import (
    BatchPlan,
    list_spec,
    namespace_labels,
    namespace_range,
    namespace_text,
    plan_ops,
    search_spec,
)
from .state import StoreState
from .values import StoredValue, decode_value, encode_value

__all__ = [
    "SWEEP_BATCH",
    "Prepared",
    "count_op",
    "prepare_batch",
    "read_op",
    "sweep_op",
    "sweep_page_op",
    "write_op",
]

# Expired items one sweep statement deletes.
SWEEP_BATCH = 1000


@dataclass
class Prepared:
    """A checked batch, its puts encoded: what the driver embeds for, then runs.

    Attributes:
        plan: The batch's ops, grouped.
        puts: (namespace text, key, stored value or None for a delete, TTL) per put.
        texts: (put's position in `puts`, field, text) of each text to embed.
        vectors: The embeddings of `texts` as vector literals, once embedded.
        query_vectors: The embedding of each search's query, by position.

    Example:
        >>> Prepared(BatchPlan()).atomic
        False
    """

    plan: BatchPlan
    puts: list[tuple[str, str, StoredValue | None, float | None]] = field(default_factory=list)
    texts: list[tuple[int, str, str]] = field(default_factory=list)
    vectors: list[str] = field(default_factory=list)
    query_vectors: dict[int, str] = field(default_factory=dict)

    @property
    def atomic(self) -> bool:
        """Whether the writes need one transaction (a batch that puts and deletes)."""
        return self.plan.mixed

    @property
    def reads(self) -> bool:
        """Whether the batch reads anything."""
        plan = self.plan
        return bool(plan.gets or plan.searches or plan.queries or plan.lists)


def _check_ttl(ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < 1e9:
        raise InvalidInputError(f"ttl must be a positive number of minutes, or None, not {ttl!r}")
    return float(ttl)


def prepare_batch(state: StoreState, ops: Iterable[Op]) -> Prepared:
    """Check a batch and encode its puts; raises before anything is sent.

    Example:
        >>> from langgraph.store.base import PutOp
        >>> prepare_batch(StoreState(), [PutOp(("a",), "k", {"v": 1})]).puts[0][:2]
        ('a', 'k')
    """
    plan = plan_ops(ops, vector_search=state.index is not None)
    prepared = Prepared(plan)
    for (ns, key), op in plan.puts.items():
        ns_text = namespace_text(ns)
        if op.value is None:
            prepared.puts.append((ns_text, key, None, None))
            continue
        stored = encode_value(
            state.codec,
            ns,
            key,
            op.value,
            filterable=state.filterable,
            max_bytes=state.max_value_bytes,
        )
        prepared.puts.append((ns_text, key, stored, _check_ttl(op.ttl)))
        if state.index is not None:
            position = len(prepared.puts) - 1
            prepared.texts.extend((position, f, t) for f, t in state.index.texts(op))
    # check every search's spec now too, so a bad filter fails before any statement
    for position, search in [*plan.searches, *plan.queries]:
        search_spec(search, position, omit_expired=True, filterable=state.filterable)
    for position, listing in plan.lists:
        list_spec(listing, position, omit_expired=True)
    return prepared


def _item(state: StoreState, row: Row, cls: type[Item] = Item, **extra: Any) -> Any:
    value = decode_value(
        state.codec,
        row["ns"],
        row["key"],
        row["type"],
        row["value"],
        row["doc"],
        sealed=state.sealed,
        deserializer=state.deserializer,
    )
    return cls(
        namespace=namespace_labels(row["ns"]),
        key=row["key"],
        value=value,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        **extra,
    )


def _key_params(keys: list[tuple[str, str]]) -> dict[str, TextArray]:
    return {"nss": TextArray([k[0] for k in keys]), "keys": TextArray([k[1] for k in keys])}


def _put_one_params(prepared: Prepared) -> dict[str, Any]:
    # a lone put that is a delete runs store_delete, so `stored` is a value
    ns, key, stored, ttl = prepared.puts[0]
    type_, value, doc = cast(StoredValue, stored)
    return {"ns": ns, "key": key, "type": type_, "value": value, "doc": doc, "ttl": ttl}


def _put_params(prepared: Prepared) -> dict[str, list[Any]]:
    deleted: StoredValue = ("deleted", b"", "{}")
    rows = [(ns, key, stored or deleted, ttl) for ns, key, stored, ttl in prepared.puts]
    return {
        "nss": TextArray([r[0] for r in rows]),
        "keys": TextArray([r[1] for r in rows]),
        "types": TextArray([r[2][0] for r in rows]),
        "values": ByteaArray([r[2][1] for r in rows]),
        "docs": TextArray([r[2][2] for r in rows]),
        "ttls": Float8Array([r[3] for r in rows]),
    }


def _by_scope(
    searches: list[tuple[int, SearchOp]], name: str
) -> list[tuple[str, list[tuple[int, SearchOp]]]]:
    # searches under a prefix read a range of the key; those over () the table
    ranged = [(i, op) for i, op in searches if op.namespace_prefix]
    whole = [(i, op) for i, op in searches if not op.namespace_prefix]
    return [(n, g) for n, g in ((name, ranged), (name + "_all", whole)) if g]


def _spec_params(state: StoreState, spec: dict[str, Any]) -> dict[str, Any]:
    # one search's spec as the parameters of `store_spec`: its JSON fields as text
    return {
        **spec,
        "contains": None if spec["contains"] is None else json.dumps(spec["contains"]),
        "conds": None if spec["conds"] is None else json.dumps(spec["conds"]),
        "sealed": state.sealed,
    }


def write_op(state: StoreState, prepared: Prepared) -> StoreOp[None]:
    """A prepared batch's puts and deletes, each item locked once, in key order.

    Example:
        >>> from langgraph.store.base import PutOp
        >>> prepared = prepare_batch(StoreState(), [PutOp(("a",), "k", None)])
        >>> next(write_op(StoreState(), prepared)).name
        'store_delete'
    """
    puts = prepared.puts
    deletes = [(ns, key) for ns, key, stored, _ in puts if stored is None]
    if len(deletes) == len(puts):
        yield Stmt("store_delete", _key_params(deletes))
        return
    one = len(puts) == 1  # a put alone in its batch: its columns as parameters
    params = _put_one_params(prepared) if one else _put_params(prepared)
    suffix = "_one" if one else ""
    if state.index is None:
        yield Stmt(f"store_put{suffix}", params)
    else:
        texts = prepared.texts
        if not one:
            params["v_nss"] = [puts[p][0] for p, _, _ in texts]
            params["v_keys"] = [puts[p][1] for p, _, _ in texts]
        params["v_fields"] = [f for _, f, _ in texts]
        params["v_embeddings"] = prepared.vectors
        yield Stmt(f"store_put_vectors{suffix}", params)
    if deletes:
        yield Stmt(
            "store_drop_tombstones",
            _key_params(deletes),
        )


def read_op(state: StoreState, prepared: Prepared, *, omit_expired: bool) -> StoreOp[list[Result]]:
    """A prepared batch's reads: one result per op, in order (None for each put).

    Run apart from `write_op`, never in its transaction: the TTL refreshes of
    reads lock rows in no particular order, which the writes' transaction would
    then hold while it waits for others, in a circle.

    Example:
        >>> from langgraph.store.base import GetOp
        >>> op = read_op(StoreState(), prepare_batch(StoreState(), [GetOp(("a",), "k")]),
        ...              omit_expired=True)
        >>> next(op).params["key"]
        'k'
    """
    plan = prepared.plan
    results: list[Result] = [None] * plan.size
    if plan.gets:
        keys = [(namespace_text(op.namespace), op.key) for _, op in plan.gets]
        refresh = [bool(op.refresh_ttl) for _, op in plan.gets]
        params: dict[str, Any] = {"omit_expired": omit_expired, "sealed": state.sealed}
        if len(keys) == 1:  # a get alone: its key as parameters (`store_get_one`)
            name = "store_get_one"
            params.update(ns=keys[0][0], key=keys[0][1], refresh=refresh[0])
        else:
            name = "store_get"
            params.update(_key_params(keys), refresh=refresh)
        rows = yield Stmt(name, params, fetch=True)
        found = {(r["ns"], r["key"]): r for r in rows}
        for position, op in plan.gets:
            row = found.get((namespace_text(op.namespace), op.key))
            results[position] = _item(state, row) if row is not None else None
    if plan.searches:
        pages: dict[int, list[SearchItem]] = {i: [] for i, _ in plan.searches}
        for name, group in _by_scope(plan.searches, "store_search"):
            specs = [
                search_spec(op, i, omit_expired=omit_expired, filterable=state.filterable)
                for i, op in group
            ]
            if len(specs) == 1 and specs[0]["conds"] is None:  # its generic plan serves
                name, params = f"{name}_one", _spec_params(state, specs[0])
            else:
                params = {"specs": json.dumps(specs), "count": len(specs), "sealed": state.sealed}
            for row in (yield Stmt(name, params, fetch=True)):
                pages[row["i"]].append(_item(state, row, SearchItem))
        for i, page in pages.items():
            results[i] = page
    for i, query in plan.queries:
        spec = search_spec(query, i, omit_expired=omit_expired, filterable=state.filterable)
        rows = yield Stmt(
            "store_search_vector" if query.namespace_prefix else "store_search_vector_all",
            {
                **_spec_params(state, spec),
                "query": prepared.query_vectors[i],
                "distance": state.index.distance if state.index else "cosine",
            },
            fetch=True,
        )
        results[i] = [
            _item(state, r, SearchItem, score=None if r["score"] is None else float(r["score"]))
            for r in rows
        ]
    if plan.lists:
        listed: dict[int, list[tuple[str, ...]]] = {i: [] for i, _ in plan.lists}
        specs_or_none = [(i, list_spec(op, i, omit_expired=omit_expired)) for i, op in plan.lists]
        specs = [s for _, s in specs_or_none if s is not None]
        if specs:
            params = {"specs": json.dumps(specs), "count": len(specs)}
            rows = yield Stmt("store_list_namespaces", params, fetch=True)
            for row in rows:
                listed[row["i"]].append(tuple(row["labels"]))
        for i, names in listed.items():
            results[i] = names
    return results


def sweep_page_op(limit: int = SWEEP_BATCH) -> StoreOp[int]:
    """Delete up to `limit` expired items, in one statement; how many went.

    Fewer than `limit` means none is left (but those a writer held). A sweep
    that commits each page on its own (`pgcheckpoint prune`) runs this.

    Example:
        >>> next(sweep_page_op()).params
        {'limit': 1000}
    """
    rows = yield Stmt("store_sweep", {"limit": limit}, count=True)
    return len(rows)


def sweep_op(limit: int = SWEEP_BATCH) -> StoreOp[int]:
    """Delete every expired item, `limit` per statement; how many went.

    Example:
        >>> next(sweep_op()).name
        'store_sweep'
    """
    total = 0
    while True:
        swept = yield from sweep_page_op(limit)
        total += swept
        if swept < limit:
            return total


def count_op(prefix: tuple[str, ...]) -> StoreOp[dict[str, int]]:
    """How many items a namespace prefix holds, and how many of them have expired.

    Example:
        >>> next(count_op(("users",))).params["prefix"]
        'users'
    """
    rows = yield Stmt("store_count", namespace_range(prefix), fetch=True)
    return {"items": int(rows[0]["items"]), "expired": int(rows[0]["expired"])}

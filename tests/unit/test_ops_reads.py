"""`get_tuple_op` and `list_op` fed the rows the server would send, without a database.

The rows are made the way the statements make them: from what `put_op` and
`put_writes_op` sent (`sql/queries/reads.sql` and `_fragments.sql` say which
columns come back, and in which order).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config
from langgraph.checkpoint.serde.types import TASKS
from psycopg.types.json import Jsonb
from support.ops import drive, pieces_of, put, put_writes, saved_writes

from pgcheckpoint import DecryptionError, EncryptedSerde, InvalidInputError, UnreadableValueError
from pgcheckpoint.core.delta_history import delta_history_op
from pgcheckpoint.core.reads import decode_listed, get_tuple_op, list_op
from pgcheckpoint.core.rows import MAX_CHAIN_DEPTH
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.ops import Row, Stmt

MESSAGES = [f"message {i}: " + "x" * 30 for i in range(20)]  # a list worth a delta
SERDES = {"plain": None, "encrypted": EncryptedSerde(keys={"k1": bytes(range(32))})}


def listed_row(put: Stmt, writes: Sequence[Stmt] = ()) -> Row:
    """A row of `list_checkpoints`: the checkpoint `put` stored, with `writes` against it,
    ordered as `ordered_writes` orders them (task_path, task_id, idx)."""
    p = put.params
    saved = sorted(
        (w.params["task_path"], w.params["task_id"], idx, channel, type_, data)
        for w in writes
        for idx, channel, type_, data in saved_writes(w)
    )
    columns = ("write_task_ids", "write_idxs", "write_channels", "write_types", "write_values")
    # the columns `sealed_columns` adds when the saver encrypts (it seals its rows)
    sealed = p["sealed_parent_id"] is not None
    return {
        "thread_id": p["thread_id"],
        "checkpoint_ns": p["checkpoint_ns"],
        "checkpoint_id": p["checkpoint_id"],
        "parent_checkpoint_id": p["parent_checkpoint_id"],
        "type": p["type"],
        "checkpoint": p["checkpoint"],
        "channel_versions": p["channel_versions"].obj,
        "metadata_type": p["metadata_type"],
        "metadata_blob": p["metadata_blob"],
        # array_agg over no rows is NULL
        **{
            column: [w[i] for w in saved] or None
            for column, i in zip(columns, (1, 2, 3, 4, 5), strict=True)
        },
        "write_task_paths": ([w[0] for w in saved] or None) if sealed else None,
        "sealed_parent_id": p["sealed_parent_id"],
        "sealed_inline_channels": list(p["inline_channels"]) if sealed else None,
        "sealed_metadata": p["metadata"].obj if sealed else None,
        "sealed_parent_exists": None,
    }


def tuple_row(put: Stmt, stored: Sequence[Stmt], writes: Sequence[Stmt] = ()) -> Row:
    """A row of `checkpoint_tuple_from`: `listed_row` with the checkpoint's values,
    per channel (sorted) the chain of pieces from `stored`, the full value first."""
    row = listed_row(put, writes)
    by_key = {(b["channel"], b["version"]): b for b in pieces_of(stored)}
    chains = []
    for channel in sorted(row["channel_versions"]):
        chain, at = [], row["channel_versions"][channel]
        while (channel, at) in by_key:
            chain.append(by_key[(channel, at)])
            at = by_key[(channel, at)]["base_version"]
        chains.extend(reversed(chain))
    for column, key in [
        ("blob_channels", "channel"),
        ("blob_versions", "version"),
        ("blob_bases", "base_version"),
        ("blob_types", "type"),
        ("blob_values", "blob"),
    ]:
        row[column] = [b[key] for b in chains] or None
    return row


def value_rows(stored: Sequence[Stmt], alive: Sequence[Stmt]) -> list[Row]:
    """What `listed_values` returns: each piece once ('v'), and each listed checkpoint
    that still exists ('c')."""
    values = [{"kind": "v", "checkpoint_id": None, **b} for b in pieces_of(stored)]
    checkpoints = [
        {
            "kind": "c",
            "thread_id": p.params["thread_id"],
            "checkpoint_ns": p.params["checkpoint_ns"],
            "checkpoint_id": p.params["checkpoint_id"],
            **dict.fromkeys(("channel", "version", "base_version", "type", "blob")),
        }
        for p in alive
    ]
    return values + checkpoints


def a_chat(core: SaverState) -> tuple[Stmt, Stmt]:
    """Two checkpoints of thread `t` in the current format: a list, then the list grown
    (stored as a delta)."""
    first = put(core, "t", {"title": "chat", "messages": MESSAGES}, v=4)
    second = put(core, "t", {"title": "chat", "messages": [*MESSAGES, "new"]}, parent=first, v=4)
    assert second.params["blob_bases"] == [first.params["blob_versions"][0]]
    return first, second


# -- get_tuple_op -------------------------------------------------------------------


def test_get_tuple_reads_the_latest_or_the_named_checkpoint() -> None:
    core = SaverState()
    sent, found = drive(get_tuple_op(core, generate_config("t", checkpoint_ns="ns")), [[]])
    assert [(s.name, dict(s.params)) for s in sent] == [
        ("get_latest_checkpoint", {"thread_id": "t", "checkpoint_ns": "ns"})
    ]
    assert found is None
    sent, found = drive(get_tuple_op(core, generate_config("t", checkpoint_id="c9")), [[]])
    assert [(s.name, dict(s.params)) for s in sent] == [
        ("get_checkpoint_by_id", {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c9"})
    ]
    assert found is None


@pytest.mark.parametrize("serde", sorted(SERDES))
def test_get_tuple_decodes_its_row_into_what_was_saved(serde: str) -> None:
    core = SaverState(serde=SERDES[serde])
    first, second = a_chat(core)
    writes = [
        put_writes(core, second, [("x", 1), ("y", {"deep": [2]})], "task-b"),
        put_writes(core, second, [("__error__", "boom")], "task-a"),
    ]
    row = tuple_row(second, [first, second], writes)
    config = generate_config("t", checkpoint_id=second.params["checkpoint_id"])
    _, tup = drive(get_tuple_op(SaverState(serde=SERDES[serde]), config), [[row]])

    assert tup.config == {
        "configurable": {
            "thread_id": "t",
            "checkpoint_ns": "",
            "checkpoint_id": second.params["checkpoint_id"],
        }
    }
    assert tup.parent_config == {
        "configurable": {
            "thread_id": "t",
            "checkpoint_ns": "",
            "checkpoint_id": first.params["checkpoint_id"],
        }
    }
    assert tup.checkpoint["id"] == second.params["checkpoint_id"]
    assert tup.checkpoint["channel_values"] == {"title": "chat", "messages": [*MESSAGES, "new"]}
    assert tup.checkpoint["channel_versions"] == second.params["channel_versions"].obj
    assert (tup.metadata["source"], tup.metadata["step"]) == ("loop", 2)
    # in the statement's order: task_path, then task_id, then idx
    assert tup.pending_writes == [
        ("task-a", "__error__", "boom"),
        ("task-b", "x", 1),
        ("task-b", "y", {"deep": [2]}),
    ]


def test_get_tuple_of_a_checkpoint_without_values_or_writes() -> None:
    core = SaverState()
    only = put(core, "t", {"count": 1})
    row = tuple_row(only, [only])
    assert row["blob_channels"] is None and row["write_task_ids"] is None
    _, tup = drive(get_tuple_op(core, generate_config("t")), [[row]])
    assert tup.checkpoint["channel_values"] == {"count": 1}
    assert (tup.parent_config, tup.pending_writes) == (None, [])


def test_a_channel_stored_empty_has_no_value() -> None:
    core = SaverState()
    at = put(core, "t", {"messages": ["a"]})
    row = tuple_row(at, [at])
    row.update(
        blob_channels=["gone", *row["blob_channels"]],
        blob_versions=["1", *row["blob_versions"]],
        blob_bases=[None, *row["blob_bases"]],
        blob_types=["empty", *row["blob_types"]],
        blob_values=[None, *row["blob_values"]],
    )
    _, tup = drive(get_tuple_op(core, generate_config("t")), [[row]])
    assert tup.checkpoint["channel_values"] == {"messages": ["a"]}


def test_each_encrypted_value_opens_only_at_its_own_row() -> None:
    core = SaverState(serde=SERDES["encrypted"])
    at = put(core, "t", {"messages": ["a"]})
    row = tuple_row(at, [at], [put_writes(core, at, [("x", 1), ("y", 2)], "task")])
    row["write_idxs"] = row["write_idxs"][::-1]  # each write now claims the other's place
    with pytest.raises(DecryptionError):
        drive(get_tuple_op(core, generate_config("t")), [[row]])


# -- list_op ------------------------------------------------------------------------


def test_list_of_one_thread_reads_a_page_then_its_values_once() -> None:
    core = SaverState()
    first, second = a_chat(core)
    page = [listed_row(second), listed_row(first)]
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    sent, (kept, recheck) = drive(
        list_op(core, config, limit=5), [page, value_rows([first, second], [first, second])]
    )

    assert [s.name for s in sent] == ["list_thread_checkpoints", "listed_values"]
    assert dict(sent[0].params) == {
        "thread_id": "t",
        "checkpoint_ns": "",
        "checkpoint_id": None,
        "before": None,
        "filter": None,
        "limit": 5,
    }
    keys = sent[1].params
    assert (list(keys["thread_ids"]), list(keys["checkpoint_nss"])) == (["t", "t"], ["", ""])
    assert list(keys["checkpoint_ids"]) == [
        second.params["checkpoint_id"],
        first.params["checkpoint_id"],
    ]
    assert keys["max_depth"] == MAX_CHAIN_DEPTH
    assert recheck is None
    assert kept == page  # the same rows, given their values
    assert kept[0]["blob_versions"] == [
        first.params["blob_versions"][0],  # the full list first,
        second.params["blob_versions"][0],  # then the delta on it
    ]
    listed = list(decode_listed(core, kept, None, None))
    assert [t.checkpoint["channel_values"]["messages"] for t in listed] == [
        [*MESSAGES, "new"],
        MESSAGES,
    ]
    assert [t.checkpoint["channel_values"]["title"] for t in listed] == ["chat", "chat"]


def test_a_checkpoint_deleted_before_its_values_were_read_is_left_out() -> None:
    core = SaverState()
    first, second = a_chat(core)
    other = put(core, "u", {"messages": ["elsewhere"]})
    page = [listed_row(other), listed_row(second), listed_row(first)]
    # the second statement finds `second` gone (a prune ran between the two)
    gone = value_rows([first, other], [first, other])
    sent, (kept, _) = drive(list_op(core, None), [page, gone])
    assert [s.name for s in sent] == ["list_checkpoints", "listed_values"]
    assert list(sent[1].params["thread_ids"]) == ["u", "t", "t"]
    assert [r["checkpoint_id"] for r in kept] == [
        other.params["checkpoint_id"],
        first.params["checkpoint_id"],
    ]
    listed = list(decode_listed(core, kept, None, None))
    assert [t.checkpoint["channel_values"]["messages"] for t in listed] == [
        ["elsewhere"],
        MESSAGES,
    ]


def test_an_empty_page_needs_no_second_statement() -> None:
    sent, result = drive(list_op(SaverState(), {"configurable": {"thread_id": "t"}}), [[]])
    assert [s.name for s in sent] == ["list_thread_every_namespace"]  # no namespace given
    assert result == ([], None)


def test_before_is_a_config_or_the_checkpoint_the_agent_server_passes() -> None:
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    # the Agent Server's history call: its API's checkpoint, no `configurable`
    served = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c5", "checkpoint_map": {}}
    for before in (generate_config("t", checkpoint_id="c5"), served):
        sent, _ = drive(list_op(SaverState(), config, before=before), [[]])
        assert sent[0].params["before"] == "c5"
    for no_id in ({"configurable": {"thread_id": "t"}}, {"thread_id": "t"}, {}, None):
        sent, _ = drive(list_op(SaverState(), config, before=no_id), [[]])
        assert sent[0].params["before"] is None
    with pytest.raises(InvalidInputError, match="checkpoint_id"):
        drive(list_op(SaverState(), config, before={"checkpoint_id": ["c5"]}), [[]])


def test_list_filters_go_to_the_statement_and_what_jsonb_cannot_hold_is_rechecked() -> None:
    before = generate_config("t", checkpoint_id="c5")
    sent, _ = drive(
        list_op(SaverState(), None, filter={"source": "loop"}, before=before, limit=2), [[]]
    )
    params = sent[0].params
    assert (params["before"], params["limit"]) == ("c5", 2)
    assert isinstance(params["filter"], Jsonb) and params["filter"].obj == {"source": "loop"}

    lossy = {"note": "a\x00b"}  # JSONB holds no NUL: the page cannot be limited in SQL
    sent, (_, recheck) = drive(list_op(SaverState(), None, filter=lossy, limit=2), [[]])
    assert sent[0].params["limit"] is None
    assert sent[0].params["filter"].obj == {"note": "a\ufffdb"}
    assert recheck == lossy


# -- checkpoints older than format v4 -------------------------------------------------


def a_step_with_sends(core: SaverState, v: int) -> tuple[Stmt, list[Stmt], Stmt]:
    """Thread `t`: a checkpoint whose tasks sent three packets (and wrote something
    else), then its child in format `v`."""
    first = put(core, "t", {"count": 1}, v=v)
    writes = [
        put_writes(core, first, [(TASKS, {"send": 2}), (TASKS, {"send": 3})], "task-b"),
        put_writes(core, first, [(TASKS, {"send": 1}), ("count", 5)], "task-a"),
    ]
    second = put(core, "t", {"count": 2}, parent=first, v=v)
    return first, writes, second


# in writes_sort_key order: task_path, task_id, idx
SENT = [{"send": 1}, {"send": 2}, {"send": 3}]


def sends_rows(at: Stmt, writes: Sequence[Stmt]) -> list[Row]:
    """What `parent_sends` returns for checkpoint `at` holding `writes`."""
    rows = [
        {
            "thread_id": at.params["thread_id"],
            "checkpoint_ns": at.params["checkpoint_ns"],
            "checkpoint_id": at.params["checkpoint_id"],
            "task_id": w.params["task_id"],
            "task_path": w.params["task_path"],
            "idx": idx,
            "channel": channel,
            "type": type_,
            "blob": data,
        }
        for w in writes
        for idx, channel, type_, data in saved_writes(w)
        if channel == TASKS
    ]
    return sorted(rows, key=lambda r: (r["task_path"], r["task_id"], r["idx"]))


@pytest.mark.parametrize("serde", sorted(SERDES))
def test_a_pre_v4_checkpoint_gets_its_parents_sends_in_one_more_statement(serde: str) -> None:
    core = SaverState(serde=SERDES[serde])
    first, writes, second = a_step_with_sends(core, v=1)
    config = generate_config("t", checkpoint_id=second.params["checkpoint_id"])
    sent, tup = drive(
        get_tuple_op(core, config), [[tuple_row(second, [])], sends_rows(first, writes)]
    )
    assert [s.name for s in sent][1:] == ["parent_sends"]
    assert {k: list(v) for k, v in sent[1].params.items()} == {
        "thread_ids": ["t"],
        "checkpoint_nss": [""],
        "checkpoint_ids": [first.params["checkpoint_id"]],
    }
    assert tup.checkpoint["channel_values"] == {"count": 2, TASKS: SENT}
    # the channel gets the newest of the checkpoint's versions, as the official saver gives it
    versions = second.params["channel_versions"].obj
    assert tup.checkpoint["channel_versions"] == {**versions, TASKS: max(versions.values())}
    # a read decodes them anew: editing one changes no later read
    tup.checkpoint["channel_values"][TASKS][0]["send"] = "edited"
    _, again = drive(
        get_tuple_op(core, config), [[tuple_row(second, [])], sends_rows(first, writes)]
    )
    assert again.checkpoint["channel_values"][TASKS] == SENT


def test_a_sealed_write_relabelled_as_a_send_is_refused() -> None:
    core = SaverState(serde=SERDES["encrypted"])
    first, writes, second = a_step_with_sends(core, v=1)
    config = generate_config("t", checkpoint_id=second.params["checkpoint_id"])
    forged = [
        {
            **sends_rows(first, writes)[0],
            "task_id": "task-a",
            "idx": 1,
            "type": writes[1].params["types"][1],
            "blob": writes[1].params["blobs"][1],
        }
    ]
    with pytest.raises(DecryptionError, match="channel"):
        drive(get_tuple_op(core, config), [[tuple_row(second, [])], forged])


def test_a_checkpoint_of_format_v4_or_without_parent_or_sends_reads_as_it_is() -> None:
    core = SaverState()
    _, _, second = a_step_with_sends(core, v=4)
    config = generate_config("t", checkpoint_id=second.params["checkpoint_id"])
    sent, tup = drive(get_tuple_op(core, config), [[tuple_row(second, [])]])
    assert [s.name for s in sent] == ["get_checkpoint_by_id"]
    assert tup.checkpoint["channel_values"] == {"count": 2}
    root = put(core, "t", {"count": 1}, v=1)
    sent, _ = drive(get_tuple_op(core, config), [[tuple_row(root, [])]])
    assert [s.name for s in sent] == ["get_checkpoint_by_id"]
    # a parent that sent nothing: the checkpoint keeps its versions
    _, _, second = a_step_with_sends(core, v=1)
    sent, tup = drive(get_tuple_op(core, config), [[tuple_row(second, [])], []])
    assert [s.name for s in sent][1:] == ["parent_sends"]
    assert tup.checkpoint["channel_versions"] == second.params["channel_versions"].obj


def test_a_listing_takes_the_sends_of_a_listed_parent_from_its_row() -> None:
    core = SaverState()
    first, writes, second = a_step_with_sends(core, v=1)
    page = [listed_row(second), listed_row(first, writes)]
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    sent, (kept, _) = drive(list_op(core, config), [page, value_rows([], [first, second])])
    assert [s.name for s in sent] == ["list_thread_checkpoints", "listed_values"]
    child, parent = decode_listed(core, kept, None, None)
    assert child.checkpoint["channel_values"] == {"count": 2, TASKS: SENT}
    assert TASKS not in parent.checkpoint["channel_values"]
    # the parent's own pending writes are decoded apart from the child's sends
    sends = [w for _, channel, w in parent.pending_writes if channel == TASKS]
    assert sends == [{"send": 1}, {"send": 2}, {"send": 3}]
    assert not any(a is b for a in sends for b in child.checkpoint["channel_values"][TASKS])


def test_a_listing_reads_the_sends_of_parents_it_does_not_hold_in_one_statement() -> None:
    core = SaverState()
    first, writes, second = a_step_with_sends(core, v=1)
    # a fork: two children of one parent, which the page does not hold
    fork = put(core, "t", {"count": 3}, parent=first, v=1)
    page = [listed_row(fork), listed_row(second)]
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    sent, (kept, _) = drive(
        list_op(core, config, limit=2),
        [page, value_rows([], [fork, second]), sends_rows(first, writes)],
    )
    assert [s.name for s in sent] == ["list_thread_checkpoints", "listed_values", "parent_sends"]
    assert list(sent[2].params["checkpoint_ids"]) == [first.params["checkpoint_id"]]
    a, b = decode_listed(core, kept, None, None)
    assert a.checkpoint["channel_values"][TASKS] == b.checkpoint["channel_values"][TASKS] == SENT
    assert a.checkpoint["channel_values"][TASKS][0] is not b.checkpoint["channel_values"][TASKS][0]
    # current checkpoints whose parent is not listed: no more statements
    _, _, current = a_step_with_sends(core, v=4)
    sent, (kept, _) = drive(
        list_op(core, config, limit=1), [[listed_row(current)], value_rows([], [current])]
    )
    assert [s.name for s in sent] == ["list_thread_checkpoints", "listed_values"]
    (tup,) = decode_listed(core, kept, None, None)
    assert tup.checkpoint["channel_values"] == {"count": 2}


def test_an_unreadable_record_of_a_listing_raises_at_its_turn() -> None:
    core = SaverState()
    first, second = a_chat(core)
    _, _, legacy = a_step_with_sends(core, v=1)
    broken = listed_row(legacy)
    broken["checkpoint"] = b"\xc1"  # no msgpack
    page = [listed_row(second), listed_row(first), broken]
    sent, (kept, _) = drive(
        list_op(core, None), [page, value_rows([first, second], [first, second, legacy])]
    )
    assert [s.name for s in sent] == ["list_checkpoints", "listed_values"]
    listed = decode_listed(core, kept, None, None)
    assert next(listed).checkpoint["id"] == second.params["checkpoint_id"]
    assert next(listed).checkpoint["id"] == first.params["checkpoint_id"]
    with pytest.raises(UnreadableValueError):
        next(listed)


# -- delta_history_op ---------------------------------------------------------------


@pytest.mark.parametrize("checkpoint_id", [None, ""])
def test_delta_history_without_a_checkpoint_id_reads_from_the_latest(
    checkpoint_id: str | None,
) -> None:
    # `""` means the latest checkpoint, as get_tuple reads it and the official saver does
    config = generate_config("t")
    config["configurable"]["checkpoint_id"] = checkpoint_id
    sent, history = drive(delta_history_op(SaverState(), config, ["messages"]), [[]])
    assert [s.name for s in sent] == ["get_latest_checkpoint"]
    assert history == {"messages": {"writes": []}}

"""The thread view's ops fed the rows the server would send, without a database.

The rows are made the way `sql/queries/threadview.sql` makes them, from what
`put_op` and `put_writes_op` sent: `facts_row` is one row of the
`inspect_checkpoint_facts` fragment (a checkpoint, its parent's record, what
changed, the writes against it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config, generate_metadata
from langgraph.types import Interrupt
from psycopg.types.json import Jsonb
from support.checkpoints import with_values
from support.ops import drive, put_writes, saved_writes

from pgcheckpoint import DecryptionError, EncryptedSerde, InvalidInputError
from pgcheckpoint.core.locks import thread_lock_key
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.core.writes import put_op
from pgcheckpoint.ops import Row, Stmt
from pgcheckpoint.threadview import search as search_module
from pgcheckpoint.threadview.model import SEALED, Unreadable
from pgcheckpoint.threadview.ops import (
    UNREADABLE_METADATA,
    checkpoint_values_op,
    node_from_row,
    recent_threads_op,
    resolve_checkpoint_op,
    thread_page_op,
)
from pgcheckpoint.threadview.render import (
    STANDBY_LOCKS,
    node_details,
    page_json,
    page_lines,
    thread_json,
)
from pgcheckpoint.threadview.search import sealed_search_op
from pgcheckpoint.threadview.triggers import classify

KEY = {"k1": bytes(range(32))}
# The replies of a primary where no session holds a thread's lock.
NO_LOCKS: list[list[Row]] = [[{"in_recovery": False}], []]
SAVED_AT = dt.datetime(2026, 12, 3, 9, 30, tzinfo=dt.UTC)


def saved(
    core: SaverState,
    thread_id: str,
    values: dict[str, Any],
    *,
    parent: Stmt | None = None,
    seen: dict[str, dict[str, str]] | None = None,
    ns: str = "",
    metadata: dict[str, Any] | None = None,
) -> Stmt:
    """The put_checkpoint statement of a checkpoint holding `values`, whose nodes saw `seen`."""
    config = generate_config(thread_id, checkpoint_ns=ns)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent.params["checkpoint_id"]
    checkpoint, versions = with_values(values, versions_seen=seen or {})
    sent, _ = drive(
        put_op(core, config, checkpoint, metadata or generate_metadata(step=1), versions),
        [[{"stored": True}]],
    )
    return sent[0]


def facts_row(put: Stmt, parent: Stmt | None = None, writes: Sequence[Stmt] = ()) -> Row:
    """A row of `inspect_checkpoint_facts` for the checkpoint `put` stored."""
    p = put.params
    sealed = p["sealed_parent_id"] is not None
    channels = sorted(p["channel_versions"].obj)
    stored = dict(zip(p["blob_channels"], p["blob_values"], strict=True))
    before = parent.params["channel_versions"].obj if parent is not None else {}
    changed = [ch for ch in channels if before.get(ch) != p["channel_versions"].obj[ch]]
    special = sorted(
        (w.params["task_path"], w.params["task_id"], idx, channel, type_, data)
        for w in writes
        for idx, channel, type_, data in saved_writes(w)
    )
    return {
        "thread_id": p["thread_id"],
        "checkpoint_ns": p["checkpoint_ns"],
        "checkpoint_id": p["checkpoint_id"],
        "parent_checkpoint_id": p["parent_checkpoint_id"],
        "run_id": p["run_id"],
        "created_at": SAVED_AT,
        "type": p["type"],
        "checkpoint": p["checkpoint"],
        "channel_versions": p["channel_versions"].obj,
        "metadata_type": p["metadata_type"],
        "metadata_blob": p["metadata_blob"],
        "metadata": p["metadata"].obj,
        "sealed_parent_id": p["sealed_parent_id"],
        "sealed_inline_channels": list(p["inline_channels"]) if sealed else None,
        "sealed_metadata": p["metadata"].obj if sealed else None,
        "sealed_parent_exists": None,
        "record_bytes": len(p["checkpoint"]) + len(p["metadata_blob"]),
        "parent_type": parent.params["type"] if parent is not None else None,
        "parent_checkpoint": parent.params["checkpoint"] if parent is not None else None,
        "parent_push_tasks": 0,
        "available_channels": channels or None,
        "changed_channels": changed or None,
        "changed_versions": [p["channel_versions"].obj[ch] for ch in changed] or None,
        "changed_stored": ["blob" if ch in stored else "inline" for ch in changed] or None,
        "changed_bytes": [len(stored[ch]) if ch in stored else None for ch in changed] or None,
        **dict.fromkeys(("trigger_channels", "trigger_versions", "trigger_bases", "trigger_types")),
        "trigger_blobs": None,
        # the fragment sends payloads only for the special writes (negative idx)
        **{
            column: [w[i] for w in special] or None
            for column, i in [
                ("write_task_paths", 0),
                ("write_task_ids", 1),
                ("write_idxs", 2),
                ("write_channels", 3),
                ("write_types", 4),
            ]
        },
        "write_bytes": [len(w[5]) for w in special] or None,
        "write_payloads": [w[5] if w[2] < 0 else None for w in special] or None,
    }


def a_review(core: SaverState) -> tuple[Stmt, Stmt, Stmt]:
    """Thread `t`: `plan` ran, then `review` ran and stopped at an interrupt."""
    first = saved(core, "t", {"draft": "v1"}, seen={"plan": {"__start__": "1"}})
    second = saved(
        core,
        "t",
        {"draft": ["v1", "v2"]},
        parent=first,
        seen={"plan": {"__start__": "1"}, "review": {"draft": "2"}},
    )
    asked = put_writes(core, second, [("__interrupt__", [Interrupt("ok?", id="i-1")])], "task-r")
    return first, second, asked


# -- one checkpoint's facts ----------------------------------------------------------


@pytest.mark.parametrize("serde", [None, EncryptedSerde(keys=KEY)], ids=["plain", "encrypted"])
def test_a_node_tells_what_ran_what_changed_and_what_stopped_it(
    serde: EncryptedSerde | None,
) -> None:
    core = SaverState(serde=serde)
    first, second, asked = a_review(core)
    node = node_from_row(SaverState(serde=serde), facts_row(second, first, [asked]))

    assert (node.thread_id, node.checkpoint_ns, node.checkpoint_id) == (
        "t",
        "",
        second.params["checkpoint_id"],
    )
    assert node.parent_id == first.params["checkpoint_id"]
    assert node.ran == ["review"]
    assert node.metadata["step"] == 1
    assert [(c.channel, c.stored) for c in node.changed] == [("draft", "blob")]
    [task] = node.tasks
    assert (task.task_id, task.interrupts, task.interrupt_ids) == ("task-r", ["ok?"], ["i-1"])
    assert task.state == "interrupted"
    assert node.bytes > node.changed[0].bytes > 0


def test_the_first_checkpoint_ran_nothing() -> None:
    core = SaverState()
    first, _, _ = a_review(core)
    assert node_from_row(core, facts_row(first)).ran == []


def test_a_node_sealed_under_an_unknown_key_shows_sealed_values_and_readable_metadata() -> None:
    core = SaverState(serde=EncryptedSerde(keys=KEY))
    first, second, asked = a_review(core)
    node = node_from_row(SaverState(), facts_row(second, first, [asked]))
    assert node.metadata == second.params["metadata"].obj  # the JSONB projection
    assert node.ran is None and node.next is None  # neither can be told without the key
    assert node.tasks[0].interrupts == [SEALED]
    assert node_details(node)[0] == "interrupt: task task-r asks <encrypted>"


def test_an_altered_record_reads_as_unreadable_and_the_node_still_shows() -> None:
    core = SaverState(serde=EncryptedSerde(keys=KEY))
    first, second, asked = a_review(core)
    row = facts_row(second, first, [asked])
    row["metadata_blob"] = row["metadata_blob"][:-1] + bytes([row["metadata_blob"][-1] ^ 1])
    node = node_from_row(core, row)
    assert node.metadata == second.params["metadata"].obj
    assert node.tasks[0].interrupts == ["ok?"]
    # the record itself altered: the node has no seen versions to tell with
    row["checkpoint"] = row["checkpoint"][:-1] + bytes([row["checkpoint"][-1] ^ 1])
    node = node_from_row(core, row)
    assert node.ran is None and node.next is None


# -- damaged rows ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("versions", "said"),
    [
        (["1"], "column channel_versions is a JSON array, not an object"),
        ("1", "column channel_versions is a JSON string, not an object"),
        (None, "column channel_versions is JSON null, not an object"),
        ({"draft": {"v": 2}}, "column channel_versions gives channel 'draft' a JSON object"),
        ({"draft": True}, "column channel_versions gives channel 'draft' a JSON boolean"),
    ],
)
def test_channel_versions_no_object_of_versions_show_as_damaged(versions: Any, said: str) -> None:
    core = SaverState()
    first, second, asked = a_review(core)
    row = facts_row(second, first, [asked])
    row["channel_versions"] = versions  # the statement hands the column over as it is
    node = node_from_row(core, row)
    assert said in node.damage[0].what
    assert 'SELECT channel_versions FROM "public"."pgc_checkpoints" WHERE thread_id = \'t\'' in (
        node.damage[0].look
    )
    assert classify(node)[0] == "damaged"
    assert node.tasks[0].interrupts == ["ok?"]  # what can be read still shows
    lines = node_details(node)
    assert lines[0] == f"damaged: {node.damage[0].what}"
    assert lines[1].startswith("  look at it: SELECT channel_versions FROM")


def test_readable_metadata_no_object_behind_unreadable_metadata_shows_as_damaged() -> None:
    core = SaverState()
    first, second, asked = a_review(core)
    row = facts_row(second, first, [asked])
    row["metadata_blob"], row["metadata"] = b"\xc1", [1]
    node = node_from_row(core, row)
    assert node.metadata == {}
    assert [d.what.split(":")[0] for d in node.damage] == [
        f"cannot read the metadata of checkpoint {node.checkpoint_id!r} in thread 't', "
        "namespace '' (table pgc_checkpoints)",
        "column metadata is a JSON array, not an object",
    ]


def test_an_unreadable_record_is_damaged_not_encrypted() -> None:
    core = SaverState()
    first, second, asked = a_review(core)
    row = facts_row(second, first, [asked])
    row["type"] = "no-such-type"
    status, detail = classify(node_from_row(core, row))
    assert status == "damaged" and "cannot decode its 'no-such-type' bytes" in detail
    assert "encrypted" not in detail


def test_a_record_whose_versions_seen_is_no_mapping_of_mappings_is_damaged() -> None:
    core = SaverState()
    put = saved(core, "t", {"draft": "v1"}, seen={"plan": 3})  # type: ignore[dict-item]
    node = node_from_row(core, facts_row(put))
    assert node.next is None
    assert node.damage[0].what == (
        "the checkpoint record's versions_seen of 'plan' is int, not a mapping"
    )


def test_unreadable_values_and_writes_name_their_rows() -> None:
    core = SaverState()
    first, second, asked = a_review(core)
    row = facts_row(second, first, [asked])
    row["write_payloads"] = [b"\xc1"]
    node = node_from_row(core, row)
    [damage] = node.damage
    assert damage.what.startswith("cannot read the write -3 of task 'task-r' at checkpoint")
    assert node.tasks[0].interrupts == [Unreadable(damage.what)]  # shown in its place too
    assert damage.look.endswith("AND task_id = 'task-r' AND idx = -3")
    assert damage.look.startswith('SELECT channel, type, blob FROM "public"."pgc_writes"')


def test_a_shape_no_check_foresaw_still_gives_a_damaged_node() -> None:
    core = SaverState()
    first, second, asked = a_review(core)
    row = facts_row(second, first, [asked])
    row["write_idxs"] = ["-3"]  # a column of another type: the comparison raises TypeError
    node = node_from_row(core, row)
    assert node.damage[0].what.startswith("the row cannot be summarised (TypeError: ")
    assert node.damage[0].look.startswith('SELECT * FROM "public"."pgc_checkpoints"')


def test_the_list_of_threads_keeps_every_healthy_thread_beside_a_damaged_one() -> None:
    core = SaverState()
    first, _, _ = a_review(core)
    other = saved(core, "u", {"draft": "x"})
    damaged = {**summary_row(first), "channel_versions": "oops", "metadata": 7}
    _, threads = drive(recent_threads_op(core, limit=2), [[damaged, summary_row(other)], *NO_LOCKS])
    assert [t.thread_id for t in threads] == ["t", "u"]
    assert [thread_json(t)["status"] for t in threads] == ["damaged", "finished"]
    assert [d["what"] for d in thread_json(threads[0])["damage"]] == [
        "column metadata is a JSON number, not an object",
        "column channel_versions is a JSON string, not an object",
    ]
    assert thread_json(threads[1])["damage"] == []


# -- a page of a thread --------------------------------------------------------------


def test_an_empty_namespace_lists_the_namespaces_the_thread_has() -> None:
    sent, page = drive(
        thread_page_op(SaverState(), "t", "missing"),
        [[{"total": 0, "newer": 0}], [{"checkpoint_ns": "", "checkpoints": 3}]],
    )
    assert [s.name for s in sent] == ["inspect_namespace_counts", "inspect_thread_namespaces"]
    assert sent[0].params == {"thread_id": "t", "checkpoint_ns": "missing", "until": None}
    assert (page.total, page.nodes, page.namespaces) == (0, [], {"": 3})


def test_a_page_reads_one_row_more_than_it_shows_and_names_where_the_older_page_starts() -> None:
    core = SaverState()
    first, second, asked = a_review(core)
    rows = [facts_row(second, first, [asked]), facts_row(first)]
    sent, page = drive(
        thread_page_op(core, "t", limit=1),
        [[{"total": 2, "newer": 0}], rows, [], *NO_LOCKS],
    )
    assert [s.name for s in sent] == [
        "inspect_namespace_counts",
        "inspect_thread_page",
        "inspect_child_namespaces",
        "inspect_server_in_recovery",
        "inspect_thread_lock_holders",
    ]
    assert sent[1].params["limit"] == 2
    assert sent[2].params == {
        "thread_id": "t",
        "checkpoint_ns": "",
        "prefix": "",
        "checkpoint_ids": [second.params["checkpoint_id"]],
    }
    assert [n.checkpoint_id for n in page.nodes] == [second.params["checkpoint_id"]]
    assert page.older_id == first.params["checkpoint_id"]
    assert (page.total, page.newer) == (2, 0)


def test_a_page_until_a_checkpoint_asks_for_its_later_children_and_attaches_subgraphs() -> None:
    core = SaverState()
    first, second, asked = a_review(core)
    cid = second.params["checkpoint_id"]
    inner = saved(
        core,
        "t",
        {"step": 1},
        ns="review:task-r",
        metadata={**generate_metadata(step=0), "parents": {"": cid}},
    )
    child = {**facts_row(inner), "checkpoints": 4}
    later = [{"parent_checkpoint_id": cid, "checkpoint_id": "c9", "source": "fork"}]
    sent, page = drive(
        thread_page_op(core, "t", limit=5, until=cid),
        [[{"total": 2, "newer": 1}], [facts_row(second, first, [asked]), facts_row(first)], later]
        + [[child], *NO_LOCKS],
    )
    assert [s.name for s in sent][2:4] == ["inspect_later_children", "inspect_child_namespaces"]
    assert sent[2].params["until"] == cid
    assert page.older_id is None and page.newer == 1
    head = page.nodes[0]
    assert head.checkpoint_id == cid
    # a child after the page counts (the node is no head) without being listed
    assert head.children == [] and head.child_sources == ["fork"] and not head.head
    assert page.nodes[1].children == [cid]
    [sub] = head.subgraphs
    assert (sub.checkpoint_ns, sub.checkpoints) == ("review:task-r", 4)
    assert sub.latest.checkpoint_id == inner.params["checkpoint_id"]
    assert page.nodes[1].subgraphs == []


def test_a_page_refuses_an_id_a_key_cannot_hold_before_it_reads() -> None:
    with pytest.raises(InvalidInputError, match="thread_id"):
        next(thread_page_op(SaverState(), "t\x00"))


# -- the list of threads -------------------------------------------------------------


def summary_row(put: Stmt, **fields: Any) -> Row:
    return {
        **facts_row(put),
        "checkpoints": 2,
        "namespaces": 1,
        "last_activity": SAVED_AT,
        "size_bytes": 300,
        **fields,
    }


def test_recent_threads_name_the_process_that_holds_each_threads_lock() -> None:
    core = SaverState()
    first, _, _ = a_review(core)
    other = saved(core, "u", {"draft": "x"})
    rows = [summary_row(first), summary_row(other, size_bytes=None)]
    key = thread_lock_key("t", "app")
    sent, threads = drive(
        recent_threads_op(core, schema="app", limit=2, metadata=[{"user": "ada"}]),
        [rows, [{"in_recovery": False}], [{"key": key, "holder_pid": 4242}]],
    )
    assert [s.name for s in sent] == [
        "inspect_recent_threads",
        "inspect_server_in_recovery",
        "inspect_thread_lock_holders",
    ]
    filters = sent[0].params["filters"]
    assert [f.obj for f in filters] == [{"user": "ada"}] and isinstance(filters[0], Jsonb)
    assert sorted(sent[2].params["keys"]) == sorted([key, thread_lock_key("u", "app")])
    assert [(s.thread_id, s.locked_by, s.size_bytes) for s in threads] == [
        ("t", 4242, 300),
        ("u", None, 0),
    ]
    assert threads[0].latest is not None
    assert threads[0].latest.checkpoint_id == first.params["checkpoint_id"]


def test_on_a_standby_the_locks_are_unknown_and_not_asked_for() -> None:
    core = SaverState()
    first, _, _ = a_review(core)
    sent, threads = drive(
        recent_threads_op(core, limit=1), [[summary_row(first)], [{"in_recovery": True}]]
    )
    assert [s.name for s in sent] == ["inspect_recent_threads", "inspect_server_in_recovery"]
    [thread] = threads
    assert (thread.locked_by, thread.lock_seen) == (None, False)
    assert (thread_json(thread)["lock"], thread_json(thread)["locked_by"]) == ("unknown", None)

    sent, page = drive(
        thread_page_op(core, "t", limit=1),
        [[{"total": 1, "newer": 0}], [facts_row(first)], [], [{"in_recovery": True}]],
    )
    assert sent[-1].name == "inspect_server_in_recovery"
    assert (page.locked_by, page.lock_seen, page_json(page)["lock"]) == (None, False, "unknown")
    assert page_lines(page)[2] == f"lock: {STANDBY_LOCKS}"


def test_a_page_names_the_process_that_holds_its_threads_lock() -> None:
    core = SaverState()
    first, _, _ = a_review(core)
    key = thread_lock_key("t", "public")
    sent, page = drive(
        thread_page_op(core, "t", limit=1),
        [[{"total": 1, "newer": 0}], [facts_row(first)], [], [{"in_recovery": False}]]
        + [[{"key": key, "holder_pid": 77}]],
    )
    assert sent[-1].params == {"keys": [key]}
    assert (page_json(page)["lock"], page_json(page)["locked_by"]) == ("held", 77)
    assert page_lines(page)[2] == "running now: lock held by pid 77"


def test_no_threads_asks_for_no_locks() -> None:
    sent, threads = drive(recent_threads_op(SaverState()), [[]])
    assert [s.name for s in sent] == ["inspect_recent_threads"] and threads == []
    assert sent[0].params == {"since": None, "filters": None, "limit": 20}


# -- one checkpoint in full ----------------------------------------------------------


def test_a_short_reference_resolves_to_the_ids_that_end_with_it() -> None:
    sent, ids = drive(
        resolve_checkpoint_op(SaverState(), "t", "", "9b5"), [[{"checkpoint_id": "1f-9b5"}]]
    )
    assert sent[0].params == {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "9b5"}
    assert ids == ["1f-9b5"]


def values_row(put: Stmt, writes: Sequence[Stmt] = ()) -> Row:
    """A row of `get_checkpoint_by_id`: the checkpoint with its pieces and its writes."""
    p = put.params
    row = facts_row(put)
    everything = sorted(
        (w.params["task_path"], w.params["task_id"], idx, channel, type_, data)
        for w in writes
        for idx, channel, type_, data in saved_writes(w)
    )
    row.update(
        blob_channels=p["blob_channels"] or None,
        blob_versions=p["blob_versions"] or None,
        blob_bases=p["blob_bases"] or None,
        blob_types=p["blob_types"] or None,
        blob_values=p["blob_values"] or None,
        write_task_paths=[w[0] for w in everything] or None,
        write_task_ids=[w[1] for w in everything] or None,
        write_idxs=[w[2] for w in everything] or None,
        write_channels=[w[3] for w in everything] or None,
        write_types=[w[4] for w in everything] or None,
        write_values=[w[5] for w in everything] or None,
    )
    return row


def test_a_checkpoints_values_come_back_decoded_with_its_pending_writes() -> None:
    core = SaverState(serde=EncryptedSerde(keys=KEY))
    _, second, asked = a_review(core)
    sent, tup = drive(
        checkpoint_values_op(core, "t", "", second.params["checkpoint_id"]),
        [[values_row(second, [asked])]],
    )
    assert sent[0].name == "get_checkpoint_by_id_sealed"
    assert tup.checkpoint["channel_values"] == {"draft": ["v1", "v2"]}
    [(task_id, channel, value)] = tup.pending_writes
    assert (task_id, channel) == ("task-r", "__interrupt__")
    assert value[0].value == "ok?"


def test_a_missing_checkpoint_is_none() -> None:
    sent, tup = drive(checkpoint_values_op(SaverState(), "t", "", "c1"), [[]])
    assert sent[0].name == "get_checkpoint_by_id" and tup is None


def test_values_encrypted_under_a_key_not_configured_say_which_setting_opens_them() -> None:
    _, second, _ = a_review(SaverState(serde=EncryptedSerde(keys=KEY)))
    with pytest.raises(DecryptionError, match=r"under key 'k1'.*PGCHECKPOINT_AES_KEYS"):
        drive(
            checkpoint_values_op(SaverState(), "t", "", second.params["checkpoint_id"]),
            [[values_row(second)]],
        )


def test_one_altered_value_reads_as_unreadable_and_the_rest_still_show() -> None:
    core = SaverState(serde=EncryptedSerde(keys=KEY))
    _, second, asked = a_review(core)
    row = values_row(second, [asked])
    row["metadata_blob"] = row["metadata_blob"][:-1] + bytes([row["metadata_blob"][-1] ^ 1])
    [blob] = row["blob_values"]
    row["blob_values"] = [blob[:-1] + bytes([blob[-1] ^ 1])]
    _, tup = drive(checkpoint_values_op(core, "t", "", second.params["checkpoint_id"]), [[row]])
    assert isinstance(tup.checkpoint["channel_values"]["draft"], Unreadable)
    assert isinstance(tup.metadata[UNREADABLE_METADATA], Unreadable)
    assert tup.pending_writes[0][2][0].value == "ok?"


# -- threads found by their sealed metadata --------------------------------------------

FILTERABLE = ("source", "step", "user_id")


def metadata_row(put: Stmt, **projection: Any) -> Row:
    """A row of `inspect_metadata_page` for the checkpoint `put` stored; `projection`
    edits its readable metadata column (None removes a key), as someone without the key can."""
    p = put.params
    readable = dict(p["metadata"].obj)
    for key, value in projection.items():
        if value is None:
            readable.pop(key, None)
        else:
            readable[key] = value
    return {
        "thread_id": p["thread_id"],
        "checkpoint_ns": p["checkpoint_ns"],
        "checkpoint_id": p["checkpoint_id"],
        "created_at": SAVED_AT,
        "metadata_type": p["metadata_type"],
        "metadata_blob": p["metadata_blob"],
        "metadata": readable,
        "sealed_metadata": readable,
    }


def chats(core: SaverState) -> tuple[Stmt, Stmt]:
    alice = saved(core, "alice-chat", {"n": 1}, metadata={"step": 1, "user_id": "alice"})
    bob = saved(core, "bob-chat", {"n": 1}, metadata={"step": 1, "user_id": "bob", "org": "x"})
    return alice, bob


def test_the_sealed_metadata_decides_not_the_column_edited_without_the_key() -> None:
    core = SaverState(serde=EncryptedSerde(keys=KEY, filterable_metadata=FILTERABLE))
    alice, bob = chats(core)
    # bob's column says alice; alice's lost the key (which her sealed metadata binds)
    page = [metadata_row(bob, user_id="alice"), metadata_row(alice, user_id=None)]
    sent, search = drive(
        sealed_search_op(core, metadata=[{"user_id": "alice"}], limit=5),
        [page, [summary_row(alice)], *NO_LOCKS],
    )
    assert [s.name for s in sent][:2] == ["inspect_metadata_page", "inspect_threads_by_id"]
    assert sent[0].params["matched"] == [] and sent[0].params["after_at"] is None
    assert sent[1].params == {"thread_ids": ["alice-chat"]}
    assert [(t.thread_id, t.metadata_filter) for t in search.threads] == [("alice-chat", "sealed")]
    assert [key[0] for key in search.altered] == ["bob-chat", "alice-chat"]
    assert (search.scanned, search.truncated, search.unreadable) == (2, False, [])


def test_a_key_kept_only_in_the_sealed_metadata_is_searched_with_the_key() -> None:
    core = SaverState(serde=EncryptedSerde(keys=KEY, filterable_metadata=FILTERABLE))
    alice, bob = chats(core)
    assert "org" not in metadata_row(bob)["metadata"]
    _, search = drive(
        sealed_search_op(core, metadata=[{"org": "x"}]),
        [[metadata_row(bob), metadata_row(alice)], [summary_row(bob)], *NO_LOCKS],
    )
    assert [t.thread_id for t in search.threads] == ["bob-chat"] and search.altered == []


def test_metadata_that_does_not_decrypt_is_reported_and_not_matched() -> None:
    core = SaverState(serde=EncryptedSerde(keys=KEY, filterable_metadata=FILTERABLE))
    alice, _ = chats(core)
    row = metadata_row(alice)
    row["metadata_blob"] = row["metadata_blob"][:-1] + bytes([row["metadata_blob"][-1] ^ 1])
    _, search = drive(sealed_search_op(core, metadata=[{"user_id": "alice"}]), [[row]])
    assert search.threads == []
    [(key, why)] = search.unreadable
    assert key[0] == "alice-chat" and "cannot decrypt metadata" in why


def test_metadata_stored_unencrypted_matches_as_unverified() -> None:
    plain = saved(SaverState(), "old-chat", {"n": 1}, metadata={"step": 1, "user_id": "alice"})
    core = SaverState(serde=EncryptedSerde(keys=KEY, allow_plaintext=True))
    _, search = drive(
        sealed_search_op(core, metadata=[{"user_id": "alice"}]),
        [[metadata_row(plain)], [summary_row(plain)], *NO_LOCKS],
    )
    assert [(t.thread_id, t.metadata_filter) for t in search.threads] == [
        ("old-chat", "unverified")
    ]


def test_the_walk_goes_on_from_where_a_page_ended_and_stops_at_the_scan_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search_module, "_PAGE", 1)
    core = SaverState(serde=EncryptedSerde(keys=KEY, filterable_metadata=FILTERABLE))
    alice, bob = chats(core)
    rows = [metadata_row(bob), metadata_row(alice)]
    sent, search = drive(
        sealed_search_op(core, metadata=[{"user_id": "alice"}], scan=2),
        [rows, rows[1:], [summary_row(alice)], *NO_LOCKS],
    )
    assert [s.params["limit"] for s in sent[:2]] == [2, 2]  # one row more than read
    bob_key = (SAVED_AT, "bob-chat", "", bob.params["checkpoint_id"])
    after = sent[1].params
    assert (after["after_at"], after["after_thread"], after["after_ns"], after["after_id"]) == (
        bob_key
    )
    assert [t.thread_id for t in search.threads] == ["alice-chat"]
    assert not search.truncated  # it found what it looked for within the budget

    sent, search = drive(sealed_search_op(core, metadata=[{"user_id": "nobody"}], scan=1), [rows])
    assert (search.scanned, search.truncated, search.threads) == (1, True, [])
    assert len(sent) == 1


def test_the_command_line_scans_as_far_as_the_search_does_by_default() -> None:
    from pgcheckpoint.cli import threadview as cli_threadview
    from pgcheckpoint.codec.labels import KEYS_ENV

    # the command line spells both out, to keep `--help` from importing the core
    assert cli_threadview.DEFAULT_SCAN == search_module.DEFAULT_SCAN
    assert cli_threadview._KEYS_ENV == KEYS_ENV

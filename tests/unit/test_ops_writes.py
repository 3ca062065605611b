"""`put_op` and `put_writes_op` fed the rows the server would send, without a database."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config, generate_metadata
from psycopg.errors import ForeignKeyViolation
from support.checkpoints import with_values
from support.ops import drive

from pgcheckpoint import MissingCheckpointError, MissingParentError
from pgcheckpoint.codec.binding import binding
from pgcheckpoint.core.locks import maintenance_lock_key
from pgcheckpoint.core.state import SaverState
from pgcheckpoint.core.writes import put_op, put_writes_op
from pgcheckpoint.ops import Stmt

STORED = [{"stored": True}]  # what put_checkpoint returns when the parent exists
PARENT_GONE = [{"stored": False}]
SAVED = [{}]  # what the driver gives back for insert_write storing its write (its row count)
MESSAGES = [f"message {i}: " + "x" * 30 for i in range(20)]  # a list worth a delta


def blob_values(core: SaverState, stmt: Stmt) -> dict[str, Any]:
    """The values a put_checkpoint statement stores as blobs, decoded, by channel.

    A delta decodes to its new items only.
    """
    params, values = stmt.params, {}
    for channel, version, type_, data in zip(
        params["blob_channels"],
        params["blob_versions"],
        params["blob_types"],
        params["blob_values"],
        strict=True,
    ):
        aad = binding("blob", params["thread_id"], params["checkpoint_ns"], channel, version)
        values[channel] = core.load_value(type_, data, aad)
    return values


def bases(stmt: Stmt) -> dict[str, str | None]:
    return dict(zip(stmt.params["blob_channels"], stmt.params["blob_bases"], strict=True))


def put_messages(
    core: SaverState, thread_id: str, messages: list[str], parent: Any = None
) -> tuple[Any, Stmt]:
    """Start a put of a checkpoint holding `messages`: the op and its first statement."""
    config = generate_config(thread_id)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    checkpoint, versions = with_values({"messages": messages})
    op = put_op(core, config, checkpoint, generate_metadata(), versions)
    return op, next(op)


def stored(op: Any, rows: list[Any] = STORED) -> Any:
    with pytest.raises(StopIteration) as done:
        op.send(rows)
    return done.value.value


# -- put_op -------------------------------------------------------------------------


def test_a_put_is_one_statement_with_the_checkpoint_and_its_new_values() -> None:
    core = SaverState()
    parent = generate_config("t", checkpoint_ns="sub:1", checkpoint_id="parent-id")
    values = {"text": "hi", "count": 3, "none": None, "items": [1, 2], "seen": {"a": [1]}}
    checkpoint, versions = with_values(values)
    del versions["seen"]  # unchanged since the parent: its value is stored already
    metadata = generate_metadata(step=4, run_id="run-7", note="kept")
    sent, config = drive(put_op(core, parent, checkpoint, metadata, versions), [STORED])

    (stmt,) = sent
    params = stmt.params
    assert (stmt.name, stmt.fetch) == ("put_checkpoint", True)
    where = (params["thread_id"], params["checkpoint_ns"], params["checkpoint_id"])
    assert where == ("t", "sub:1", checkpoint["id"])
    assert (params["parent_checkpoint_id"], params["run_id"]) == ("parent-id", "run-7")
    # plain values stay in the checkpoint record; changed others go as blobs
    assert sorted(params["inline_channels"]) == ["count", "none", "text"]
    record = core.load_value(params["type"], params["checkpoint"], binding("checkpoint", *where))
    assert record["channel_values"] == {"text": "hi", "count": 3, "none": None}
    assert blob_values(core, stmt) == {"items": [1, 2]}
    assert dict(zip(params["blob_channels"], params["blob_versions"], strict=True)) == {
        "items": versions["items"]
    }
    assert params["channel_versions"].obj == checkpoint["channel_versions"]
    full_metadata = core.load_value(
        params["metadata_type"], params["metadata_blob"], binding("metadata", *where)
    )
    assert (full_metadata["step"], full_metadata["note"]) == (4, "kept")
    assert params["metadata"].obj["note"] == "kept"  # the JSONB that `list` filters on
    assert config == {
        "configurable": {"thread_id": "t", "checkpoint_ns": "sub:1", "checkpoint_id": where[2]}
    }


def test_a_put_whose_parent_is_gone_raises_and_remembers_nothing() -> None:
    core = SaverState()
    first, first_stmt = put_messages(core, "t", MESSAGES)
    parent = stored(first)
    op, stmt = put_messages(core, "t", [*MESSAGES, "one more"], parent=parent)
    # once the saves in flight are done, the writes its tasks saved for the
    # missing parent, or for the refused checkpoint, are removed: they belong to
    # no checkpoint
    wait = op.send(PARENT_GONE)
    assert wait.name == "wait_for_thread_saves"
    forget = op.send([{}])
    assert forget.name == "forget_orphan_writes"
    assert forget.params["checkpoint_ids"] == [
        parent["configurable"]["checkpoint_id"],
        stmt.params["checkpoint_id"],
    ]
    with pytest.raises(MissingParentError) as err:
        op.send([])
    # the run goes on (LangGraph raises a background put's error at the end): its
    # later writes need their namespace to be there
    sent, _ = drive(put_writes_op(core, parent, [("a", 1)], "task"), [SAVED])
    assert sent[0].name == "insert_write_checked"
    assert (err.value.thread_id, err.value.parent_checkpoint_id) == (
        "t",
        parent["configurable"]["checkpoint_id"],
    )
    assert err.value.checkpoint_id == stmt.params["checkpoint_id"]
    # the refused list was never stored, so the next put builds on the first one
    _, again = put_messages(core, "t", [*MESSAGES, "one more", "two more"], parent=parent)
    assert bases(again) == {"messages": first_stmt.params["blob_versions"][0]}
    assert blob_values(core, again) == {"messages": ["one more", "two more"]}


def test_a_list_that_grew_is_stored_as_its_new_items_on_the_stored_version() -> None:
    core = SaverState()
    first, first_stmt = put_messages(core, "t", MESSAGES)
    parent = stored(first)
    op, stmt = put_messages(core, "t", [*MESSAGES, "new"], parent=parent)
    assert bases(stmt) == {"messages": first_stmt.params["blob_versions"][0]}
    assert blob_values(core, stmt) == {"messages": ["new"]}
    # the full list and the delta rebuild the list the graph saved
    pieces = [
        (
            s.params["blob_versions"][0],
            s.params["blob_types"][0],
            s.params["blob_values"][0],
            s.params["blob_bases"][0],
        )
        for s in (first_stmt, stmt)
    ]
    assert SaverState().load_blob(("t", "", "messages"), pieces) == [*MESSAGES, "new"]
    assert stored(op) == {
        "configurable": {
            "thread_id": "t",
            "checkpoint_ns": "",
            "checkpoint_id": stmt.params["checkpoint_id"],
        }
    }


def test_a_delta_whose_base_was_deleted_is_sent_again_as_the_whole_value() -> None:
    core = SaverState()
    first, _ = put_messages(core, "t", MESSAGES)
    op, stmt = put_messages(core, "t", [*MESSAGES, "new"], parent=stored(first))
    assert bases(stmt)["messages"] is not None
    retry = op.throw(ForeignKeyViolation())  # the base went (prune) since it was stored
    assert retry.name == "put_checkpoint"
    assert bases(retry) == {"messages": None}
    assert blob_values(core, retry) == {"messages": [*MESSAGES, "new"]}
    assert retry.params["checkpoint_id"] == stmt.params["checkpoint_id"]
    assert stored(op)["configurable"]["checkpoint_id"] == stmt.params["checkpoint_id"]


def test_after_a_deleted_base_no_delta_builds_on_what_the_thread_had_stored() -> None:
    core = SaverState()
    config = generate_config("t")
    checkpoint, versions = with_values({"messages": MESSAGES, "notes": MESSAGES})
    first = put_op(core, config, checkpoint, generate_metadata(), versions)
    next(first)
    parent = stored(first)
    # the next put changes `messages` only, and finds its base gone
    op, _ = put_messages(core, "t", [*MESSAGES, "new"], parent=parent)
    op.throw(ForeignKeyViolation())
    stored(op)
    # the prune that took it may have taken the stored `notes` too
    config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    checkpoint, versions = with_values({"notes": [*MESSAGES, "more"]})
    stmt = next(put_op(core, config, checkpoint, generate_metadata(), versions))
    assert bases(stmt) == {"notes": None}
    assert blob_values(core, stmt) == {"notes": [*MESSAGES, "more"]}


def test_a_put_retries_whole_values_once_only() -> None:
    core = SaverState()
    first, _ = put_messages(core, "t", MESSAGES)
    op, _ = put_messages(core, "t", [*MESSAGES, "new"], parent=stored(first))
    op.throw(ForeignKeyViolation())
    with pytest.raises(ForeignKeyViolation):
        op.throw(ForeignKeyViolation())


def test_a_delta_is_never_planned_on_another_threads_list() -> None:
    core = SaverState()
    first, _ = put_messages(core, "a", MESSAGES)
    stored(first)
    _, stmt = put_messages(core, "b", [*MESSAGES, "new"])
    assert bases(stmt) == {"messages": None}


# -- put_writes_op ------------------------------------------------------------------


def test_writes_go_in_one_statement_indexed_by_position_and_special_ones_replace() -> None:
    core = SaverState()
    config = generate_config("t", checkpoint_id="c1")
    sent, _ = drive(put_writes_op(core, config, [("a", 1), ("b", [2])], "task", "path"), [SAVED])
    (stmt,) = sent
    assert stmt.name == "insert_writes"
    assert (stmt.count, stmt.fetch) == (True, False)  # a row count, no rows sent back
    assert (stmt.params["task_id"], stmt.params["task_path"]) == ("task", "path")
    assert (list(stmt.params["idxs"]), list(stmt.params["channels"])) == ([0, 1], ["a", "b"])
    decoded = [
        core.load_value(type_, data, binding("write", "t", "", "c1", "task", idx))
        for idx, type_, data in zip(
            stmt.params["idxs"], stmt.params["types"], stmt.params["blobs"], strict=True
        )
    ]
    assert decoded == [1, [2]]

    sent, _ = drive(put_writes_op(core, config, [("__error__", "boom")], "task"), [SAVED])
    assert (sent[0].name, sent[0].params["idx"]) == ("upsert_write", -1)
    # a task's only write goes as scalar parameters, not one-element arrays
    sent, _ = drive(put_writes_op(core, config, [("a", 1)], "task"), [SAVED])
    assert (sent[0].name, sent[0].params["channel"], sent[0].count) == ("insert_write", "a", True)
    assert "idxs" not in sent[0].params
    assert (
        core.load_value(
            sent[0].params["type"],
            sent[0].params["blob"],
            binding("write", "t", "", "c1", "task", 0),
        )
        == 1
    )
    assert drive(put_writes_op(core, config, [], "task"), []) == ([], True)


def test_writes_that_meet_a_delete_wait_for_it_then_need_their_namespace() -> None:
    core = SaverState()
    config = generate_config("t", checkpoint_id="c1")
    # nothing stored: a delete held the thread (or the writes were saved already)
    sent, saved = drive(put_writes_op(core, config, [("a", 1)], "task"), [[]])
    assert (saved, sent[0].name) == (False, "insert_write")
    # the caller runs it again, in one transaction: wait for the delete, then save
    again = put_writes_op(core, config, [("a", 1)], "task", after_delete=True)
    sent, saved = drive(again, [[{}], SAVED])
    assert [s.name for s in sent] == ["wait_for_thread_deletes", "insert_write_checked"]
    assert sent[0].params["lock_key"] == maintenance_lock_key("t")
    assert saved
    # saved already, by an earlier attempt of the task: done, whether or not a
    # checkpoint of the namespace is there yet (LangGraph may save writes first)
    for found in (True, False):
        again = put_writes_op(core, config, [("a", 1)], "task", after_delete=True)
        sent, saved = drive(again, [[{}], [], [{"written": True, "found": found}]])
        assert (sent[-1].name, saved) == ("task_writes_or_namespace", True)
    where = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1", "task_id": "task"}
    assert sent[-1].params == where | {"namespaces": [""]}
    # a checkpoint of the namespace is there: done, as before
    again = put_writes_op(core, config, [("a", 1)], "task", after_delete=True)
    assert drive(again, [[{}], [], [{"written": False, "found": True}]])[1]
    # the delete took the namespace: the run is told, nothing is stored
    with pytest.raises(MissingCheckpointError, match="'c1' of thread 't'"):
        again = put_writes_op(core, config, [("a", 1)], "task", after_delete=True)
        drive(again, [[{}], [], [{"written": False, "found": False}]])


def test_writes_after_a_delete_count_the_root_namespace_for_a_subgraphs_first_checkpoint() -> None:
    # a subgraph's first writes may come before any checkpoint of its namespace:
    # after waiting for a delete (a prune), a checkpoint of the root namespace
    # lets them in; only a delete of the whole thread leaves that empty
    core = SaverState()
    config = generate_config("t", checkpoint_ns="sub:1", checkpoint_id="c1")
    sent, _ = drive(
        put_writes_op(core, config, [("a", 1)], "task", after_delete=True),
        [[{}], [], [{"written": False, "found": True}]],
    )
    assert [s.params["namespaces"] for s in sent[1:]] == [["sub:1", ""]] * 2
    # a run whose own namespace lost its checkpoints under it needs that namespace
    core.deleted_under_runs[("t", "sub:1")] = None
    sent, _ = drive(put_writes_op(core, config, [("a", 1)], "task"), [SAVED])
    assert (sent[0].name, sent[0].params["namespaces"]) == ("insert_write_checked", ["sub:1"])


def test_writes_that_land_after_their_threads_deletion_was_found_are_removed() -> None:
    core = SaverState()
    config = generate_config("t", checkpoint_id="c1")
    op = put_writes_op(core, config, [("a", 1)], "task")
    assert next(op).name == "insert_write"
    # meanwhile a put of the same saver finds the thread deleted under the run
    core.deleted_under_runs[("t", "")] = None
    assert op.send(SAVED).name == "wait_for_thread_saves"
    forget = op.send([{}])
    assert (forget.name, forget.params["checkpoint_ids"]) == ("forget_orphan_writes", ["c1"])
    with pytest.raises(MissingCheckpointError):
        op.send([])

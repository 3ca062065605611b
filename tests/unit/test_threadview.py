"""The thread view without a database: a page of checkpoints laid out, a thread's status."""

from __future__ import annotations

from typing import Any

from pgcheckpoint.threadview import CheckpointNode, TaskInfo, classify, link, tree_rows


def _node(checkpoint_id: str, parent: str | None, **kwargs: Any) -> CheckpointNode:
    return CheckpointNode("t", "", checkpoint_id, parent_id=parent, **kwargs)


def test_tree_rows_keeps_the_newest_line_leftmost_and_nests_forks_of_forks() -> None:
    # 1 - 2 - 3 - 4            (old line)
    #      \- 5 - 6            (fork of 2)
    #          \- 7 - 8        (fork of 5, holds the newest)
    nodes = [
        _node("1", None),
        _node("2", "1"),
        _node("3", "2"),
        _node("4", "3"),
        _node("5", "2"),
        _node("6", "5"),
        _node("7", "5"),
        _node("8", "7"),
    ]
    link(nodes)
    drawn = [(row.prefix, row.node.checkpoint_id) for row in tree_rows(nodes[::-1])]
    assert drawn == [
        ("", "1"),
        ("", "2"),
        ("├─", "3"),
        ("│ ", "4"),
        ("", "5"),
        ("├─", "6"),
        ("", "7"),
        ("", "8"),
    ]
    assert [n.checkpoint_id for n in nodes if n.fork] == ["5", "7"]


def test_tree_rows_lays_out_a_long_chain_without_recursion() -> None:
    nodes = [_node(f"{i:06d}", f"{i - 1:06d}" if i else None) for i in range(20_000)]
    link(nodes)
    rows = tree_rows(nodes)
    assert len(rows) == 20_000 and {row.prefix for row in rows} == {""}


def test_classify_names_what_stopped_a_step() -> None:
    interrupted = _node(
        "1", None, next=["review"], tasks=[TaskInfo("t", "review", "", interrupts=["ok?"])]
    )
    assert classify(interrupted) == ("interrupted", "review asks 'ok?'")
    assert classify(_node("1", None, next=[])) == ("finished", "")
    assert classify(_node("1", None, next=["join"])) == ("stopped", "next join, nothing saved yet")
    assert classify(_node("1", None, next=None))[0] == "unknown"
    sends = _node(
        "1",
        None,
        next=["work", "work", "work"],
        tasks=[TaskInfo("t", "work", "", writes=[("x", 1)])],
    )
    assert classify(sends) == ("stopped", "work saved writes; next work x2")

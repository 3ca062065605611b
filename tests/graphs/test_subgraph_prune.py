"""Pruning a thread with subgraphs leaves nothing no read reaches.

A graph calls a subgraph at every turn: each call is a namespace of its own
(`research:<task id>`) that ran from a root checkpoint (metadata `parents`).
`prune --keep-last`, `prune(strategy="keep_latest")` and the pg_cron procedure
keep the subgraph runs that ran from a kept root checkpoint and delete the
others with the checkpoints they ran from; `stats` shows no unreachable row
after any of them. With EncryptedSerde the `parents` metadata is sealed, and
checkpoint ids decide (a subgraph run is younger than what it ran from).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.graph import END, START, StateGraph
from psycopg.rows import dict_row

from pgcheckpoint import EncryptedSerde, PostgresSaver
from pgcheckpoint.cli import main
from pgcheckpoint.maintenance.stats import storage_stats_op
from pgcheckpoint.resources import sql_dir

TURNS = 12
KEEP = 5
NO_ROWS = {"checkpoints": 0, "blobs": 0, "writes": 0, "bytes": 0}


class Research(TypedDict, total=False):
    findings: Annotated[list[str], operator.add]


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    findings: Annotated[list[str], operator.add]


def _graph(saver: PostgresSaver) -> Any:
    sub = StateGraph(Research)
    sub.add_node("search", lambda s: {"findings": ["searched"]})
    sub.add_node("summarise", lambda s: {"findings": ["summary"]})
    sub.add_edge(START, "search")
    sub.add_edge("search", "summarise")
    sub.add_edge("summarise", END)
    builder = StateGraph(State)
    builder.add_node("plan", lambda s: {"log": ["planned"]})
    builder.add_node("research", sub.compile())
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "research")
    builder.add_edge("research", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture(params=["plain", "encrypted"])
def saver(request: pytest.FixtureRequest, db_dsn: str) -> Iterator[PostgresSaver]:
    serde = EncryptedSerde(keys={"k1": bytes(32)}) if request.param == "encrypted" else None
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        yield PostgresSaver(conn, serde=serde)


def run_turns(saver: PostgresSaver, thread_id: str) -> Any:
    graph = _graph(saver)
    config = {"configurable": {"thread_id": thread_id}}
    for turn in range(TURNS):
        graph.invoke({"log": [f"turn {turn}"]}, config)
    return graph


def namespaces(db_dsn: str, thread_id: str) -> dict[str, dict[str, Any]]:
    """Each namespace of a thread: its checkpoint ids, and the root checkpoint it ran from."""
    with psycopg.connect(db_dsn, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT checkpoint_ns, checkpoint_id FROM pgc_checkpoints WHERE thread_id = %s",
            [thread_id],
        ).fetchall()
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        out.setdefault(row["checkpoint_ns"], {"ids": set()})["ids"].add(row["checkpoint_id"])
    return out


def ran_from(saver: PostgresSaver, thread_id: str) -> dict[str, str]:
    """Each subgraph namespace -> the root checkpoint it ran from (decrypted metadata)."""
    out = {}
    for tup in saver.list({"configurable": {"thread_id": thread_id}}):
        ns = tup.config["configurable"]["checkpoint_ns"]
        if ns:
            out[ns] = tup.metadata["parents"][""]
    return out


def expected_after(
    before: dict[str, dict[str, Any]], parents: dict[str, str], kept_root: set[str]
) -> dict[str, int]:
    """Namespace -> checkpoints left: the root's kept ones, and the runs that ran from them."""
    left = {"": len(kept_root)}
    for ns, parent in parents.items():
        if parent in kept_root:
            left[ns] = len(before[ns]["ids"])
    return left


def assert_nothing_unreachable(saver: PostgresSaver) -> None:
    assert saver.run(storage_stats_op(saver.schema, top=0)).unreachable == NO_ROWS


def test_keep_last_takes_the_subgraph_runs_of_what_it_deletes(
    saver: PostgresSaver, db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = run_turns(saver, "chat")
    state = graph.get_state({"configurable": {"thread_id": "chat"}}).values
    before = namespaces(db_dsn, "chat")
    parents = ran_from(saver, "chat")
    assert len(parents) == TURNS
    kept_root = set(sorted(before[""]["ids"], reverse=True)[:KEEP])

    assert main(["prune", "--keep-last", str(KEEP), "--dsn", db_dsn]) == 0
    after = namespaces(db_dsn, "chat")
    assert {ns: len(v["ids"]) for ns, v in after.items()} == expected_after(
        before, parents, kept_root
    )
    assert 0 < len(after) - 1 < TURNS  # some subgraph runs stay, most went
    assert graph.get_state({"configurable": {"thread_id": "chat"}}).values == state
    capsys.readouterr()
    assert main(["stats", "--json", "--dsn", db_dsn]) == 0
    assert json.loads(capsys.readouterr().out)["unreachable"] == NO_ROWS


def test_keep_latest_keeps_the_latest_checkpoint_and_what_ran_from_it(
    saver: PostgresSaver, db_dsn: str
) -> None:
    graph = run_turns(saver, "chat")
    state = graph.get_state({"configurable": {"thread_id": "chat"}}).values
    before = namespaces(db_dsn, "chat")
    parents = ran_from(saver, "chat")
    saver.prune(["chat"], strategy="keep_latest")
    after = namespaces(db_dsn, "chat")
    kept_root = {max(before[""]["ids"])}
    assert {ns: len(v["ids"]) for ns, v in after.items()} == expected_after(
        before, parents, kept_root
    )
    assert graph.get_state({"configurable": {"thread_id": "chat"}}).values == state
    assert_nothing_unreachable(saver)
    # and the next turn runs on
    graph.invoke({"log": ["one more"]}, {"configurable": {"thread_id": "chat"}})


def test_the_pg_cron_procedure_keeps_what_the_sweep_keeps(
    saver: PostgresSaver, db_dsn: str
) -> None:
    run_turns(saver, "by-cron")
    run_turns(saver, "by-sweep")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgc_checkpoints SET created_at = created_at - interval '40 days'")
        conn.execute((sql_dir() / "retention.sql").read_text(encoding="utf-8"))
    parents = {t: ran_from(saver, t) for t in ("by-cron", "by-sweep")}
    before = {t: namespaces(db_dsn, t) for t in ("by-cron", "by-sweep")}
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("CALL pgcheckpoint_prune('30 days', 'keep_latest', 1000, 'public', NULL)")
    saver.prune_older_than(timedelta(days=30), strategy="keep_latest")
    for thread_id in ("by-cron", "by-sweep"):
        after = namespaces(db_dsn, thread_id)
        kept_root = {max(before[thread_id][""]["ids"])}
        assert {ns: len(v["ids"]) for ns, v in after.items()} == expected_after(
            before[thread_id], parents[thread_id], kept_root
        )
    assert_nothing_unreachable(saver)

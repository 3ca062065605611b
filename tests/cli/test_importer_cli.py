"""`pgcheckpoint import-langgraph`: threads the official saver wrote read back identically.

Real graphs run on `langgraph-checkpoint-postgres` (interrupts, subgraphs, a
failed fan-out that leaves pending writes, a DeltaChannel, and a checkpoint in
the pre-v4 format), are imported, and then every `list` and `get_tuple` of
pgcheckpoint's savers must equal the official saver's; resuming the threads
through pgcheckpoint finishes the graphs.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver
from langgraph.checkpoint.serde.types import TASKS
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from psycopg.conninfo import make_conninfo
from support.chat import chat_builder
from support.rows import rows_of

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.cli import main
from pgcheckpoint.maintenance.importer import LangGraphImporter
from pgcheckpoint.schema.migrate import upgrade

# -- graphs -------------------------------------------------------------------------------


class Review(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    drafts: int
    audit: Annotated[list[str], operator.add]
    decision: str


def draft(state: Review) -> dict[str, Any]:
    return {"messages": [AIMessage("draft v1")], "drafts": state.get("drafts", 0) + 1}


def audit(state: Review) -> dict[str, Any]:
    return {"audit": [f"audited {len(state['messages'])} messages"]}


def review(state: Review) -> dict[str, Any]:
    answer = interrupt({"question": "publish?", "draft": state["messages"][-1].content})
    return {"decision": answer, "messages": [HumanMessage(f"decision: {answer}")]}


def review_graph() -> StateGraph:
    """draft, then review (interrupts) and audit in one step: audit's writes stay pending."""
    builder = StateGraph(Review)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_node("audit", audit)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("draft", "audit")
    builder.add_edge("review", END)
    builder.add_edge("audit", END)
    return builder


class Inner(TypedDict):
    steps: Annotated[list[str], operator.add]
    answer: str


def inner_a(state: Inner) -> dict[str, Any]:
    return {"steps": ["inner a"]}


def inner_ask(state: Inner) -> dict[str, Any]:
    return {"answer": interrupt("inner question"), "steps": ["inner asked"]}


def inner_b(state: Inner) -> dict[str, Any]:
    return {"steps": [f"inner b got {state['answer']}"]}


def nested_graph() -> StateGraph:
    """A parent whose middle node is a subgraph that interrupts."""
    inner = StateGraph(Inner)
    inner.add_node("a", inner_a)
    inner.add_node("ask", inner_ask)
    inner.add_node("b", inner_b)
    inner.add_edge(START, "a")
    inner.add_edge("a", "ask")
    inner.add_edge("ask", "b")
    inner.add_edge("b", END)
    outer = StateGraph(Inner)
    outer.add_node("prepare", lambda s: {"steps": ["prepare"]})
    outer.add_node("child", inner.compile())
    outer.add_node("finish", lambda s: {"steps": ["finish"]})
    outer.add_edge(START, "prepare")
    outer.add_edge("prepare", "child")
    outer.add_edge("child", "finish")
    outer.add_edge("finish", END)
    return outer


class Fanout(TypedDict):
    items: list[int]
    results: Annotated[list[str], operator.add]


CALLS: dict[int, int] = {}
BROKEN: set[int] = set()


def work(state: dict[str, Any]) -> dict[str, Any]:
    item = state["item"]
    CALLS[item] = CALLS.get(item, 0) + 1
    if item in BROKEN:
        raise RuntimeError(f"item {item} failed")
    return {"results": [f"done {item}"]}


def fanout_graph() -> StateGraph:
    """Send per item; a failing item leaves the others' writes pending."""
    builder = StateGraph(Fanout)
    builder.add_node("work", work)
    builder.add_conditional_edges(
        START, lambda s: [Send("work", {"item": i}) for i in s["items"]], ["work"]
    )
    builder.add_edge("work", END)
    return builder


def chat_graph() -> StateGraph:
    return chat_builder(channel="log", node="reply", reply=lambda turn: f"reply {turn}")


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def write_legacy_thread(saver: OfficialSaver, thread_id: str) -> None:
    """Two checkpoints in format v1: the child's sends are writes of its parent."""
    parent = empty_checkpoint()
    parent.update({"v": 1, "pending_sends": []})  # type: ignore[typeddict-item]
    parent["channel_values"] = {"count": 1, "items": ["a", "b"]}
    parent["channel_versions"] = {"count": 1, "items": 1}
    base = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    parent_config = saver.put(base, parent, {"source": "loop", "step": 0}, {"count": 1, "items": 1})
    saver.put_writes(
        parent_config,
        [(TASKS, Send("work", {"item": 1})), (TASKS, Send("work", {"item": 2}))],
        task_id="sender",
    )
    child = empty_checkpoint()
    child.update({"v": 1, "pending_sends": []})  # type: ignore[typeddict-item]
    child["channel_values"] = {"count": 2, "items": ["a", "b"]}
    child["channel_versions"] = {"count": 2, "items": 1}
    saver.put(parent_config, child, {"source": "loop", "step": 1}, {"count": 2})


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture
def official(db_dsn: str) -> Iterator[OfficialSaver]:
    """The official saver on the test's database (its tables in public, beside ours)."""
    with OfficialSaver.from_conn_string(db_dsn) as saver:
        saver.setup()
        yield saver


@pytest.fixture
def written(official: OfficialSaver) -> dict[str, Any]:
    """Threads in every state worth importing, written by the official saver."""
    CALLS.clear()
    BROKEN.clear()
    graphs: dict[str, Any] = {}
    review_g = review_graph().compile(checkpointer=official)
    review_g.invoke(
        {"messages": [HumanMessage("write a post")]}, config("review"), durability="sync"
    )
    # a finished thread, with a resume in its history
    review_g.invoke({"messages": [HumanMessage("write")]}, config("finished"), durability="sync")
    review_g.invoke(Command(resume="yes"), config("finished"), durability="sync")
    graphs["review"] = graphs["finished"] = review_graph
    nested_g = nested_graph().compile(checkpointer=official)
    nested_g.invoke({"steps": ["start"]}, config("nested"), durability="sync")
    graphs["nested"] = nested_graph
    fan_g = fanout_graph().compile(checkpointer=official)
    BROKEN.add(2)
    with pytest.raises(RuntimeError, match="item 2 failed"):
        fan_g.invoke({"items": [1, 2, 3]}, config("fanout"), durability="sync")
    graphs["fanout"] = fanout_graph
    chat_g = chat_graph().compile(checkpointer=official)
    for turn in range(7):
        chat_g.invoke({"log": [f"human {turn}"], "turn": turn}, config("chat"), durability="sync")
    graphs["chat"] = chat_graph
    write_legacy_thread(official, "legacy")
    return graphs


def everything(saver: Any, thread_id: str) -> list[CheckpointTuple]:
    return list(saver.list(config(thread_id)))


def assert_same_threads(official: OfficialSaver, ours: PostgresSaver, threads: Any) -> None:
    for thread_id in threads:
        theirs = everything(official, thread_id)
        assert theirs, thread_id
        assert everything(ours, thread_id) == theirs, thread_id
        for tup in theirs:
            assert ours.get_tuple(tup.config) == tup
        for ns in {t.config["configurable"]["checkpoint_ns"] for t in theirs}:
            latest: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            assert ours.get_tuple(latest) == official.get_tuple(latest)


# -- tests --------------------------------------------------------------------------------


def test_imported_threads_read_back_like_the_official_saver(
    db_dsn: str, official: OfficialSaver, written: dict[str, Any], capsys: Any
) -> None:
    assert main(["import-langgraph", "--dsn", db_dsn]) == 0
    out = capsys.readouterr().out
    assert "of 6 threads" in out
    with psycopg.connect(db_dsn) as conn:
        ours = PostgresSaver(conn)
        assert_same_threads(official, ours, written)
        assert_same_threads(official, ours, ["legacy"])
        # the legacy child got its parent's sends, as the official saver shows them
        child = ours.get_tuple(config("legacy"))
        assert child is not None
        assert child.checkpoint["channel_values"][TASKS] == [
            Send("work", {"item": 1}),
            Send("work", {"item": 2}),
        ]
        # the graph state is the same through either saver, subgraphs included
        for thread_id in ("review", "nested", "chat", "finished"):
            builder = written[thread_id]
            mine = builder().compile(checkpointer=ours).get_state(config(thread_id), subgraphs=True)
            theirs = (
                builder()
                .compile(checkpointer=official)
                .get_state(config(thread_id), subgraphs=True)
            )
            assert mine.values == theirs.values
            assert mine.next == theirs.next
            assert [t.interrupts for t in mine.tasks] == [t.interrupts for t in theirs.tasks]


async def test_async_saver_reads_imported_threads(
    db_dsn: str, official: OfficialSaver, written: dict[str, Any]
) -> None:
    assert main(["import-langgraph", "--dsn", db_dsn]) == 0
    async with AsyncPostgresSaver.from_conn_string(db_dsn, pool=True) as ours:
        for thread_id in written:
            mine = [t async for t in ours.alist(config(thread_id))]
            assert mine == everything(official, thread_id)


def test_resuming_imported_threads_through_pgcheckpoint_finishes_the_graphs(
    db_dsn: str, official: OfficialSaver, written: dict[str, Any]
) -> None:
    assert main(["import-langgraph", "--dsn", db_dsn]) == 0
    with psycopg.connect(db_dsn) as conn:
        ours = PostgresSaver(conn)

        review_g = review_graph().compile(checkpointer=ours)
        result = review_g.invoke(Command(resume="ship it"), config("review"), durability="sync")
        assert result["decision"] == "ship it"
        assert result["audit"] == ["audited 2 messages"]  # audit's pending write, not re-run
        assert review_g.get_state(config("review")).next == ()

        nested_g = nested_graph().compile(checkpointer=ours)
        result = nested_g.invoke(Command(resume="42"), config("nested"), durability="sync")
        assert result["steps"][-2:] == ["inner b got 42", "finish"]
        assert nested_g.get_state(config("nested")).next == ()

        BROKEN.clear()
        fan_g = fanout_graph().compile(checkpointer=ours)
        result = fan_g.invoke(None, config("fanout"), durability="sync")
        assert sorted(result["results"]) == ["done 1", "done 2", "done 3"]
        # items 1 and 3 finished before the failure: their writes were imported
        assert CALLS == {1: 1, 2: 2, 3: 1}

        chat_g = chat_graph().compile(checkpointer=ours)
        result = chat_g.invoke({"log": ["human 7"], "turn": 7}, config("chat"), durability="sync")
        assert result["log"][-2:] == ["human 7", "reply 7"]
        assert len(result["log"]) == 16


def test_import_is_idempotent(
    db_dsn: str, official: OfficialSaver, written: dict[str, Any], capsys: Any
) -> None:
    assert main(["import-langgraph", "--dsn", db_dsn]) == 0
    counts = rows_of(db_dsn)
    capsys.readouterr()
    assert main(["import-langgraph", "--dsn", db_dsn]) == 0
    assert "copied 0 checkpoints of 6 threads" in capsys.readouterr().out
    assert rows_of(db_dsn) == counts
    with psycopg.connect(db_dsn) as conn:
        assert_same_threads(official, PostgresSaver(conn), written)


def test_interrupted_import_resumes(
    db_dsn: str,
    official: OfficialSaver,
    written: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    pages = 0
    real = LangGraphImporter.page_params

    def dies_after_three_pages(self: LangGraphImporter, *args: Any, **kwargs: Any) -> Any:
        nonlocal pages
        pages += 1
        if pages > 3:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LangGraphImporter, "page_params", dies_after_three_pages)
    assert main(["import-langgraph", "--dsn", db_dsn, "--batch-size", "2"]) == 130
    assert rows_of(db_dsn)["pgc_checkpoints"] > 0
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["import-langgraph", "--dsn", db_dsn, "--batch-size", "2"]) == 0
    assert "were already there" in capsys.readouterr().out
    with psycopg.connect(db_dsn) as conn:
        assert_same_threads(official, PostgresSaver(conn), written)


def test_writes_added_after_an_import_arrive_on_the_next_run(
    db_dsn: str, official: OfficialSaver, written: dict[str, Any]
) -> None:
    assert main(["import-langgraph", "--dsn", db_dsn, "--thread", "review"]) == 0
    latest = official.get_tuple(config("review"))
    assert latest is not None
    official.put_writes(latest.config, [("audit", ["late"])], task_id=str(uuid.uuid4()))
    assert main(["import-langgraph", "--dsn", db_dsn, "--thread", "review"]) == 0
    with psycopg.connect(db_dsn) as conn:
        ours = PostgresSaver(conn)
        assert_same_threads(official, ours, ["review"])
        assert ours.get_tuple(config("fanout")) is None  # --thread copied that one only


def test_import_from_another_schema_and_database_into_a_custom_schema(
    db_dsn: str, empty_db_dsn: str, capsys: Any
) -> None:
    # the official tables live in schema "legacy" of another database
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA legacy")
    legacy_dsn = make_conninfo(empty_db_dsn, options="-c search_path=legacy")
    with OfficialSaver.from_conn_string(legacy_dsn) as source:
        source.setup()
        graph = review_graph().compile(checkpointer=source)
        graph.invoke({"messages": [HumanMessage("hi")]}, config("t1"), durability="sync")
        upgrade(db_dsn, schema="tenant_a")
        code = main(
            [
                "import-langgraph",
                "--dsn", db_dsn,
                "--schema", "tenant_a",
                "--from-dsn", empty_db_dsn,
                "--from-schema", "legacy",
            ]
        )  # fmt: skip
        assert code == 0, capsys.readouterr().err
        with psycopg.connect(db_dsn) as conn:
            ours = PostgresSaver(conn, schema="tenant_a")
            assert_same_threads(source, ours, ["t1"])
            assert PostgresSaver(conn).get_tuple(config("t1")) is None


def test_missing_source_tables_and_unmigrated_target_are_explained(
    db_dsn: str, empty_db_dsn: str, capsys: Any
) -> None:
    assert main(["import-langgraph", "--dsn", db_dsn]) == 1
    err = capsys.readouterr().err
    assert "no langgraph-checkpoint-postgres table 'checkpoints'" in err
    assert "Traceback" not in err
    assert main(["import-langgraph", "--dsn", empty_db_dsn, "--from-dsn", db_dsn]) == 1
    assert "run `pgcheckpoint migrate` first" in capsys.readouterr().err


def test_a_named_thread_the_source_lacks_is_reported_not_counted(
    db_dsn: str, official: OfficialSaver, capsys: Any
) -> None:
    first = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    official.put(first, empty_checkpoint(), {"source": "input", "step": -1}, {})
    argv = ["import-langgraph", "--dsn", db_dsn, "--thread", "t1", "--thread", "nope"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "copied 1 checkpoints of 1 threads" in captured.out
    assert (
        "thread 'nope' not copied: the official saver's tables in schema 'public' have no "
        "thread 'nope'"
    ) in captured.err
    assert "1 threads were not copied" in captured.err


def test_the_help_says_the_import_does_not_migrate(capsys: Any) -> None:
    assert main(["import-langgraph", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "It does not create or upgrade those: run `pgcheckpoint migrate` first." in text
    assert "migrated first" not in text

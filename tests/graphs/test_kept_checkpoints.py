"""Every delete that keeps checkpoints leaves them reading as they did.

A checkpoint a prune, a retention sweep (keep_latest, keep_last, the pg_cron
procedure) or `delete_for_runs` keeps must read back as before: its state
(`get_state`, pending writes and interrupts included) and the history of each
DeltaChannel (`get_delta_channel_history`, seed and writes). And the thread
must go on as it would have: a `checkpointer=True` subgraph from the state of
its last call. The model-based test plays random threads on real graphs
(DeltaChannels with and without snapshots, a subgraph call and a
`checkpointer=True` subgraph, interrupts and resumes, forks by `update_state`
on an earlier checkpoint), records what each checkpoint reads, applies each
strategy to a copy of the thread, and compares. The focused tests are the
reported cases.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver
from langgraph.checkpoint.serde.types import TASKS, _DeltaSnapshot
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt
from support.chat import append

from pgcheckpoint import PostgresSaver
from pgcheckpoint.maintenance.importer import LangGraphImporter, import_sweep
from pgcheckpoint.maintenance.stats import storage_stats_op
from pgcheckpoint.resources import sql_dir

NO_ROWS = {"checkpoints": 0, "blobs": 0, "writes": 0, "bytes": 0}
Key = tuple[str, str]  # (checkpoint_ns, checkpoint_id)


def config(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def listed(saver: PostgresSaver, thread_id: str) -> dict[Key, Any]:
    """Every checkpoint of a thread, any namespace: (ns, id) -> its tuple."""
    return {
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]): t
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    }


def assert_nothing_unreachable(saver: PostgresSaver) -> None:
    assert saver.run(storage_stats_op(saver.schema, top=0)).unreachable == NO_ROWS


# -- the graph ----------------------------------------------------------------------------


def delta_or_list(snapshot_every: int | None) -> Any:
    """A DeltaChannel of lists (None: a plain list reducer instead)."""
    if snapshot_every is None:
        return Annotated[list, lambda a, b: a + b]
    return Annotated[list, DeltaChannel(append, snapshot_frequency=snapshot_every)]


def build(snapshot_every: int | None, memo_every: int | None) -> StateGraph[Any]:
    """step -> research (a subgraph call) -> memo (a checkpointer=True subgraph) -> gate.

    `m` is the root's DeltaChannel, written by the input and on even turns;
    `memo` keeps `notes`, a DeltaChannel of its own, across calls; `gate`
    interrupts every third turn.
    """
    # functional TypedDicts: their annotations are made here, not read from strings
    memo_state = TypedDict("Memo", {"notes": delta_or_list(memo_every), "n": int})  # type: ignore[misc]  # noqa: UP013
    research_state = TypedDict("Research", {"n": int, "hit": str})  # noqa: UP013
    root_state = TypedDict(  # type: ignore[misc]  # noqa: UP013
        "Root", {"m": delta_or_list(snapshot_every), "n": int, "hit": str, "answer": str}
    )
    memo = StateGraph(memo_state)
    memo.add_node("note", lambda s: {"notes": [f"note {s['n']}"]})
    memo.add_edge(START, "note")
    memo.add_edge("note", END)
    research = StateGraph(research_state)
    research.add_node("search", lambda s: {"hit": f"hit {s['n']}"})
    research.add_edge(START, "search")
    research.add_edge("search", END)

    def gate(state: dict[str, Any]) -> dict[str, Any]:
        if state["n"] % 3 == 2:
            return {"answer": interrupt(f"go on after {state['n']}?")}
        return {}

    builder = StateGraph(root_state)
    builder.add_node("step", lambda s: {"m": [f"step {s['n']}"]} if s["n"] % 2 == 0 else {})
    builder.add_node("research", research.compile())
    builder.add_node("memo", memo.compile(checkpointer=True))
    builder.add_node("gate", gate)
    builder.add_edge(START, "step")
    builder.add_edge("step", "research")
    builder.add_edge("research", "memo")
    builder.add_edge("memo", "gate")
    builder.add_edge("gate", END)
    return builder


@dataclass
class Played:
    """A thread played on a graph: the graph, its DeltaChannels per namespace, its runs."""

    graph: Any
    thread_id: str
    delta: dict[str, list[str]]  # "" and "memo" -> DeltaChannel names
    runs: list[str] = field(default_factory=list)


def play(saver: PostgresSaver, rng: random.Random, thread_id: str) -> Played:
    snapshot_every = rng.choice([1, 2, 3, None])
    # a thread without DeltaChannels now and then, which the pg_cron procedure prunes
    memo_every = rng.choice([1, 2, None]) if snapshot_every else None
    graph = build(snapshot_every, memo_every).compile(checkpointer=saver)
    played = Played(
        graph,
        thread_id,
        {"": ["m"] if snapshot_every else [], "memo": ["notes"] if memo_every else []},
    )

    def run(value: Any, at: Any = None) -> Any:
        run_id = str(uuid.uuid4())
        played.runs.append(run_id)
        return graph.invoke(value, {**(at or config(thread_id)), "run_id": run_id})

    turns = rng.randint(3, 5)
    for turn in range(turns):
        value: dict[str, Any] = {"n": turn}
        if rng.random() < 0.7:
            value["m"] = [f"human {turn}"]
        out = run(value)
        # resume, except perhaps the last turn's interrupt, left pending at the head
        if "__interrupt__" in out and (turn < turns - 1 or rng.random() < 0.5):
            run(Command(resume=rng.choice(["yes", "no"])))
        if rng.random() < 0.4:
            # fork: a new value on an earlier root checkpoint, and run on from there
            history = list(graph.get_state_history(config(thread_id)))
            earlier = rng.choice(history[1:] or history)
            forked = graph.update_state(earlier.config, {"m": [f"fork {turn}"], "n": 10 + turn})
            out = run(None, forked)
            if "__interrupt__" in out:
                run(Command(resume="fork"), config(thread_id))
    return played


# -- what a checkpoint reads ---------------------------------------------------------------


def reads(saver: PostgresSaver, played: Played, thread_id: str, key: Key) -> Any:
    """What a checkpoint reads back: its state, pending writes and DeltaChannel histories."""
    ns, checkpoint_id = key
    at = config(thread_id, ns, checkpoint_id)
    state = played.graph.get_state(at)
    tup = saver.get_tuple(at)
    assert tup is not None
    channels = played.delta.get(ns.split(":", 1)[0], [])
    return {
        "values": state.values,
        "next": state.next,
        "tasks": [(t.name, [i.value for i in t.interrupts]) for t in state.tasks],
        "metadata": tup.metadata,
        "channel_values": tup.checkpoint["channel_values"],
        "pending_writes": sorted(map(repr, tup.pending_writes or [])),
        "history": saver.get_delta_channel_history(config=at, channels=channels),
    }


class Before:
    """What the original thread's checkpoints read, recorded once each as asked."""

    def __init__(self, saver: PostgresSaver, played: Played) -> None:
        self.saver, self.played = saver, played
        self.tuples = listed(saver, played.thread_id)
        self._reads: dict[Key, Any] = {}

    def __getitem__(self, key: Key) -> Any:
        if key not in self._reads:
            self._reads[key] = reads(self.saver, self.played, self.played.thread_id, key)
        return self._reads[key]

    def namespaces(self) -> dict[str, list[str]]:
        """Each namespace's checkpoint ids, newest first."""
        out: dict[str, list[str]] = {}
        for ns, checkpoint_id in sorted(self.tuples, key=lambda k: k[1], reverse=True):
            out.setdefault(ns, []).append(checkpoint_id)
        return out


def copy_of(saver: PostgresSaver, played: Played, name: str) -> str:
    target = f"{played.thread_id}-{name}"
    saver.copy_thread(played.thread_id, target)
    return target


def check_kept(
    saver: PostgresSaver, before: Before, thread_id: str, kept: set[Key], label: str
) -> None:
    """The checkpoints a strategy keeps read as before; those a later read goes on from
    stay (the root's and the checkpointer=True subgraph's), as do the subgraph calls
    that ran from a root checkpoint that stays; nothing is left that no read reaches."""
    after = listed(saver, thread_id)
    for key in sorted(kept):
        ns, _ = key
        ran_from = before.tuples[key].metadata.get("parents", {}).get("")
        must_stay = ":" not in ns or ("", ran_from) in after
        if key not in after:
            assert not must_stay, (label, key, "deleted")
            continue
        assert reads(saver, before.played, thread_id, key) == before[key], (label, key)
    assert_nothing_unreachable(saver)


def newest(before: Before, n: int) -> set[Key]:
    return {(ns, c) for ns, ids in before.namespaces().items() for c in ids[:n]}


def age(db_dsn: str, thread_id: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgc_checkpoints SET created_at = created_at - interval '40 days'"
            " WHERE thread_id = %s",
            [thread_id],
        )


# -- the model-based test ------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_every_strategy_keeps_what_the_kept_checkpoints_read(db_dsn: str, seed: int) -> None:
    rng = random.Random(seed)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        played = play(saver, rng, f"t{seed}")
        before = Before(saver, played)
        copies = {
            name: copy_of(saver, played, name)
            for name in ("latest", "cron", "older", "runs", "last", "gone", "ref")
        }
        # delete_for_runs goes by run id: the copy's runs get ids of their own
        conn.execute(
            "UPDATE pgc_checkpoints SET run_id = run_id || '-runs' WHERE thread_id = %s",
            [copies["runs"]],
        )
        conn.execute((sql_dir() / "retention.sql").read_text(encoding="utf-8"))

        saver.prune([copies["latest"]], strategy="keep_latest")
        check_kept(saver, before, copies["latest"], newest(before, 1), "keep_latest")
        # and the thread goes on from where it was, the memo subgraph from its last call
        for thread_id in (copies["latest"], copies["ref"]):
            played.graph.invoke({"n": 20, "m": ["one more"]}, config(thread_id))
        latest_state = played.graph.get_state(config(copies["latest"]))
        assert latest_state.values == played.graph.get_state(config(copies["ref"])).values
        memo_after = played.graph.get_state(config(copies["latest"]), subgraphs=True)
        memo_ref = played.graph.get_state(config(copies["ref"]), subgraphs=True)
        assert [t.state for t in memo_after.tasks] == [t.state for t in memo_ref.tasks]

        age(db_dsn, copies["cron"])
        conn.execute("CALL pgcheckpoint_prune('30 days', 'keep_latest', 1000, 'public', NULL)")
        if any(played.delta.values()):  # left whole: prune those with the sweep
            assert listed(saver, copies["cron"]).keys() == before.tuples.keys()
        else:
            check_kept(saver, before, copies["cron"], newest(before, 1), "pg_cron")

        age(db_dsn, copies["older"])
        saver.prune_older_than(timedelta(days=30), strategy="keep_latest")
        check_kept(saver, before, copies["older"], newest(before, 1), "older_than")

        doomed_run = rng.choice(played.runs)
        saver.delete_for_runs([f"{doomed_run}-runs"])
        others = {k for k, t in before.tuples.items() if t.metadata.get("run_id") != doomed_run}
        check_kept(saver, before, copies["runs"], others, "delete_for_runs")

        saver.prune([copies["gone"]], strategy="delete")
        assert listed(saver, copies["gone"]) == {}

        # last: keep_last trims every thread of the database
        saver.prune_keep_last(2)
        check_kept(saver, before, copies["last"], newest(before, 2), "keep_last")


# -- the reported cases ------------------------------------------------------------------


def test_keep_latest_keeps_the_snapshot_that_seeds_the_heads_history(db_dsn: str) -> None:
    """snapshot_frequency=1: the head stores its DeltaChannel (a snapshot), and so does
    its parent, which seeds the head's history: the prune kept the head alone, and
    `get_delta_channel_history` lost its seed."""
    state = TypedDict("State", {"m": delta_or_list(1), "n": int})  # type: ignore[misc]  # noqa: UP013
    builder = StateGraph(state)
    builder.add_node("a", lambda s: {"m": [1]})
    builder.add_node("b", lambda s: {"n": 1})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"m": []}, config("t"))
        head = saver.get_tuple(config("t"))
        assert head is not None
        history = saver.get_delta_channel_history(config=head.config, channels=["m"])
        assert history == {"m": {"writes": [], "seed": _DeltaSnapshot([1])}}
        saver.prune(["t"], strategy="keep_latest")
        assert saver.get_delta_channel_history(config=head.config, channels=["m"]) == history
        assert graph.get_state(config("t")).values == {"m": [1], "n": 1}


def test_keep_latest_keeps_the_seed_of_a_thread_marked_delta_writes_versioned(
    db_dsn: str,
) -> None:
    """LangGraph.js marks its DeltaChannel threads `delta_writes_versioned` and keeps no
    counters: the prune, going by the counters, kept the head alone."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        at = config("js")
        for step in range(4):
            version = f"{step + 1:032}.0"
            checkpoint = {
                "v": 4,
                "id": str(uuid6()),
                "ts": datetime.now(timezone.utc).isoformat(),
                # the first one stores the seed; the others only move the version
                "channel_values": {"m": ["seed"]} if step == 0 else {},
                "channel_versions": {"m": version},
                "versions_seen": {},
                "updated_channels": ["m"],
            }
            metadata = {"source": "loop", "step": step, "delta_writes_versioned": True}
            at = saver.put(at, checkpoint, metadata, {"m": version})  # type: ignore[arg-type]
            saver.put_writes(at, [("m", [f"w{step}"])], f"task-{step}")
        history = saver.get_delta_channel_history(config=at, channels=["m"])
        assert history["m"]["seed"] == ["seed"]
        assert [w[2] for w in history["m"]["writes"]] == [["w0"], ["w1"], ["w2"]]
        saver.prune(["js"], strategy="keep_latest")
        assert saver.get_delta_channel_history(config=at, channels=["m"]) == history


def test_a_checkpointer_true_subgraph_keeps_its_latest_checkpoint(db_dsn: str) -> None:
    """Its namespace has no task id, and its last call ran from a root checkpoint the
    prune deletes: the prune took the namespace whole, and the next call started over."""

    def remember(state: dict[str, Any]) -> dict[str, Any]:
        return {"seen": [len(state["seen"])]}

    memo = StateGraph(TypedDict("Memo", {"seen": Annotated[list, lambda a, b: a + b]}))  # type: ignore[misc]
    memo.add_node("remember", remember)
    memo.add_edge(START, "remember")
    memo.add_edge("remember", END)
    builder = StateGraph(TypedDict("Root", {"calls": int}))  # type: ignore[misc]
    builder.add_node("memo", memo.compile(checkpointer=True))
    builder.add_edge(START, "memo")
    builder.add_edge("memo", END)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        graph = builder.compile(checkpointer=saver)
        for call in range(2):
            graph.invoke({"calls": call}, config("t"))
        memo_head = saver.get_tuple(config("t", "memo"))
        assert memo_head is not None
        saver.prune(["t"], strategy="keep_latest")
        kept = saver.get_tuple(config("t", "memo"))
        assert kept is not None
        assert (kept.config, kept.checkpoint) == (memo_head.config, memo_head.checkpoint)
        graph.invoke({"calls": 2}, config("t"))
        state = graph.get_state(config("t"), subgraphs=True)
        assert state.values == {"calls": 2}
        memo_now = saver.get_tuple(config("t", "memo"))
        assert memo_now is not None
        assert memo_now.checkpoint["channel_values"]["seen"] == [0, 1, 2]
        assert_nothing_unreachable(saver)


# -- imported threads ------------------------------------------------------------------


def test_imported_threads_keep_their_sends_and_seeds_through_a_prune(db_dsn: str) -> None:
    """A checkpoint older than format v4 kept its step's sends as writes of its parent,
    and a DeltaChannel chat of the official saver keeps its snapshots as blobs behind
    an inline marker: imported, then pruned, each head reads as the official saver
    reads it."""
    with OfficialSaver.from_conn_string(db_dsn) as official:
        official.setup()
        parent = {
            "v": 1,
            "id": str(uuid6()),
            "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": {"count": 1},
            "channel_versions": {"count": 1},
            "versions_seen": {},
            "pending_sends": [],
        }
        parent_config = official.put(config("legacy"), parent, {"step": 0}, {"count": 1})  # type: ignore[arg-type]
        sends = [(TASKS, Send("work", {"item": 1})), (TASKS, Send("work", {"item": 2}))]
        official.put_writes(parent_config, sends, task_id="sender")
        child = {**parent, "id": str(uuid6()), "channel_values": {"count": 2}}
        child["channel_versions"] = {"count": 2}
        official.put(parent_config, child, {"step": 1}, {"count": 2})  # type: ignore[arg-type]
        chat = build(2, None).compile(checkpointer=official)
        for turn in range(4):
            out = chat.invoke({"n": turn, "m": [f"human {turn}"]}, config("chat"))
            if "__interrupt__" in out:
                chat.invoke(Command(resume="yes"), config("chat"))
        theirs = {t: official.get_tuple(config(t)) for t in ("legacy", "chat")}
        their_history = official.get_delta_channel_history(
            config=theirs["chat"].config,  # type: ignore[union-attr]
            channels=["m"],
        )
        their_values = chat.get_state(config("chat")).values
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        # the source: a saver of the schema with the official tables, here the same
        stats = saver.run_each(import_sweep(LangGraphImporter(saver), saver))
        assert stats.failed == {}
        saver.prune(["legacy", "chat"], strategy="keep_latest")
        for thread_id, tup in theirs.items():
            mine = saver.get_tuple(config(thread_id))
            assert mine is not None and tup is not None
            assert mine.checkpoint["channel_values"] == tup.checkpoint["channel_values"]
            assert mine.pending_writes == tup.pending_writes
        legacy = saver.get_tuple(config("legacy"))
        assert legacy is not None
        assert legacy.checkpoint["channel_values"][TASKS] == [s for _, s in sends]
        mine_history = saver.get_delta_channel_history(
            config=saver.get_tuple(config("chat")).config,  # type: ignore[union-attr]
            channels=["m"],
        )
        assert mine_history == their_history
        graph = build(2, None).compile(checkpointer=saver)
        assert graph.get_state(config("chat")).values == their_values


@pytest.mark.parametrize("by", ["prune", "sweep", "pg_cron"])
def test_keep_latest_keeps_the_parent_holding_a_pre_v4_heads_sends(db_dsn: str, by: str) -> None:
    """A checkpoint older than format v4 has its step's sends as writes of its parent."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        at = config("legacy")
        ids = []
        for step in range(3):
            checkpoint = {
                "v": 1,
                "id": str(uuid6()),
                "ts": datetime.now(timezone.utc).isoformat(),
                "channel_values": {},
                "channel_versions": {},
                "versions_seen": {},
                "pending_sends": [],
            }
            at = saver.put(at, checkpoint, {"step": step}, {})  # type: ignore[arg-type]
            ids.append(at["configurable"]["checkpoint_id"])
            saver.put_writes(at, [(TASKS, f"send-{step}")], f"sender-{step}")
        head = saver.get_tuple(at)
        if by == "prune":
            saver.prune(["legacy"], strategy="keep_latest")
        else:
            age(db_dsn, "legacy")
            if by == "sweep":
                saver.prune_older_than(timedelta(days=30), strategy="keep_latest")
            else:
                conn.execute((sql_dir() / "retention.sql").read_text(encoding="utf-8"))
                conn.execute("CALL pgcheckpoint_prune('30 days', 'keep_latest')")
        assert sorted(listed(saver, "legacy")) == [("", ids[1]), ("", ids[2])]
        kept = saver.get_tuple(at)
        assert kept is not None and head is not None
        assert kept.parent_config == head.parent_config
        parent = saver.get_tuple(config("legacy", "", ids[1]))
        assert parent is not None and parent.pending_writes == [("sender-1", TASKS, "send-1")]

"""Model-based testing: random sequences of calls give InMemorySaver's answers.

A hypothesis `RuleBasedStateMachine` applies the same random sequence of put,
put_writes, get_tuple, list (filters, `before`, `limit`), delete_thread,
copy_thread, prune and delete_for_runs to pgcheckpoint and to a model:
LangGraph's `InMemorySaver`, plus the three maintenance calls it lacks, written
from `BaseCheckpointSaver`'s docstrings (`SaverModel`). After every step the
whole visible state of both is compared.

One rule races a delete (delete_thread, prune, delete_for_runs) against a put
on another connection: the database must end as if one of the two ran first,
the put refused with `MissingParentError` when the delete took its parent.

The sync driver runs over one connection the test opened with psycopg's
defaults; the async one over an `AsyncConnectionPool` on an event loop in
another thread, called through its sync methods (each one a coroutine of the
async driver, run on that loop). Each example works in threads of its own
(a fresh token in every id), so one database serves every example.

Where the two may legitimately differ, the comparison says so:
- `list` across threads or namespaces orders by checkpoint id, newest first
  (InMemorySaver walks thread by thread); a copied thread shares its source's
  checkpoint ids, and the order among equal ids is not defined.
- A batch of writes mixing special channels (`__error__`...) and regular ones
  is not generated: the official saver and this one insert such a batch as
  regular writes, where InMemorySaver replaces the special ones.
- Pruning deletes a subgraph namespace that ran from a deleted checkpoint; the
  model's checkpoints name no parent checkpoint (`parents` is empty), so it
  goes when every one of its checkpoints is older than every checkpoint its
  parent namespace keeps (see `hanging_namespaces` in sql/queries/).
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from support.savers import async_saver_in_thread

from pgcheckpoint import MissingParentError, PostgresSaver

THREADS = 4
NAMESPACES = ("", "child:1")
RUNS = 3
TAGS = ("red", "green", "blue")
CHANNELS = ("items", "count", "doc")  # a growing list (deltas), an int (inline), a dict
TASKS = ("task-a", "task-b")
PATHS = ("", "~__pregel_pull, node")
SETTINGS = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


PUT_ARGS = {
    "thread": st.integers(0, THREADS - 1),
    "ns": st.sampled_from(NAMESPACES),
    "run": st.integers(0, RUNS - 1),
    "tag": st.sampled_from(TAGS),
    "changed": st.sets(st.sampled_from(CHANNELS)),
    "append": st.booleans(),
}


def has_history(machine: SaverMachine) -> bool:
    """Deletions wait for a few checkpoints, so they have something to choose from."""
    return len(machine.stored()) >= 4


class SaverModel(InMemorySaver):
    """InMemorySaver with copy_thread, prune and delete_for_runs as LangGraph documents them."""

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        # like the saver under test, never overwrites what the target already has
        for ns, saved in list(self.storage.get(source_thread_id, {}).items()):
            target = self.storage[target_thread_id][ns]
            for checkpoint_id, entry in saved.items():
                target.setdefault(checkpoint_id, entry)
        for (thread_id, ns, checkpoint_id), writes in list(self.writes.items()):
            if thread_id == source_thread_id:
                target_writes = self.writes[(target_thread_id, ns, checkpoint_id)]
                for key, write in writes.items():
                    target_writes.setdefault(key, write)
        for (thread_id, ns, channel, version), blob in list(self.blobs.items()):
            if thread_id == source_thread_id:
                self.blobs.setdefault((target_thread_id, ns, channel, version), blob)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            doomed = {
                (ns, c)
                for ns, saved in self.storage.get(thread_id, {}).items()
                for c in saved
                if c != max(saved)
            }
            self._drop_all(thread_id, doomed)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        for thread_id, namespaces in list(self.storage.items()):
            doomed = {
                (ns, checkpoint_id)
                for ns, saved in namespaces.items()
                for checkpoint_id, (_, metadata, _) in saved.items()
                if self.serde.loads_typed(metadata).get("run_id") in run_ids
            }
            if doomed:
                self._drop_all(thread_id, doomed)

    def _drop_all(self, thread_id: str, doomed: set[tuple[str, str]]) -> None:
        """Drop checkpoints, with the subgraph namespaces that hang off none left."""
        saved = self.storage.get(thread_id, {})
        hanging: set[str] = set()
        for ns in sorted(saved, key=lambda n: n.count("|")):
            if not ns or not saved[ns]:
                continue
            parent_ns = ns.rsplit("|", 1)[0] if "|" in ns else ""
            kept = [c for c in saved.get(parent_ns, {}) if (parent_ns, c) not in doomed]
            # the model's checkpoints name no parent: ids decide (they grow with time)
            if parent_ns in hanging or not kept or max(saved[ns]) < min(kept):
                hanging.add(ns)
        doomed = doomed | {(ns, c) for ns in hanging for c in saved[ns]}
        for ns, checkpoint_id in sorted(doomed):
            self._drop(thread_id, ns, checkpoint_id)

    def _drop(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        saved = self.storage[thread_id][ns]
        del saved[checkpoint_id]
        self.writes.pop((thread_id, ns, checkpoint_id), None)
        # pgcheckpoint's choice (sql/queries/maintenance.sql, delete_checkpoints): a kept
        # checkpoint whose parent went is left without one
        for child, (checkpoint, metadata, parent) in list(saved.items()):
            if parent == checkpoint_id:
                saved[child] = (checkpoint, metadata, None)


def key(tup: CheckpointTuple) -> tuple[str, str, str]:
    conf = tup.config["configurable"]
    return (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"])


def normal(tup: CheckpointTuple | None) -> Any:
    """What a caller reads from a tuple, comparable across savers."""
    if tup is None:
        return None
    parent = tup.parent_config["configurable"] if tup.parent_config else None
    return (
        key(tup),
        tup.checkpoint,
        tup.metadata,
        None
        if parent is None
        else (parent["thread_id"], parent["checkpoint_ns"], parent["checkpoint_id"]),
        [tuple(w) for w in tup.pending_writes or []],
    )


def assert_same_listing(
    ours: list[CheckpointTuple], reference: list[CheckpointTuple], limit: int | None
) -> None:
    """`ours` is `reference` newest first, cut at `limit`, in any order among equal ids."""
    everything = {key(t): normal(t) for t in reference}
    expected_ids = sorted((k[2] for k in everything), reverse=True)[:limit]
    assert [key(t)[2] for t in ours] == expected_ids
    assert len({key(t) for t in ours}) == len(ours)
    for tup in ours:
        assert key(tup) in everything, key(tup)
        assert normal(tup) == everything[key(tup)]


class SaverMachine(RuleBasedStateMachine):
    """The same calls on pgcheckpoint (`saver`, set by the test) and on `SaverModel`."""

    saver: Any
    other: Any  # the same database through another connection, for the races

    def __init__(self) -> None:
        super().__init__()
        self.token = uuid.uuid4().hex[:12]
        self.model = SaverModel()
        self.step = 0

    # -- helpers --------------------------------------------------------------------

    def thread(self, index: int) -> str:
        return f"{self.token}-t{index}"

    def run_id(self, index: int) -> str:
        return f"{self.token}-run{index}"

    def stored(self) -> list[RunnableConfig]:
        """A config for every checkpoint the model holds, in a stable order."""
        return [
            {"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": c}}
            for t, namespaces in sorted(self.model.storage.items())
            for ns, saved in sorted(namespaces.items())
            for c in sorted(saved)
        ]

    def value(self, channel: str, previous: Any, append: bool, tag: str) -> Any:
        if channel == "items":
            if append and isinstance(previous, list):
                return [*previous, {"step": self.step, "tag": tag}]
            return [f"fresh {self.step}"]
        if channel == "count":
            return self.step
        return {"step": self.step, "tag": tag, "nested": {"list": [self.step, tag]}}

    def both(self, method: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        ours = getattr(self.saver, method)(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        theirs = getattr(self.model, method)(*args, **kwargs)
        return ours, theirs

    # -- rules ----------------------------------------------------------------------

    # Two rules that put, so that puts come about twice as often as any other
    # call and threads grow long enough between deletions to have a history.
    @rule(**PUT_ARGS)
    def put(self, **args: Any) -> None:
        self.put_child(**args)

    @rule(**PUT_ARGS)
    def put_more(self, **args: Any) -> None:
        self.put_child(**args)

    def put_child(
        self, thread: int, ns: str, run: int, tag: str, changed: set[str], append: bool
    ) -> None:
        """A child of the latest checkpoint, as a graph's next super-step makes."""
        args = self.child_of_latest(thread, ns, run, tag, changed, append)
        ours, theirs = self.both("put", *args)
        assert ours == theirs

    def child_of_latest(
        self, thread: int, ns: str, run: int, tag: str, changed: set[str], append: bool
    ) -> tuple[Any, ...]:
        """The arguments of a put of a child of the model's latest checkpoint."""
        self.step += 1
        config: RunnableConfig = {
            "configurable": {"thread_id": self.thread(thread), "checkpoint_ns": ns}
        }
        parent = self.model.get_tuple(config)
        values: dict[str, Any] = {}
        versions: dict[str, Any] = {}
        if parent is None:
            changed = set(CHANNELS)
        else:
            config["configurable"]["checkpoint_id"] = key(parent)[2]
            values = dict(parent.checkpoint["channel_values"])
            versions = dict(parent.checkpoint["channel_versions"])
        new_versions = {}
        for channel in sorted(changed):
            versions[channel] = new_versions[channel] = self.saver.get_next_version(
                versions.get(channel), None
            )
            values[channel] = self.value(channel, values.get(channel), append, tag)
        checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
        metadata = {
            "source": "loop",
            "step": self.step,
            "parents": {},
            "run_id": self.run_id(run),
            "tag": tag,
            "token": self.token,
        }
        return config, checkpoint, metadata, new_versions

    @precondition(lambda self: self.stored())
    @rule(
        data=st.data(),
        task=st.sampled_from(TASKS),
        path=st.sampled_from(PATHS),
        kind=st.sampled_from(["regular", "error", "interrupt"]),
        channels=st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=3),
    )
    def put_writes(
        self, data: st.DataObject, task: str, path: str, kind: str, channels: list[str]
    ) -> None:
        self.step += 1
        target = data.draw(st.sampled_from(self.stored()))
        if kind == "regular":
            writes = [(ch, {"write": self.step, "at": i}) for i, ch in enumerate(channels)]
        elif kind == "error":
            writes = [("__error__", f"failed at {self.step}")]
        else:
            writes = [("__interrupt__", [{"value": self.step, "id": "i"}])]
        self.both("put_writes", target, writes, task, path)

    @rule(
        data=st.data(),
        thread=st.integers(0, THREADS - 1),
        ns=st.sampled_from(NAMESPACES),
        which=st.sampled_from(["latest", "stored", "missing"]),
    )
    def get_tuple(self, data: st.DataObject, thread: int, ns: str, which: str) -> None:
        config: RunnableConfig = {
            "configurable": {"thread_id": self.thread(thread), "checkpoint_ns": ns}
        }
        if which == "stored" and self.stored():
            # possibly another thread's or namespace's id: found only where it lives
            other = data.draw(st.sampled_from(self.stored()))
            config["configurable"]["checkpoint_id"] = other["configurable"]["checkpoint_id"]
        elif which == "missing":
            config["configurable"]["checkpoint_id"] = generate_checkpoint()["id"]
        ours, theirs = self.both("get_tuple", config)
        assert normal(ours) == normal(theirs)

    @rule(
        data=st.data(),
        scope=st.sampled_from(["all", "thread", "namespace", "checkpoint"]),
        thread=st.integers(0, THREADS - 1),
        ns=st.sampled_from(NAMESPACES),
        filter_by=st.sampled_from(["none", "tag", "run", "step", "tag+run"]),
        tag=st.sampled_from(TAGS),
        run=st.integers(0, RUNS - 1),
        before=st.sampled_from(["none", "stored", "now"]),
        limit=st.none() | st.integers(0, 4),
    )
    def list_checkpoints(
        self,
        data: st.DataObject,
        scope: str,
        thread: int,
        ns: str,
        filter_by: str,
        tag: str,
        run: int,
        before: str,
        limit: int | None,
    ) -> None:
        config: RunnableConfig | None = None
        if scope != "all":
            config = {"configurable": {"thread_id": self.thread(thread)}}
            if scope in ("namespace", "checkpoint"):
                config["configurable"]["checkpoint_ns"] = ns
            if scope == "checkpoint" and self.stored():
                other = data.draw(st.sampled_from(self.stored()))
                config["configurable"]["checkpoint_id"] = other["configurable"]["checkpoint_id"]
        filter: dict[str, Any] = {}
        if "tag" in filter_by:
            filter["tag"] = tag
        if "run" in filter_by:
            filter["run_id"] = self.run_id(run)
        if filter_by == "step":
            filter["step"] = data.draw(st.integers(0, self.step))
        if config is None:
            filter["token"] = self.token  # only this example's threads
        before_config: RunnableConfig | None = None
        if before == "stored" and self.stored():
            before_config = data.draw(st.sampled_from(self.stored()))  # any thread's
        elif before == "now":
            before_config = {"configurable": {"checkpoint_id": generate_checkpoint()["id"]}}
        ours = list(
            self.saver.list(
                copy.deepcopy(config), filter=filter or None, before=before_config, limit=limit
            )
        )
        reference = list(self.model.list(config, filter=filter or None, before=before_config))
        assert_same_listing(ours, reference, limit)

    @precondition(has_history)
    @rule(thread=st.integers(0, THREADS - 1))
    def delete_thread(self, thread: int) -> None:
        self.both("delete_thread", self.thread(thread))

    @precondition(has_history)
    @rule(source=st.integers(0, THREADS - 1), to=st.integers(0, THREADS - 1))
    def copy_thread(self, source: int, to: int) -> None:
        self.both("copy_thread", self.thread(source), self.thread(to))

    @precondition(has_history)
    @rule(
        threads=st.sets(st.integers(0, THREADS - 1), max_size=THREADS),
        strategy=st.sampled_from(["keep_latest", "delete"]),
    )
    def prune(self, threads: set[int], strategy: str) -> None:
        self.both("prune", [self.thread(t) for t in sorted(threads)], strategy=strategy)

    @precondition(has_history)
    @rule(runs=st.sets(st.integers(0, RUNS - 1), max_size=RUNS))
    def delete_for_runs(self, runs: set[int]) -> None:
        self.both("delete_for_runs", [self.run_id(r) for r in sorted(runs)])

    @precondition(has_history)
    @rule(
        kind=st.sampled_from(["delete_thread", "keep_latest", "delete", "delete_for_runs"]),
        victim=st.integers(0, THREADS - 1),
        runs=st.sets(st.integers(0, RUNS - 1), min_size=1, max_size=RUNS),
        delay=st.sampled_from([0.0, 0.002, 0.01]),
        **PUT_ARGS,
    )
    def delete_racing_a_put(
        self, kind: str, victim: int, runs: set[int], delay: float, **put: Any
    ) -> None:
        """A delete and a put on another connection at once: one of them goes first."""
        args = self.child_of_latest(**put)
        if kind == "delete_thread":
            call: tuple[str, tuple[Any, ...], dict[str, Any]] = (
                "delete_thread",
                (self.thread(victim),),
                {},
            )
        elif kind == "delete_for_runs":
            call = ("delete_for_runs", ([self.run_id(r) for r in sorted(runs)],), {})
        else:
            call = ("prune", ([self.thread(victim)],), {"strategy": kind})

        def late_put() -> Any:
            time.sleep(delay)  # lets the delete start first, some of the time
            return self.other.put(*copy.deepcopy(args))

        outcome = race(
            late_put,
            lambda: getattr(self.saver, call[0])(*call[1], **call[2]),
        )
        put_first = copy.deepcopy(self.model)
        put_first.put(*copy.deepcopy(args))
        getattr(put_first, call[0])(*call[1], **call[2])
        delete_first = copy.deepcopy(self.model)
        getattr(delete_first, call[0])(*call[1], **call[2])
        conf = args[0]["configurable"]
        parent = conf.get("checkpoint_id")
        if (
            parent is None
            or parent in delete_first.storage[conf["thread_id"]][conf["checkpoint_ns"]]
        ):
            delete_first.put(*copy.deepcopy(args))
            refused = False
        else:
            refused = True
        if isinstance(outcome, MissingParentError):
            candidates = [delete_first] if refused else []
        else:
            assert not isinstance(outcome, BaseException), repr(outcome)
            candidates = [put_first] + ([] if refused else [delete_first])
        seen = visible(self.saver, self.token)
        matching = [m for m in candidates if visible(m, self.token) == seen]
        assert matching, f"{call} racing a put left a state no order of the two explains"
        self.model = matching[0]
        order = (
            "put refused"
            if isinstance(outcome, MissingParentError)
            else ("put first" if matching[0] is put_first else "delete first")
        )
        event(f"{kind} racing a put: {order}")
        # Which went first decides what the put's thread holds now; later steps
        # must not draw from a state that hangs on it (hypothesis replays them).
        self.both("delete_thread", conf["thread_id"])

    # -- after every step -------------------------------------------------------------

    @invariant()
    def everything_reads_the_same(self) -> None:
        everything = {"token": self.token}
        ours = list(self.saver.list(None, filter=everything))
        reference = list(self.model.list(None, filter=everything))
        assert_same_listing(ours, reference, None)


def visible(saver: Any, token: str) -> dict[tuple[str, str, str], Any]:
    """Everything a caller reads of one example's threads, by checkpoint."""
    return {key(t): normal(t) for t in saver.list(None, filter={"token": token})}


def race(first: Callable[[], Any], second: Callable[[], Any]) -> Any:
    """Run both at once from two threads; `first`'s result or error (`second` must succeed)."""
    start = threading.Barrier(2)
    results: dict[str, Any] = {}

    def run(name: str, call: Callable[[], Any]) -> None:
        start.wait()
        try:
            results[name] = call()
        except BaseException as exc:
            results[name] = exc

    workers = [
        threading.Thread(target=run, args=("first", first)),
        threading.Thread(target=run, args=("second", second)),
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not isinstance(results.get("second"), BaseException), repr(results.get("second"))
    return results["first"]


def run_machine(saver: Any, other: Any) -> None:
    machine = type("Machine", (SaverMachine,), {"saver": saver, "other": other})
    run_state_machine_as_test(machine, settings=SETTINGS)


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_random_call_sequences_answer_as_in_memory_saver(db_dsn: str, driver: str) -> None:
    if driver == "sync":
        with psycopg.connect(db_dsn) as conn, psycopg.connect(db_dsn) as other:
            run_machine(PostgresSaver(conn), PostgresSaver(other))
    else:
        # a pool: the two calls of a race run on two of its connections
        with async_saver_in_thread(db_dsn, max_size=3) as saver:
            run_machine(saver, saver)

"""What a thread did, read from the tables without its graph: the I/O-free part.

`pgcheckpoint threads` and `pgcheckpoint show` are built on this module. Its
operations (see `pgcheckpoint.core`) yield the `inspect_*` statements of
`sql/queries.sql` and turn their rows into `CheckpointNode`s: one checkpoint
with the step and source LangGraph recorded, the nodes that ran to make it,
the channels it changed (names and stored sizes, no values), the tasks that
saved writes against it (interrupts and errors with their payload) and the
nodes it triggers. Values go through the saver core, so they are decrypted
when its serializer is an `EncryptedSerde`; a value encrypted under a key that
is not configured reads as `SEALED`.

Which nodes a checkpoint triggers. LangGraph decides it from the compiled
graph: a node runs when a channel it is triggered by holds a value newer than
the version the node last saw (`versions_seen[node][channel]`). A checkpoint
stores the versions, the values (so whether a channel holds one) and
`versions_seen`; the graph's trigger map is taken from what LangGraph writes:

- `versions_seen[node]` names the channels that triggered `node` before;
- `__start__` triggers the `__start__` node, `branch:to:NODE` and
  `join:A+B:NODE` trigger `NODE` (a barrier once every source has written);
- Send packets waiting in `__pregel_tasks` each start a task of `Send.node`.

A node that never ran and is triggered by a channel named otherwise (a
hand-built `Pregel` graph) is not seen. No private LangGraph code is used.

A thread's status is that of its latest checkpoint (see `classify`):

- `interrupted`: a task saved an `__interrupt__` write and no result; the
  thread waits for `Command(resume=...)`.
- `stopped`: nodes are triggered, or tasks saved writes or errors with no
  checkpoint after them: a crash or an error mid-step, a static breakpoint
  (`interrupt_before`/`interrupt_after`), or a run still in progress.
- `finished`: nothing is left to run.
- `unknown`: what decides it is encrypted and no key is configured.

Example:
    >>> from pgcheckpoint.threadview import triggered_nodes
    >>> triggered_nodes({"plan": {"branch:to:plan": "1"}},
    ...                 {"branch:to:plan": "2", "branch:to:act": "2"},
    ...                 {"branch:to:plan", "branch:to:act"}, {})
    ['act', 'plan']
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, TASKS
from psycopg.types.json import Jsonb

from .core import SaverCore
from .crypto import KEYS_ENV, PLAINTEXT_LABEL, cipher_label
from .errors import DecryptionError
from .locking import LOCK_CLASS_THREAD, thread_lock_key
from .ops import Op, Row, Stmt
from .validate import check_id
from .values import Sealer, binding

__all__ = [
    "SEALED",
    "ChannelChange",
    "CheckpointNode",
    "SubgraphInfo",
    "TaskInfo",
    "ThreadPage",
    "ThreadSummary",
    "TreeRow",
    "checkpoint_values_op",
    "classify",
    "jsonable",
    "recent_threads_op",
    "resolve_checkpoint_op",
    "summarize",
    "thread_page_op",
    "tree_rows",
    "triggered_nodes",
]

START = "__start__"
# Keys of versions_seen that are bookkeeping, not nodes.
_PSEUDO_NODES = frozenset({"__input__", INTERRUPT})
_BRANCH_PREFIX = "branch:to:"
_JOIN_PREFIX = "join:"
_PULL_PREFIX = "~__pregel_pull, "
_PUSH_PREFIX = "~__pregel_push, "


class _Sealed(enum.Enum):
    SEALED = "<encrypted>"

    def __repr__(self) -> str:
        return "<encrypted>"


SEALED = _Sealed.SEALED
"""A value encrypted under a key that is not configured."""


def decode_value(core: SaverCore, type_: str | None, data: bytes | None, aad: bytes) -> Any:
    """A stored value, or `SEALED` when it is encrypted and the core has no key.

    Example:
        >>> decode_value(SaverCore(), "msgpack+aesgcm:k1", b"...", b"")
        <encrypted>
    """
    if type_ is None:
        return None
    if cipher_label(type_) != PLAINTEXT_LABEL and not isinstance(core.serde, Sealer):
        return SEALED
    return core.load_value(type_, data, aad)


# -- what one checkpoint says ------------------------------------------------------


@dataclass
class ChannelChange:
    """A channel whose version differs from the parent checkpoint's.

    Attributes:
        channel: The channel name.
        version: Its new version.
        stored: `blob` (a stored value), `delta` (items appended to an earlier
            version), `inline` (kept in the checkpoint row) or `cleared` (no
            value any more, as an edge channel once its node ran).
        bytes: The stored size of a blob or delta, None otherwise.

    Example:
        >>> ChannelChange("messages", "3", "blob", 120).internal
        False
    """

    channel: str
    version: str
    stored: str
    bytes: int | None

    @property
    def internal(self) -> bool:
        """Whether LangGraph made the channel for its own routing (edges, Sends)."""
        return is_internal(self.channel)

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def is_internal(channel: str) -> bool:
    """Whether a channel is LangGraph's own (edges, barriers, Sends, `__start__`).

    Example:
        >>> is_internal("branch:to:plan"), is_internal("messages")
        (True, False)
    """
    return channel.startswith((_BRANCH_PREFIX, _JOIN_PREFIX, "__"))


@dataclass
class TaskInfo:
    """A task that saved writes against a checkpoint.

    Attributes:
        task_id: LangGraph's task id.
        name: The node the task ran, when the stored path tells it.
        path: The task path LangGraph stored with the writes.
        writes: (channel, stored bytes) of each regular write.
        interrupts: Values the task's `interrupt()` calls raised.
        interrupt_ids: The id of each interrupt (for `Command(resume={id: ...})`).
        error: What the task raised, as stored (None if it did not fail).
        resume: Values given to `Command(resume=...)` for it.

    Example:
        >>> TaskInfo("t1", "review", "", interrupts=["approve?"]).state
        'interrupted'
    """

    task_id: str
    name: str | None
    path: str
    writes: list[tuple[str, int]] = field(default_factory=list)
    interrupts: list[Any] = field(default_factory=list)
    interrupt_ids: list[str | None] = field(default_factory=list)
    error: Any = None
    resume: list[Any] = field(default_factory=list)

    @property
    def state(self) -> str:
        """`failed`, `interrupted` (waiting), `done` (a result saved) or `resume`."""
        if self.error is not None:
            return "failed"
        if self.writes:
            return "done"
        if self.interrupts:
            return "interrupted"
        return "resume"

    @property
    def label(self) -> str:
        """The node name, or a short task id when the name is unknown."""
        return self.name or f"task {self.task_id[:8]}"

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "name": self.name,
            "path": self.path,
            "state": self.state,
            "writes": [{"channel": c, "bytes": n} for c, n in self.writes],
            "interrupts": [
                {"id": i, "value": jsonable(v)}
                for v, i in zip(self.interrupts, self.interrupt_ids, strict=True)
            ],
            "error": None if self.error is None else jsonable(self.error),
            "resume": [jsonable(v) for v in self.resume],
        }


@dataclass
class SubgraphInfo:
    """A subgraph namespace that ran from a checkpoint.

    Attributes:
        checkpoint_ns: Its namespace (`node:task_id`, nested ones joined by `|`).
        checkpoints: How many checkpoints it has.
        latest: Its newest checkpoint.

    Example:
        >>> SubgraphInfo("research:1", 4, CheckpointNode("t", "research:1", "c1")).status
        'finished'
    """

    checkpoint_ns: str
    checkpoints: int
    latest: CheckpointNode

    @property
    def status(self) -> str:
        return classify(self.latest)[0]

    def as_json(self) -> dict[str, Any]:
        status, detail = classify(self.latest)
        return {
            "checkpoint_ns": self.checkpoint_ns,
            "checkpoints": self.checkpoints,
            "latest_checkpoint_id": self.latest.checkpoint_id,
            "status": status,
            "detail": detail,
        }


@dataclass
class CheckpointNode:
    """One checkpoint of a thread, summarised without its channel values.

    Attributes:
        thread_id: The thread.
        checkpoint_ns: The namespace (`""` for the root graph).
        checkpoint_id: The checkpoint.
        parent_id: The checkpoint it was made from (None for the first).
        created_at: When it was saved.
        run_id: The run that saved it, if recorded.
        metadata: LangGraph's metadata (step, source, parents, your keys).
        ran: Nodes that ran to make it (from `versions_seen`; None if encrypted).
        sent: Send tasks that ran to make it.
        next: Nodes it triggers, Send targets included (None if encrypted).
        changed: Channels whose version differs from the parent's.
        tasks: Tasks that saved writes against it.
        bytes: Stored size of the step: the row, the new values and the writes.
        children: Checkpoints made from this one (of those loaded).
        child_sources: The source of each child, loaded or not.
        fork: Whether it starts a branch: its parent has an older child.
        subgraphs: Subgraph namespaces that ran from it.

    Example:
        >>> CheckpointNode("t", "", "c2", parent_id="c1").head
        True
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None = None
    created_at: dt.datetime | None = None
    run_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    ran: list[str] | None = field(default_factory=list)
    sent: int = 0
    next: list[str] | None = field(default_factory=list)
    changed: list[ChannelChange] = field(default_factory=list)
    tasks: list[TaskInfo] = field(default_factory=list)
    bytes: int = 0
    children: list[str] = field(default_factory=list)
    child_sources: list[str | None] = field(default_factory=list)
    fork: bool = False
    subgraphs: list[SubgraphInfo] = field(default_factory=list)

    @property
    def step(self) -> int | None:
        step = self.metadata.get("step")
        return step if isinstance(step, int) else None

    @property
    def source(self) -> str | None:
        source = self.metadata.get("source")
        return source if isinstance(source, str) else None

    @property
    def head(self) -> bool:
        """Whether no checkpoint was made from this one."""
        return not self.child_sources

    @property
    def pending_writes(self) -> bool:
        """Whether tasks saved results or errors here that no checkpoint followed.

        A step's writes become its next checkpoint (source `loop`); without
        one, the step stopped part way: a crash, an error, or still running.
        """
        saved = any(t.state in ("done", "failed") for t in self.tasks)
        return saved and "loop" not in self.child_sources

    def as_json(self) -> dict[str, Any]:
        status, detail = classify(self) if self.head else (None, None)
        return {
            "checkpoint_id": self.checkpoint_id,
            "parent_checkpoint_id": self.parent_id,
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
            "step": self.step,
            "source": self.source,
            "run_id": self.run_id,
            "fork": self.fork,
            "children": list(self.children),
            "head": self.head,
            "status": status,
            "detail": detail,
            "ran": self.ran,
            "sent": self.sent,
            "next": self.next,
            "pending_writes": self.pending_writes,
            "changed": [c.as_json() for c in self.changed],
            "tasks": [t.as_json() for t in self.tasks],
            "subgraphs": [s.as_json() for s in self.subgraphs],
            "bytes": self.bytes,
            "metadata": jsonable(self.metadata),
        }


def triggered_nodes(
    versions_seen: Mapping[str, Mapping[str, Any]],
    channel_versions: Mapping[str, Any],
    available: Iterable[str],
    trigger_values: Mapping[str, Any],
) -> list[str]:
    """The nodes a checkpoint triggers (see the module docstring for the rule).

    Args:
        versions_seen: The checkpoint's `versions_seen`.
        channel_versions: Its `channel_versions`.
        available: The channels that hold a value.
        trigger_values: Values of `join:` barriers and of `__pregel_tasks`.

    Returns:
        Node names, sorted, then one per waiting Send packet.

    Example:
        >>> triggered_nodes({}, {"__start__": "1"}, {"__start__"}, {})
        ['__start__']
    """
    available = set(available)
    triggers: dict[str, set[str]] = {}
    for node, seen in versions_seen.items():
        if node not in _PSEUDO_NODES:
            triggers.setdefault(node, set()).update(seen or ())
    for channel in channel_versions:
        target = _edge_target(channel)
        if target is not None:
            triggers.setdefault(target, set()).add(channel)
    found = []
    for node, channels in triggers.items():
        seen = versions_seen.get(node) or {}
        for channel in channels:
            if channel not in available:
                continue
            if channel.startswith(_JOIN_PREFIX) and not _barrier_met(
                channel, trigger_values.get(channel)
            ):
                continue
            if _version_key(channel_versions.get(channel)) > _version_key(seen.get(channel)):
                found.append(node)
                break
    found.sort()
    if TASKS in available:
        found.extend(_send_node(s) for s in _sends(trigger_values.get(TASKS)))
    return found


def _edge_target(channel: str) -> str | None:
    if channel == START:
        return START
    if channel.startswith(_BRANCH_PREFIX):
        return channel[len(_BRANCH_PREFIX) :]
    if channel.startswith(_JOIN_PREFIX):
        return channel.rpartition(":")[2]
    return None


def _barrier_met(channel: str, value: Any) -> bool:
    # join:A+B:NODE waits for A and B; the stored value is the set that wrote.
    sources = channel[len(_JOIN_PREFIX) :].rpartition(":")[0].split("+")
    if value is SEALED:
        return True
    return isinstance(value, set | frozenset | list | tuple) and set(sources) <= set(value)


def _sends(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _send_node(send: Any) -> str:
    node = getattr(send, "node", None)
    return node if isinstance(node, str) else "send"


def _version_key(version: Any) -> tuple[int, str]:
    # Versions are "<zero-padded int>.<random>" strings or plain ints.
    if version is None:
        return (-1, "")
    if isinstance(version, int | float):
        return (int(version), "")
    head, _, tail = str(version).partition(".")
    return (int(head), tail) if head.isdigit() else (0, str(version))


def nodes_that_ran(
    parent_seen: Mapping[str, Mapping[str, Any]], seen: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """The pull tasks that ran between two checkpoints: whose `versions_seen` moved.

    A node that has only run as a Send target keeps an empty entry, so it is
    counted through the writes instead.

    Example:
        >>> nodes_that_ran({"a": {"x": "1"}}, {"a": {"x": "2"}, "b": {"y": "1"}})
        ['a', 'b']
    """
    return sorted(
        node
        for node, versions in seen.items()
        if node not in _PSEUDO_NODES and versions and parent_seen.get(node) != versions
    )


def task_name(path: str, sends: Sequence[Any] = ()) -> str | None:
    """The node a task ran, from the path LangGraph stores with its writes.

    Example:
        >>> task_name("~__pregel_pull, review")
        'review'
    """
    if path.startswith(_PULL_PREFIX):
        return path[len(_PULL_PREFIX) :].split(", ", 1)[0] or None
    if path.startswith(_PUSH_PREFIX):
        index = path[len(_PUSH_PREFIX) :].split(", ", 1)[0]
        if index.isdigit() and int(index) < len(sends):
            return _send_node(sends[int(index)])
    return None


def classify(node: CheckpointNode) -> tuple[str, str]:
    """The status of a thread whose latest checkpoint is `node`, with a short reason.

    Example:
        >>> node = CheckpointNode("t", "", "c1", next=["b"], tasks=[
        ...     TaskInfo("1", "a", "", writes=[("log", 8)]),
        ...     TaskInfo("2", "b", "", error="RuntimeError('boom')")])
        >>> classify(node)
        ('stopped', "b failed: RuntimeError('boom'); a saved writes")
    """
    waiting = [t for t in node.tasks if t.state == "interrupted"]
    if waiting:
        return "interrupted", "; ".join(
            f"{t.label} asks {summarize(t.interrupts[0] if t.interrupts else None)}"
            for t in waiting
        )
    failed = [t for t in node.tasks if t.state == "failed"]
    done = [t for t in node.tasks if t.state == "done"]
    if node.next is None and not (failed or done):
        return "unknown", f"its values are encrypted: set {KEYS_ENV} to tell"
    if not (node.next or failed or done):
        return "finished", ""
    parts = [
        f"{t.label} failed: {summarize(t.error, quote=not isinstance(t.error, str))}"
        for t in failed
    ]
    if done:
        parts.append(f"{_names(t.label for t in done)} saved writes")
    left = Counter(node.next or ())
    left.subtract(t.name for t in [*failed, *done] if t.name)
    not_run = [name for name, n in left.items() for _ in range(n) if n > 0]
    if not_run:
        parts.append(f"next {_names(not_run)}" + ("" if failed or done else ", nothing saved yet"))
    return "stopped", "; ".join(parts)


def _names(names: Iterable[str]) -> str:
    counts = Counter(names)
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())


def node_from_row(core: SaverCore, row: Row) -> CheckpointNode:
    """Summarise one row of the `inspect_checkpoint_facts` fragment.

    Example:
        >>> node = node_from_row(saver, row)  # doctest: +SKIP
    """
    thread_id, ns, checkpoint_id = row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"]
    record = decode_value(
        core, row["type"], row["checkpoint"], binding("checkpoint", thread_id, ns, checkpoint_id)
    )
    metadata = decode_value(
        core,
        row["metadata_type"],
        row["metadata_blob"],
        binding("metadata", thread_id, ns, checkpoint_id),
    )
    if not isinstance(metadata, Mapping):
        metadata = row["metadata"] or {}  # the readable JSONB projection
    parent_id = row["parent_checkpoint_id"]
    parent_record = None
    if row["parent_type"] is not None:
        parent_record = decode_value(
            core,
            row["parent_type"],
            row["parent_checkpoint"],
            binding("checkpoint", thread_id, ns, parent_id),
        )
    versions = dict(row["channel_versions"] or {})
    available = set(row["available_channels"] or ())
    trigger_values = _trigger_values(core, thread_id, ns, row)
    seen = record.get("versions_seen") if isinstance(record, Mapping) else None
    next_nodes: list[str] | None = None
    if seen is not None and SEALED not in trigger_values.values():
        next_nodes = triggered_nodes(seen, versions, available, trigger_values)
    ran: list[str] | None = None
    if parent_id is None or parent_record is None:
        ran = []  # the first checkpoint, or a parent pruned away
    elif isinstance(parent_record, Mapping) and seen is not None:
        ran = nodes_that_ran(parent_record.get("versions_seen") or {}, seen)
    changed = [
        ChannelChange(channel, version, stored, size)
        for channel, version, stored, size in zip(
            row["changed_channels"] or (),
            row["changed_versions"] or (),
            row["changed_stored"] or (),
            row["changed_bytes"] or (),
            strict=True,
        )
    ]
    sends = _sends(trigger_values.get(TASKS))
    tasks = _tasks(core, row, sends)
    size = int(row["record_bytes"] or 0)
    size += sum(c.bytes or 0 for c in changed)
    size += sum(int(n or 0) for n in row["write_bytes"] or ())
    return CheckpointNode(
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        parent_id=parent_id,
        created_at=row["created_at"],
        run_id=row["run_id"],
        metadata=dict(metadata),
        ran=ran,
        sent=int(row["parent_push_tasks"] or 0),
        next=next_nodes,
        changed=changed,
        tasks=tasks,
        bytes=size,
    )


def _trigger_values(core: SaverCore, thread_id: str, ns: str, row: Row) -> dict[str, Any]:
    pieces: dict[str, list[tuple[str, str, bytes]]] = {}
    for channel, version, type_, data in zip(
        row["trigger_channels"] or (),
        row["trigger_versions"] or (),
        row["trigger_types"] or (),
        row["trigger_blobs"] or (),
        strict=True,
    ):
        pieces.setdefault(channel, []).append((version, type_, data))
    values: dict[str, Any] = {}
    for channel, chain in pieces.items():
        sealed = any(cipher_label(t) != PLAINTEXT_LABEL for _, t, _ in chain)
        if sealed and not isinstance(core.serde, Sealer):
            values[channel] = SEALED
        else:
            values[channel] = core.load_blob((thread_id, ns, channel), chain)
    return values


def _tasks(core: SaverCore, row: Row, sends: Sequence[Any]) -> list[TaskInfo]:
    thread_id, ns, checkpoint_id = row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"]
    tasks: dict[str, TaskInfo] = {}
    for task_id, path, idx, channel, type_, size, payload in zip(
        row["write_task_ids"] or (),
        row["write_task_paths"] or (),
        row["write_idxs"] or (),
        row["write_channels"] or (),
        row["write_types"] or (),
        row["write_bytes"] or (),
        row["write_payloads"] or (),
        strict=True,
    ):
        task = tasks.get(task_id)
        if task is None:
            task = tasks[task_id] = TaskInfo(task_id, task_name(path, sends), path)
        if idx >= 0:
            task.writes.append((channel, int(size or 0)))
            continue
        aad = binding("write", thread_id, ns, checkpoint_id, task_id, idx)
        value = decode_value(core, type_, payload, aad)
        if channel == INTERRUPT:
            for interrupt in value if isinstance(value, list | tuple) else [value]:
                task.interrupts.append(getattr(interrupt, "value", interrupt))
                task.interrupt_ids.append(getattr(interrupt, "id", None))
        elif channel == ERROR:
            task.error = value
        elif channel == RESUME:
            task.resume.extend(value if isinstance(value, list) else [value])
    return list(tasks.values())


# -- a thread ----------------------------------------------------------------------


@dataclass
class ThreadPage:
    """The newest checkpoints of one namespace of a thread (or those up to one).

    Attributes:
        thread_id: The thread.
        checkpoint_ns: The namespace shown.
        total: Checkpoints in the namespace.
        newer: Checkpoints newer than the page (when it ends at `until`).
        nodes: The page, newest first.
        older_id: The newest checkpoint older than the page (where the page
            before it ends), None when the page reaches the first.
        namespaces: Every namespace of the thread with its checkpoints, when
            the one asked for has none (to say which exist).

    Example:
        >>> ThreadPage("t", "", total=120, newer=0, nodes=[]).older
        120
    """

    thread_id: str
    checkpoint_ns: str
    total: int
    newer: int
    nodes: list[CheckpointNode]
    older_id: str | None = None
    namespaces: dict[str, int] = field(default_factory=dict)

    @property
    def older(self) -> int:
        return max(0, self.total - self.newer - len(self.nodes))

    @property
    def latest(self) -> CheckpointNode | None:
        """The namespace's latest checkpoint, if it is on the page."""
        return self.nodes[0] if self.nodes and self.newer == 0 else None

    def as_json(self) -> dict[str, Any]:
        latest = self.latest
        status, detail = classify(latest) if latest is not None else (None, None)
        return {
            "thread_id": self.thread_id,
            "checkpoint_ns": self.checkpoint_ns,
            "total": self.total,
            "shown": len(self.nodes),
            "newer": self.newer,
            "older": self.older,
            "older_checkpoint_id": self.older_id,
            "latest_checkpoint_id": None if latest is None else latest.checkpoint_id,
            "status": status,
            "detail": detail,
            "checkpoints": [n.as_json() for n in self.nodes],
        }


def thread_page_op(
    core: SaverCore,
    thread_id: str,
    checkpoint_ns: str = "",
    *,
    limit: int = 50,
    until: str | None = None,
) -> Op[ThreadPage]:
    """Read the newest `limit` checkpoints of a namespace (at or before `until`).

    Reads a fixed number of rows however long the thread is: the page, the
    namespace's count, and the subgraphs that ran from the page.

    Example:
        >>> page = saver.run(thread_page_op(saver, "t1", limit=20))  # doctest: +SKIP
    """
    thread_id = check_id("thread_id", thread_id)
    checkpoint_ns = check_id("checkpoint_ns", checkpoint_ns)
    if until is not None:
        until = check_id("checkpoint_id", until)
    rows = yield Stmt(
        "inspect_namespace_counts",
        {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "until": until},
        fetch=True,
    )
    total, newer = int(rows[0]["total"]), int(rows[0]["newer"])
    if total == 0:
        rows = yield Stmt("inspect_thread_namespaces", {"thread_id": thread_id}, fetch=True)
        namespaces = {r["checkpoint_ns"]: int(r["checkpoints"]) for r in rows}
        return ThreadPage(thread_id, checkpoint_ns, 0, 0, [], namespaces=namespaces)
    # one row more than shown says where the page before this one ends
    rows = yield Stmt(
        "inspect_thread_page",
        {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "until": until,
            "limit": limit + 1,
        },
        fetch=True,
    )
    older_id = rows[limit]["checkpoint_id"] if len(rows) > limit else None
    nodes = [node_from_row(core, row) for row in rows[:limit]]
    ids = [n.checkpoint_id for n in nodes]
    later: list[Row] = []
    if until is not None and ids:
        later = yield Stmt(
            "inspect_later_children",
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "until": until,
                "checkpoint_ids": ids,
            },
            fetch=True,
        )
    link(nodes, [(r["parent_checkpoint_id"], r["source"]) for r in later])
    if ids:
        rows = yield Stmt(
            "inspect_child_namespaces",
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "prefix": f"{checkpoint_ns}|" if checkpoint_ns else "",
                "checkpoint_ids": ids,
            },
            fetch=True,
        )
        by_id = {n.checkpoint_id: n for n in nodes}
        for row in rows:
            latest = node_from_row(core, row)
            parents = latest.metadata.get("parents")
            parent = parents.get(checkpoint_ns) if isinstance(parents, Mapping) else None
            if parent in by_id:
                by_id[parent].subgraphs.append(
                    SubgraphInfo(row["checkpoint_ns"], int(row["checkpoints"]), latest)
                )
    return ThreadPage(thread_id, checkpoint_ns, total, newer, nodes, older_id)


def link(nodes: Sequence[CheckpointNode], later: Iterable[tuple[str, str | None]] = ()) -> None:
    """Fill in the children of each node, and mark the ones that start a branch.

    `later` lists (parent id, source) of children that are not in `nodes`.
    Of several children, the oldest continues its parent's line; the others
    are forks (time travel, `update_state` on an earlier checkpoint).

    Example:
        >>> a, b, c = (CheckpointNode("t", "", i, parent_id=p)
        ...            for i, p in [("1", None), ("2", "1"), ("3", "1")])
        >>> link([c, b, a]); a.children, c.fork
        (['2', '3'], True)
    """
    by_id = {n.checkpoint_id: n for n in nodes}
    for node in nodes:
        node.children.clear()
        node.child_sources.clear()
        node.fork = False
    for node in sorted(nodes, key=lambda n: n.checkpoint_id):
        parent = by_id.get(node.parent_id or "")
        if parent is not None:
            parent.children.append(node.checkpoint_id)
            parent.child_sources.append(node.source)
    for parent_id, source in later:
        if parent_id in by_id:
            by_id[parent_id].child_sources.append(source)
    for node in nodes:
        for child_id in node.children[1:]:
            by_id[child_id].fork = True


@dataclass(frozen=True)
class TreeRow:
    """Where one checkpoint goes in a drawn tree.

    Attributes:
        node: The checkpoint.
        prefix: Drawn before its bullet (vertical lines and a `├─` branch).
        continuation: Drawn before each further line about it.
        parent_hidden: Its parent's id when the parent is not on the page.

    Example:
        >>> TreeRow(CheckpointNode("t", "", "1"), "", "  ", None).prefix
        ''
    """

    node: CheckpointNode
    prefix: str
    continuation: str
    parent_hidden: str | None


def tree_rows(nodes: Sequence[CheckpointNode]) -> list[TreeRow]:
    """Lay out a page of checkpoints as a tree, oldest first, the latest at the bottom.

    Each line of history runs down one column. Where a checkpoint has several
    children, the one leading to the newest checkpoint continues the column
    and the others hang off it with `├─`, one column to the right, so the
    path to the thread's current state is the leftmost line. Pages of any
    length are laid out without recursion.

    Example:
        >>> a, b, c = (CheckpointNode("t", "", i, parent_id=p)
        ...            for i, p in [("1", None), ("2", "1"), ("3", "1")])
        >>> link([a, b, c])
        >>> [(r.prefix, r.node.checkpoint_id) for r in tree_rows([c, b, a])]
        [('', '1'), ('├─', '2'), ('', '3')]
    """
    by_id = {n.checkpoint_id: n for n in nodes}
    children = {n.checkpoint_id: [by_id[c] for c in n.children if c in by_id] for n in nodes}
    newest: dict[str, str] = {}  # newest checkpoint id in each subtree
    for node in sorted(nodes, key=lambda n: n.checkpoint_id, reverse=True):
        # children are newer than their parent, so each is done before it
        newest[node.checkpoint_id] = max(
            [node.checkpoint_id, *(newest[c.checkpoint_id] for c in children[node.checkpoint_id])]
        )
    roots = sorted(
        (n for n in nodes if n.parent_id not in by_id), key=lambda n: newest[n.checkpoint_id]
    )
    rows: list[TreeRow] = []
    # (node, prefix of its bullet, prefix of what stays below it)
    stack: list[tuple[CheckpointNode, str, str]] = [(r, "", "") for r in reversed(roots)]
    while stack:
        node, prefix, body = stack.pop()
        kids = sorted(children[node.checkpoint_id], key=lambda c: newest[c.checkpoint_id])
        continuation = body + ("│ " if kids else "  ")
        hidden = node.parent_id if node.parent_id and node.parent_id not in by_id else None
        rows.append(TreeRow(node, prefix, continuation, hidden))
        if not kids:
            continue
        trunk, branches = kids[-1], kids[:-1]
        stack.append((trunk, body, body))
        for branch in reversed(branches):
            stack.append((branch, body + "├─", body + "│ "))
    return rows


# -- many threads ------------------------------------------------------------------


@dataclass
class ThreadSummary:
    """One line of `pgcheckpoint threads`.

    Attributes:
        thread_id: The thread.
        checkpoints: Checkpoints in every namespace.
        namespaces: Namespaces (the root graph and each subgraph run).
        last_activity: When its newest checkpoint was saved.
        size_bytes: Stored bytes across checkpoints, values and writes.
        latest: Its latest root checkpoint (None if it has only subgraph ones).
        locked_by: The backend pid holding its `lock_thread` lock, if any.

    Example:
        >>> ThreadSummary("t", 3, 1, None, 10, None, None).status
        'unknown'
    """

    thread_id: str
    checkpoints: int
    namespaces: int
    last_activity: dt.datetime | None
    size_bytes: int
    latest: CheckpointNode | None
    locked_by: int | None

    @property
    def status(self) -> str:
        return classify(self.latest)[0] if self.latest is not None else "unknown"

    @property
    def detail(self) -> str:
        return classify(self.latest)[1] if self.latest is not None else "no root checkpoint"

    def as_json(self) -> dict[str, Any]:
        latest = self.latest
        return {
            "thread_id": self.thread_id,
            "checkpoints": self.checkpoints,
            "namespaces": self.namespaces,
            "last_activity": None if self.last_activity is None else self.last_activity.isoformat(),
            "size_bytes": self.size_bytes,
            "status": self.status,
            "detail": self.detail,
            "locked_by": self.locked_by,
            "latest_checkpoint_id": None if latest is None else latest.checkpoint_id,
            "step": None if latest is None else latest.step,
            "next": None if latest is None else latest.next,
        }


def recent_threads_op(
    core: SaverCore,
    *,
    schema: str = "public",
    limit: int = 20,
    since: dt.datetime | None = None,
    metadata: Sequence[Mapping[str, Any]] | None = None,
) -> Op[list[ThreadSummary]]:
    """The `limit` threads with the newest checkpoints, newest first.

    Args:
        core: The saver (its serializer decodes the values).
        schema: The schema of the tables (thread locks are keyed by it).
        limit: How many threads.
        since: Only threads with a checkpoint saved at or after this time.
        metadata: Only threads with a checkpoint whose metadata contains one
            of these (JSONB `@>`).

    Example:
        >>> saver.run(recent_threads_op(saver, limit=5))  # doctest: +SKIP
    """
    filters = None if metadata is None else [Jsonb(dict(m)) for m in metadata]
    rows = yield Stmt(
        "inspect_recent_threads",
        {"since": since, "filters": filters, "limit": limit},
        fetch=True,
    )
    keys = {thread_lock_key(r["thread_id"], schema): r["thread_id"] for r in rows}
    holders: dict[str, int] = {}
    if keys:
        locks = yield Stmt(
            "inspect_thread_lock_holders",
            {"keys": list(keys), "lock_class": LOCK_CLASS_THREAD},
            fetch=True,
        )
        holders = {keys[r["key"]]: int(r["holder_pid"]) for r in locks}
    summaries = []
    for row in rows:
        latest = node_from_row(core, row) if row["checkpoint_id"] is not None else None
        summaries.append(
            ThreadSummary(
                thread_id=row["thread_id"],
                checkpoints=int(row["checkpoints"]),
                namespaces=int(row["namespaces"]),
                last_activity=row["last_activity"],
                size_bytes=int(row["size_bytes"] or 0),
                latest=latest,
                locked_by=holders.get(row["thread_id"]),
            )
        )
    return summaries


# -- one checkpoint in full --------------------------------------------------------


def resolve_checkpoint_op(
    core: SaverCore, thread_id: str, checkpoint_ns: str, ref: str
) -> Op[list[str]]:
    """The checkpoint ids of a namespace that are `ref` or end with it (at most 5).

    Example:
        >>> saver.run(resolve_checkpoint_op(saver, "t1", "", "9b512346"))  # doctest: +SKIP
        ['1f1ec4f0-3152-6245-8004-cdb09b512346']
    """
    rows = yield Stmt(
        "inspect_resolve_checkpoint",
        {
            "thread_id": check_id("thread_id", thread_id),
            "checkpoint_ns": check_id("checkpoint_ns", checkpoint_ns),
            "checkpoint_id": check_id("checkpoint_id", ref),
        },
        fetch=True,
    )
    return [r["checkpoint_id"] for r in rows]


def checkpoint_values_op(
    core: SaverCore, thread_id: str, checkpoint_ns: str, checkpoint_id: str
) -> Op[CheckpointTuple | None]:
    """One checkpoint with its values and pending writes, decoded by the core.

    Raises:
        DecryptionError: The values are encrypted and no key is configured.

    Example:
        >>> saver.run(checkpoint_values_op(saver, "t1", "", cid)).checkpoint  # doctest: +SKIP
    """
    params = {
        "thread_id": check_id("thread_id", thread_id),
        "checkpoint_ns": check_id("checkpoint_ns", checkpoint_ns),
        "checkpoint_id": check_id("checkpoint_id", checkpoint_id),
    }
    rows = yield Stmt("get_checkpoint_by_id", params, fetch=True)
    if not rows:
        return None
    row = rows[0]
    if not isinstance(core.serde, Sealer):
        for type_ in [row["type"], row["metadata_type"], *(row["blob_types"] or ())]:
            label = cipher_label(type_)
            if label != PLAINTEXT_LABEL:
                raise DecryptionError(
                    f"the values of checkpoint {checkpoint_id!r} are encrypted under key "
                    f"{label!r} and no key is configured: set {KEYS_ENV} as the "
                    "application does"
                )
    return core.load_tuple(row)


# -- values for people and scripts ---------------------------------------------------


def jsonable(value: Any, *, _depth: int = 0) -> Any:
    """A value as JSON can hold it: models dumped, dataclasses as dicts, the rest as text.

    Example:
        >>> jsonable({"a": {1, 2}, "b": b"hi", "c": float("nan")})
        {'a': [1, 2], 'b': {'bytes': 'aGk='}, 'c': 'nan'}
    """
    if _depth > 50:
        return repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if value is SEALED:
        return "<encrypted>"
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value, _depth=_depth + 1)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth=_depth + 1) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        items = [jsonable(v, _depth=_depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, default=str))
    if isinstance(value, list | tuple):
        return [jsonable(v, _depth=_depth + 1) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(), _depth=_depth + 1)
        except Exception:  # a model that cannot dump itself is shown as text
            return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name), _depth=_depth + 1)
            for f in dataclasses.fields(value)
        }
    if isinstance(value, BaseException):
        return repr(value)
    return repr(value)


def summarize(value: Any, width: int = 60, *, quote: bool = True) -> str:
    """One short line for a payload: JSON text (or a repr for text), cut at `width`.

    `quote=False` leaves text as it is (an error message stored as text).

    Example:
        >>> summarize({"question": "approve the plan?"})
        '{"question": "approve the plan?"}'
    """
    if isinstance(value, str):
        text = repr(value) if quote else value
    else:
        text = json.dumps(jsonable(value), ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"

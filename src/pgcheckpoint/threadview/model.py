"""What the thread view knows about a thread: plain data, read from the tables.

A `ThreadPage` is a run of `CheckpointNode`s of one namespace; each node
carries the channels it changed (`ChannelChange`), the tasks that saved writes
against it (`TaskInfo`), the subgraph runs that started from it
(`SubgraphInfo`) and what of its rows is damaged (`Damage`). A
`ThreadSummary` is one line of the list of threads. The
ops of `pgcheckpoint.threadview.ops` build these; `render` turns them into
text and JSON; `triggers` holds the LangGraph rules that fill in `ran`,
`next` and a thread's status.

Example:
    >>> node = CheckpointNode("t", "", "c2", parent_id="c1",
    ...                       tasks=[TaskInfo("t1", "review", "", interrupts=["ok?"])])
    >>> node.head, node.tasks[0].state
    (True, 'interrupted')
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SEALED",
    "ChannelChange",
    "CheckpointNode",
    "Damage",
    "SubgraphInfo",
    "TaskInfo",
    "ThreadPage",
    "ThreadSummary",
    "Unreadable",
    "link",
]


class _Sealed(enum.Enum):
    SEALED = "<encrypted>"

    def __repr__(self) -> str:
        return "<encrypted>"


SEALED = _Sealed.SEALED
"""A value encrypted under a key that is not configured."""


@dataclass(frozen=True)
class Unreadable:
    """A stored value that cannot be read, shown in its place with the reason.

    Attributes:
        error: Why (the message of the `UnreadableValueError`, which names the row).

    Example:
        >>> Unreadable("its zstd frame is corrupt")
        <unreadable: its zstd frame is corrupt>
    """

    error: str

    def __repr__(self) -> str:
        return f"<unreadable: {self.error}>"


@dataclass(frozen=True)
class Damage:
    """Something of a checkpoint's rows that is not as pgcheckpoint writes it.

    Attributes:
        what: What is wrong, naming the column, value or write.
        look: A query that shows the damaged row (for psql).

    Example:
        >>> Damage("column channel_versions is a JSON array, not an object", "SELECT ...").what
        'column channel_versions is a JSON array, not an object'
    """

    what: str
    look: str


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
        >>> ChannelChange("messages", "3", "blob", 120).stored
        'blob'
    """

    channel: str
    version: str
    stored: str
    bytes: int | None


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


@dataclass
class SubgraphInfo:
    """A subgraph namespace that ran from a checkpoint.

    Attributes:
        checkpoint_ns: Its namespace (`node:task_id`, nested ones joined by `|`).
        checkpoints: How many checkpoints it has.
        latest: Its newest checkpoint.

    Example:
        >>> SubgraphInfo("research:1", 4, CheckpointNode("t", "research:1", "c1")).checkpoints
        4
    """

    checkpoint_ns: str
    checkpoints: int
    latest: CheckpointNode


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
        damage: What of its rows cannot be read as written (its status is then
            `damaged`); empty for a sound checkpoint.

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
    damage: list[Damage] = field(default_factory=list)

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
        locked_by: The backend pid holding the thread's `lock_thread` lock, if any.
        lock_seen: Whether the server can tell: a standby cannot see the
            primary's advisory locks, so there `locked_by` is always None.

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
    locked_by: int | None = None
    lock_seen: bool = True

    @property
    def older(self) -> int:
        return max(0, self.total - self.newer - len(self.nodes))

    @property
    def latest(self) -> CheckpointNode | None:
        """The namespace's latest checkpoint, if it is on the page."""
        return self.nodes[0] if self.nodes and self.newer == 0 else None


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
        lock_seen: Whether the server can tell: a standby cannot see the
            primary's advisory locks, so there `locked_by` is always None.
        metadata_filter: How `--metadata` matched it: `sealed` (the decrypted,
            authenticated metadata), `unverified` (the readable JSONB column or
            a copy no key authenticates, which whoever can write the table can
            edit), None without a filter.

    Example:
        >>> ThreadSummary("t", 3, 1, None, 10, None, None).latest is None
        True
    """

    thread_id: str
    checkpoints: int
    namespaces: int
    last_activity: dt.datetime | None
    size_bytes: int
    latest: CheckpointNode | None
    locked_by: int | None
    lock_seen: bool = True
    metadata_filter: str | None = None

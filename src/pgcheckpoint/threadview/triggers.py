"""LangGraph's rules, read back from what a checkpoint stores: what ran, what runs next.

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
- `damaged`: the checkpoint's rows are not as pgcheckpoint writes them
  (`CheckpointNode.damage` says how); what they hold cannot be trusted.

Example:
    >>> triggered_nodes({"plan": {"branch:to:plan": "1"}},
    ...                 {"branch:to:plan": "2", "branch:to:act": "2"},
    ...                 {"branch:to:plan", "branch:to:act"}, {})
    ['act', 'plan']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.serde.types import INTERRUPT, TASKS

from ..codec.labels import KEYS_ENV
from .model import SEALED, CheckpointNode
from .payloads import summarize

__all__ = [
    "classify",
    "is_edge",
    "is_internal",
    "nodes_that_ran",
    "send_packets",
    "task_name",
    "triggered_nodes",
]

START = "__start__"
# Keys of versions_seen that are bookkeeping, not nodes.
_PSEUDO_NODES = frozenset({"__input__", INTERRUPT})
_BRANCH_PREFIX = "branch:to:"
_JOIN_PREFIX = "join:"
_PULL_PREFIX = "~__pregel_pull, "
_PUSH_PREFIX = "~__pregel_push, "


def is_internal(channel: str) -> bool:
    """Whether a channel is LangGraph's own (edges, barriers, Sends, `__start__`).

    Example:
        >>> is_internal("branch:to:plan"), is_internal("messages")
        (True, False)
    """
    return channel.startswith((_BRANCH_PREFIX, _JOIN_PREFIX, "__"))


def is_edge(channel: str) -> bool:
    """Whether a channel only routes to a node (`branch:to:NODE`, `join:A+B:NODE`).

    Example:
        >>> is_edge("join:a+b:c"), is_edge("__start__")
        (True, False)
    """
    return channel.startswith((_BRANCH_PREFIX, _JOIN_PREFIX))


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
        found.extend(_send_node(s) for s in send_packets(trigger_values.get(TASKS)))
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


def send_packets(value: Any) -> list[Any]:
    """The Send packets a stored `__pregel_tasks` value holds.

    Example:
        >>> send_packets(None)
        []
    """
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
        >>> from pgcheckpoint.threadview import TaskInfo
        >>> node = CheckpointNode("t", "", "c1", next=["b"], tasks=[
        ...     TaskInfo("1", "a", "", writes=[("log", 8)]),
        ...     TaskInfo("2", "b", "", error="RuntimeError('boom')")])
        >>> classify(node)
        ('stopped', "b failed: RuntimeError('boom'); a saved writes")
    """
    if node.damage:
        more = len(node.damage) - 1
        return "damaged", node.damage[0].what + (f" (and {more} more)" if more else "")
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

"""The thread view for people and scripts: drawn trees, tables, Graphviz DOT and JSON.

Every function takes the data of `pgcheckpoint.threadview.model` (or a
`CheckpointTuple` for the full state of one checkpoint) and returns lines of
plain text (no colour), a DOT document or JSON-ready dicts; none reads the
database or writes to a terminal. `pgcheckpoint threads` prints
`threads_table`, `pgcheckpoint show` prints `page_lines` or `values_lines`
(or `dot.dot_graph`), and their `--json` forms print `thread_json`,
`page_json` and `values_json`.

Example:
    >>> from pgcheckpoint.threadview import CheckpointNode, ThreadPage
    >>> page = ThreadPage("t", "", 1, 0, [CheckpointNode("t", "", "c1", next=[])])
    >>> page_lines(page)[:2]
    ["thread 't'  namespace (root)  1 checkpoints", 'status: finished']
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import pprint
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from .model import CheckpointNode, SubgraphInfo, TaskInfo, ThreadPage, ThreadSummary
from .payloads import jsonable, summarize
from .terminal import shell_quote
from .triggers import START, classify, is_edge, is_internal

__all__ = [
    "STANDBY_LOCKS",
    "TreeRow",
    "checkpoint_json",
    "damage_json",
    "human_bytes",
    "lock_state",
    "node_details",
    "node_line",
    "page_json",
    "page_lines",
    "short_ids",
    "subgraph_json",
    "task_json",
    "thread_json",
    "threads_table",
    "tree_rows",
    "values_json",
    "values_lines",
]

SHORT_ID = 8

# What a standby says for a thread's lock, which only the primary can see.
STANDBY_LOCKS = (
    "unknown on a standby, which cannot see the primary's advisory locks: whether a "
    "worker runs the thread now (lock_thread, resume), only the primary can tell"
)


# -- JSON ---------------------------------------------------------------------------


def task_json(task: TaskInfo) -> dict[str, Any]:
    """A task for `show --json`."""
    return {
        "task_id": task.task_id,
        "name": task.name,
        "path": task.path,
        "state": task.state,
        "writes": [{"channel": c, "bytes": n} for c, n in task.writes],
        "interrupts": [
            {"id": i, "value": jsonable(v)}
            for v, i in zip(task.interrupts, task.interrupt_ids, strict=True)
        ],
        "error": None if task.error is None else jsonable(task.error),
        "resume": [jsonable(v) for v in task.resume],
    }


def subgraph_json(sub: SubgraphInfo) -> dict[str, Any]:
    """A subgraph run for `show --json`."""
    status, detail = classify(sub.latest)
    return {
        "checkpoint_ns": sub.checkpoint_ns,
        "checkpoints": sub.checkpoints,
        "latest_checkpoint_id": sub.latest.checkpoint_id,
        "status": status,
        "detail": detail,
    }


def checkpoint_json(node: CheckpointNode) -> dict[str, Any]:
    """A checkpoint for `show --json`; `status` and `detail` are set on heads only.

    Example:
        >>> checkpoint_json(CheckpointNode("t", "", "c1", next=[]))["status"]
        'finished'
    """
    status, detail = classify(node) if node.head else (None, None)
    return {
        "checkpoint_id": node.checkpoint_id,
        "parent_checkpoint_id": node.parent_id,
        "created_at": None if node.created_at is None else node.created_at.isoformat(),
        "step": node.step,
        "source": node.source,
        "run_id": node.run_id,
        "fork": node.fork,
        "children": list(node.children),
        "head": node.head,
        "status": status,
        "detail": detail,
        "ran": node.ran,
        "sent": node.sent,
        "next": node.next,
        "pending_writes": node.pending_writes,
        "changed": [dataclasses.asdict(c) for c in node.changed],
        "tasks": [task_json(t) for t in node.tasks],
        "subgraphs": [subgraph_json(s) for s in node.subgraphs],
        "bytes": node.bytes,
        "metadata": jsonable(node.metadata),
        "damage": damage_json(node),
    }


def damage_json(node: CheckpointNode | None) -> list[dict[str, str]]:
    """What is damaged in a checkpoint's rows, each with the query that shows it."""
    return [] if node is None else [{"what": d.what, "look": d.look} for d in node.damage]


def lock_state(locked_by: int | None, lock_seen: bool) -> str:
    """`held`, `free`, or `unknown` where the server cannot see the lock (a standby).

    Example:
        >>> lock_state(None, True), lock_state(None, False), lock_state(4242, True)
        ('free', 'unknown', 'held')
    """
    if not lock_seen:
        return "unknown"
    return "free" if locked_by is None else "held"


def page_json(page: ThreadPage) -> dict[str, Any]:
    """A page of a thread for `show --json`.

    Example:
        >>> page_json(ThreadPage("t", "", 0, 0, []))["status"] is None
        True
    """
    latest = page.latest
    status, detail = classify(latest) if latest is not None else (None, None)
    return {
        "thread_id": page.thread_id,
        "checkpoint_ns": page.checkpoint_ns,
        "total": page.total,
        "shown": len(page.nodes),
        "newer": page.newer,
        "older": page.older,
        "older_checkpoint_id": page.older_id,
        "latest_checkpoint_id": None if latest is None else latest.checkpoint_id,
        "status": status,
        "detail": detail,
        "lock": lock_state(page.locked_by, page.lock_seen),
        "locked_by": page.locked_by,
        "checkpoints": [checkpoint_json(n) for n in page.nodes],
    }


def _summary_status(summary: ThreadSummary) -> tuple[str, str]:
    if summary.latest is None:
        return "unknown", "no root checkpoint"
    return classify(summary.latest)


def thread_json(summary: ThreadSummary) -> dict[str, Any]:
    """One thread for `threads --json`.

    Example:
        >>> thread_json(ThreadSummary("t", 3, 1, None, 10, None, None))["status"]
        'unknown'
    """
    latest = summary.latest
    status, detail = _summary_status(summary)
    return {
        "thread_id": summary.thread_id,
        "checkpoints": summary.checkpoints,
        "namespaces": summary.namespaces,
        "last_activity": (
            None if summary.last_activity is None else summary.last_activity.isoformat()
        ),
        "size_bytes": summary.size_bytes,
        "status": status,
        "detail": detail,
        "lock": lock_state(summary.locked_by, summary.lock_seen),
        "locked_by": summary.locked_by,
        "latest_checkpoint_id": None if latest is None else latest.checkpoint_id,
        "step": None if latest is None else latest.step,
        "next": None if latest is None else latest.next,
        "damage": damage_json(latest),
        "metadata_filter": summary.metadata_filter,
    }


def values_json(tup: CheckpointTuple) -> dict[str, Any]:
    """A checkpoint's full state for `show --values --json`."""
    conf = tup.config["configurable"]
    values = tup.checkpoint.get("channel_values") or {}
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return {
        "thread_id": conf["thread_id"],
        "checkpoint_ns": conf["checkpoint_ns"],
        "checkpoint_id": conf["checkpoint_id"],
        "parent_checkpoint_id": parent,
        "metadata": jsonable(tup.metadata),
        "values": {k: jsonable(v) for k, v in sorted(values.items()) if not is_internal(k)},
        "internal": {k: jsonable(v) for k, v in sorted(values.items()) if is_internal(k)},
        "channel_versions": dict(tup.checkpoint.get("channel_versions") or {}),
        "pending_writes": [
            {"task_id": task_id, "channel": channel, "value": jsonable(value)}
            for task_id, channel, value in tup.pending_writes or ()
        ],
    }


# -- the list of threads -----------------------------------------------------------


def threads_table(threads: Sequence[ThreadSummary]) -> list[str]:
    """The lines of the `threads` table.

    Example:
        >>> threads_table([])[0].split()
        ['THREAD', 'CHECKPOINTS', 'LAST', 'ACTIVITY', '(UTC)', 'SIZE', 'STATUS']
    """
    header = ["THREAD", "CHECKPOINTS", "LAST ACTIVITY (UTC)", "SIZE", "STATUS"]
    rows = []
    for t in threads:
        status, detail = _summary_status(t)
        if t.locked_by is not None:
            detail = f"running now (lock held by pid {t.locked_by})" + (
                f"; {detail}" if detail else ""
            )
        rows.append(
            [
                t.thread_id,
                str(t.checkpoints),
                _timestamp(t.last_activity),
                human_bytes(t.size_bytes),
                f"{status:<13}{detail}".rstrip(),
            ]
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    right = {1, 3}
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=False))
        ]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def _timestamp(when: dt.datetime | None) -> str:
    if when is None:
        return "-"
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def human_bytes(n: int | None) -> str:
    """A size for people.

    Example:
        >>> human_bytes(512), human_bytes(14_580), human_bytes(3 * 1024**3)
        ('512 B', '14.2 KiB', '3.0 GiB')
    """
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


# -- the tree of one thread ----------------------------------------------------------


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
        >>> from pgcheckpoint.threadview import link
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


def page_lines(page: ThreadPage) -> list[str]:
    """The drawn tree of a page, with a header (plain text, no colour).

    Example:
        >>> page_lines(ThreadPage("t", "", 0, 0, []))[0]
        "thread 't'  namespace (root)  0 checkpoints"
    """
    ns = repr(page.checkpoint_ns) if page.checkpoint_ns else "(root)"
    lines = [f"thread {page.thread_id!r}  namespace {ns}  {page.total:,} checkpoints"]
    latest = page.latest
    if latest is not None:
        status, detail = classify(latest)
        lines.append(f"status: {status}" + (f": {detail}" if detail else ""))
    if page.locked_by is not None:
        lines.append(f"running now: lock held by pid {page.locked_by}")
    elif not page.lock_seen:
        lines.append(f"lock: {STANDBY_LOCKS}")
    if page.older:
        lines.append(
            f"┆ {page.older:,} older checkpoints not shown; the page before: pgcheckpoint show "
            f"{shell_quote(page.thread_id)}{_ns_option(page.checkpoint_ns)} --checkpoint "
            f"{page.older_id} --limit {len(page.nodes)}"
        )
    short = short_ids([n.checkpoint_id for n in page.nodes])
    for row in tree_rows(page.nodes):
        node = row.node
        hidden = row.parent_hidden
        if hidden is not None and hidden != page.older_id:
            # a fork from before the page, or a parent deleted by a prune
            gone = ", not shown" if page.older else " (pruned)"
            lines.append(f"{row.prefix}┆ from {hidden[-SHORT_ID:]}{gone}")
        lines.append(f"{row.prefix}● {node_line(node, short[node.checkpoint_id])}")
        lines.extend(f"{row.continuation}  {text}" for text in node_details(node))
    if page.newer:
        lines.append(f"┆ {page.newer:,} newer checkpoints not shown")
    return lines


def _ns_option(ns: str) -> str:
    return f" --ns {shell_quote(ns)}" if ns else ""


def short_ids(ids: Sequence[str]) -> dict[str, str]:
    """The last characters of each id, as many as keep them apart (at least 8).

    LangGraph's checkpoint ids are UUIDv6: the first part is a clock shared by
    a thread's checkpoints, the last part is random.

    Example:
        >>> short_ids(["1ef-aaaa0001", "1ef-bbbb0001"])
        {'1ef-aaaa0001': 'aaaa0001', '1ef-bbbb0001': 'bbbb0001'}
    """
    size = SHORT_ID
    while True:
        tails = [i[-size:] for i in ids]
        if len(set(tails)) == len(tails) or all(len(i) <= size for i in ids):
            return dict(zip(ids, tails, strict=True))
        size += 4


def node_line(node: CheckpointNode, short_id: str) -> str:
    """The line drawn for a checkpoint: id, step, source, size, what ran, what changed.

    Example:
        >>> node_line(CheckpointNode("t", "", "c1", metadata={"step": -1, "source": "input"}), "c1")
        'c1  step -1  input        0 B'
    """
    step = "?" if node.step is None else str(node.step)
    parts = ["fork"] if node.fork else []
    if node.ran:
        ran = ", ".join(node.ran)
        parts.append(f"ran {ran}")
    elif node.ran is None:
        parts.append("ran ?")
    if node.sent:
        parts.append(f"{node.sent} send{'s' if node.sent != 1 else ''}")
    changed = [
        # the graph's input arrives in __start__
        ("input" if c.channel == START else c.channel)
        + ("" if c.bytes is None else f" ({human_bytes(c.bytes)})")
        for c in node.changed
        if (c.channel == START or not is_internal(c.channel)) and c.stored != "cleared"
    ]
    if changed:
        parts.append("changed " + ", ".join(changed))
    source = node.source or "?"
    line = f"{short_id}  step {step:<2}  {source:<6} {human_bytes(node.bytes):>9}"
    return line + ("  " + " · ".join(parts) if parts else "")


def node_details(node: CheckpointNode) -> list[str]:
    """The lines under a checkpoint: interrupts, errors, pending writes, subgraphs, status.

    Example:
        >>> node_details(CheckpointNode("t", "", "c1", next=[]))
        ['finished']
    """
    lines = []
    for damage in node.damage:
        lines.append(f"damaged: {damage.what}")
        lines.append(f"  look at it: {damage.look}")
    for task in node.tasks:
        for value in task.interrupts:
            if task.state == "interrupted":
                lines.append(f"interrupt: {task.label} asks {summarize(value)}")
            else:
                answer = f"got {summarize(task.resume[0], 30)} for" if task.resume else "asked"
                lines.append(f"interrupt: {task.label} {answer} {summarize(value)}")
        if task.error is not None:
            if isinstance(task.error, str):
                error = summarize(task.error, 80, quote=False)
            else:
                error = summarize(task.error)
            lines.append(f"error: {task.label} failed: {error}")
    if node.pending_writes:
        for task in node.tasks:
            if task.state == "done":
                writes = ", ".join(
                    f"{channel} ({human_bytes(size)})"
                    for channel, size in task.writes
                    if not is_edge(channel)
                )
                lines.append(
                    f"pending: {task.label} wrote {writes or 'only edges'}; no checkpoint followed"
                )
    for sub in node.subgraphs:
        status = classify(sub.latest)[0]
        lines.append(
            f"subgraph: {sub.checkpoints} checkpoints, {status}:{_ns_option(sub.checkpoint_ns)}"
        )
    if node.head:
        lines.append(_head_status(node))
    return lines


def _head_status(node: CheckpointNode) -> str:
    name, detail = classify(node)
    if name == "damaged":
        return "damaged: what it holds cannot be trusted; fix or delete the rows above"
    if name == "interrupted":
        return "interrupted: waiting for Command(resume=...)"
    if name == "stopped":
        saved = any(t.state in ("done", "failed") for t in node.tasks)
        nodes = ", ".join(node.next or ()) or "?"
        return f"stopped mid-step: next {nodes}" if saved else f"stopped before {nodes}"
    return name + (f": {detail}" if detail else "")


# -- one checkpoint in full ----------------------------------------------------------


def values_lines(tup: CheckpointTuple, width: int | None) -> list[str]:
    """A checkpoint's full state for people: each channel pretty-printed within `width`."""
    data = values_json(tup)
    ns = repr(data["checkpoint_ns"]) if data["checkpoint_ns"] else "(root)"
    meta = tup.metadata or {}
    lines = [
        f"checkpoint {data['checkpoint_id']}  thread {data['thread_id']!r}  namespace {ns}",
        f"step {meta.get('step')}  source {meta.get('source')}  "
        f"parent {data['parent_checkpoint_id'] or '-'}",
    ]
    extra = {k: v for k, v in meta.items() if k not in ("step", "source", "parents")}
    if extra:
        lines.append(f"metadata {json.dumps(data['metadata'], ensure_ascii=False, default=str)}")
    values = tup.checkpoint.get("channel_values") or {}
    wrap = max(40, (width or 100) - 4)
    lines.append("values:")
    shown = [k for k in sorted(values) if not is_internal(k)]
    if not shown:
        lines.append("  (none)")
    for key in shown:
        text = pprint.pformat(values[key], width=wrap - len(key) - 2, sort_dicts=False)
        first, *rest = text.splitlines()
        lines.append(f"  {key}: {first}")
        lines.extend(" " * (len(key) + 4) + line for line in rest)
    internal = [k for k in sorted(values) if is_internal(k)]
    if internal:
        lines.append(f"internal channels: {', '.join(internal)}")
    if tup.pending_writes:
        lines.append("pending writes:")
        for task_id, channel, value in tup.pending_writes:
            text = " ".join(pprint.pformat(value, width=10_000).split())
            lines.append(f"  {task_id[:8]} {channel}: {text}")
    return lines

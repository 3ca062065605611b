"""A page of a thread as a Graphviz digraph: `pgcheckpoint show --dot`.

Example:
    >>> from pgcheckpoint.threadview import ThreadPage
    >>> dot_graph(ThreadPage("t", "", 0, 0, [])).splitlines()[0]
    'digraph "t" {'
"""

from __future__ import annotations

from .model import ThreadPage
from .render import SHORT_ID, short_ids
from .terminal import printable
from .triggers import classify

__all__ = ["dot_graph"]


def dot_graph(page: ThreadPage) -> str:
    """The page as a Graphviz digraph, oldest at the top.

    Interrupted checkpoints are yellow, failed steps red, finished heads green;
    a step whose writes no checkpoint followed has a dashed border.

    Example:
        >>> dot_graph(ThreadPage("t", "", 0, 0, [])).splitlines()[0]
        'digraph "t" {'
    """
    short = short_ids([n.checkpoint_id for n in page.nodes])
    ids = set(short)
    lines = [
        f"digraph {_dot(page.thread_id)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="monospace", '
        "fontsize=10];",
    ]
    for node in sorted(page.nodes, key=lambda n: n.checkpoint_id):
        label = [f"{short[node.checkpoint_id]}  step {node.step}  {node.source or '?'}"]
        if node.ran:
            label.append("ran " + ", ".join(node.ran))
        for task in node.tasks:
            if task.state == "interrupted":
                label.append(f"interrupt: {task.label}")
            if task.state == "failed":
                label.append(f"error: {task.label}")
        attrs = {"label": "\n".join(label)}
        status = classify(node)[0] if node.head else None
        if status == "interrupted" or any(t.state == "interrupted" for t in node.tasks):
            attrs["fillcolor"] = "#fff3b0"
        elif any(t.state == "failed" for t in node.tasks):
            attrs["fillcolor"] = "#ffc9c9"
        elif status == "finished":
            attrs["fillcolor"] = "#d3f9d8"
        if node.pending_writes:
            attrs["style"] = "rounded,filled,dashed"
        lines.append(f"  {_dot(node.checkpoint_id)} [{_dot_attrs(attrs)}];")
        if node.parent_id in ids:
            edge = ' [style=bold, label="fork"]' if node.fork else ""
            lines.append(f"  {_dot(node.parent_id or '')} -> {_dot(node.checkpoint_id)}{edge};")
        elif node.parent_id:
            lines.append(
                f"  {_dot(node.parent_id)} [label={_dot('…' + node.parent_id[-SHORT_ID:])}, "
                'style="rounded,dashed"];'
            )
            lines.append(f"  {_dot(node.parent_id)} -> {_dot(node.checkpoint_id)} [style=dashed];")
        for sub in node.subgraphs:
            sub_id = f"ns:{sub.checkpoint_ns}"
            sub_label = (
                f"subgraph {sub.checkpoint_ns}\n{sub.checkpoints} checkpoints, "
                f"{classify(sub.latest)[0]}"
            )
            lines.append(
                f'  {_dot(sub_id)} [label={_dot(sub_label)}, shape=component, fillcolor="#e7f5ff"];'
            )
            lines.append(f"  {_dot(node.checkpoint_id)} -> {_dot(sub_id)} [style=dotted];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot(text: str) -> str:
    # control characters are shown as escapes (`\x1b`, its backslash escaped for DOT)
    escaped = printable(text, keep="\n").replace("\\", "\\\\")
    escaped = escaped.replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _dot_attrs(attrs: dict[str, str]) -> str:
    return ", ".join(f"{k}={_dot(v)}" for k, v in attrs.items())

"""What a thread did, read from the tables without its graph.

`pgcheckpoint threads` and `pgcheckpoint show` are built on this package, in
these rooms:

- `model`: the data (`CheckpointNode`, `TaskInfo`, `SubgraphInfo`,
  `ThreadPage`, `ThreadSummary`, `ChannelChange`, `Damage`);
- `damage`: what is wrong with a damaged row, and the query that shows it;
- `triggers`: LangGraph's rules read back from a checkpoint (which nodes ran,
  which it triggers, a thread's status);
- `payloads`: stored values as JSON and as one short line of text;
- `ops`: the I/O-free ops that read a thread or a list of threads, run by
  `saver.run(op)`; `search`: threads found by their sealed metadata;
- `render`: the drawn tree, the table and JSON; `dot`: Graphviz DOT.

Example:
    >>> from pgcheckpoint.threadview import page_lines, thread_page_op
    >>> page = saver.run(thread_page_op(saver, "support-1234"))  # doctest: +SKIP
    >>> print("\\n".join(page_lines(page)))  # doctest: +SKIP
"""

from __future__ import annotations

from .dot import dot_graph
from .model import (
    SEALED,
    ChannelChange,
    CheckpointNode,
    Damage,
    SubgraphInfo,
    TaskInfo,
    ThreadPage,
    ThreadSummary,
    link,
)
from .ops import checkpoint_values_op, recent_threads_op, resolve_checkpoint_op, thread_page_op
from .payloads import jsonable, summarize
from .render import (
    TreeRow,
    page_json,
    page_lines,
    thread_json,
    threads_table,
    tree_rows,
)
from .search import MetadataSearch, sealed_search_op
from .triggers import classify, is_internal, nodes_that_ran, task_name, triggered_nodes

__all__ = [
    "SEALED",
    "ChannelChange",
    "CheckpointNode",
    "Damage",
    "MetadataSearch",
    "SubgraphInfo",
    "TaskInfo",
    "ThreadPage",
    "ThreadSummary",
    "TreeRow",
    "checkpoint_values_op",
    "classify",
    "dot_graph",
    "is_internal",
    "jsonable",
    "link",
    "nodes_that_ran",
    "page_json",
    "page_lines",
    "recent_threads_op",
    "resolve_checkpoint_op",
    "sealed_search_op",
    "summarize",
    "task_name",
    "thread_json",
    "thread_page_op",
    "threads_table",
    "tree_rows",
    "triggered_nodes",
]

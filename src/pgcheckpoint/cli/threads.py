"""See threads from the terminal: `pgcheckpoint threads` and `pgcheckpoint show`.

Both only read, in one read-only snapshot (REPEATABLE READ), so they are safe
on a live database and never block the application. Values are decoded as the
application reads them, decrypted when `PGCHECKPOINT_AES_KEYS` (or
`LANGGRAPH_AES_KEY`) is set; without a key, encrypted payloads show as
`<encrypted>`. The logic lives in `pgcheckpoint.threadview`; this module draws.

Example:
    $ pgcheckpoint threads --since 2d --metadata user_id=42
    $ pgcheckpoint show support-1234
    $ pgcheckpoint show support-1234 --values --checkpoint 9b512346
    $ pgcheckpoint show support-1234 --json | jq '.checkpoints[0].tasks'
    $ pgcheckpoint show support-1234 --dot | dot -Tsvg > thread.svg
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from . import (
    DURATION_UNITS,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_command,
    positive_int,
    resolve_dsn,
    resolve_schema,
)

if TYPE_CHECKING:
    from ..ops import Op
    from ..saver import PostgresSaver
    from ..threadview import CheckpointNode, ThreadPage, ThreadSummary

T = TypeVar("T")

DEFAULT_THREADS = 20
DEFAULT_PAGE = 50
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_SHORT_ID = 8


def register(subparsers: Any) -> None:
    """Add the `threads` and `show` commands."""
    p = add_command(
        subparsers,
        "threads",
        help="list recent threads with their size and status",
        description=(
            "List the threads with the most recent checkpoints: how many checkpoints, the "
            "last activity, the stored size, and whether each is finished, interrupted "
            "(waiting for Command(resume=...)) or stopped mid-step. Read-only."
        ),
    )
    p.add_argument(
        "--limit",
        type=positive_int,
        default=DEFAULT_THREADS,
        metavar="N",
        help=f"how many threads (default: {DEFAULT_THREADS})",
    )
    p.add_argument(
        "--since",
        type=parse_since,
        metavar="WHEN",
        help="only threads active since then: 30m, 12h, 2d, 1w, or a UTC date/time "
        "such as 2025-06-01 or 2025-06-01T12:00",
    )
    p.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only threads with a checkpoint whose metadata has KEY=VALUE (repeat to "
        "require several); the value matches as text or as JSON (42, true)",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=threads_command)

    p = add_command(
        subparsers,
        "show",
        help="draw the checkpoint tree of one thread",
        description=(
            "Draw a thread's checkpoints as a tree (forks from time travel and "
            "update_state are branches), newest at the bottom, each with its step, "
            "source, the nodes that ran, what changed, pending writes, interrupts and "
            "errors. Shows the newest --limit checkpoints; read-only."
        ),
    )
    p.add_argument("thread_id", metavar="THREAD_ID")
    p.add_argument(
        "--ns",
        default="",
        metavar="NS",
        help="the namespace to show: a subgraph run, as listed under its parent "
        "(default: the root graph)",
    )
    p.add_argument(
        "--checkpoint",
        metavar="ID",
        help="a checkpoint id, or its last characters as shown: the one --values prints "
        "(default: the latest); without --values, the page ends there",
    )
    p.add_argument(
        "--limit",
        type=positive_int,
        default=DEFAULT_PAGE,
        metavar="N",
        help=f"how many checkpoints, newest first (default: {DEFAULT_PAGE})",
    )
    p.add_argument("--values", action="store_true", help="print the full state of one checkpoint")
    output = p.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON for scripts")
    output.add_argument(
        "--dot", action="store_true", help="print the tree in Graphviz DOT (pipe to `dot -Tsvg`)"
    )
    p.set_defaults(handler=show_command)


def parse_since(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """A `--since` value: a duration back from now (`2d`) or a date/time (UTC if naive).

    Example:
        >>> now = dt.datetime(2025, 6, 3, tzinfo=dt.timezone.utc)
        >>> parse_since("2d", now).isoformat()
        '2025-06-01T00:00:00+00:00'
    """
    cleaned = text.strip().lower().replace(" ", "")
    match = _DURATION.match(cleaned)
    if match:
        seconds = float(match.group(1)) * DURATION_UNITS[match.group(2)]
        now = now if now is not None else dt.datetime.now(dt.timezone.utc)
        return now - dt.timedelta(seconds=seconds)
    iso = text.strip()
    if iso.endswith(("Z", "z")):
        iso = iso[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(iso)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (30m, 12h, 2d, 1w) nor a date (2025-06-01)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)


def parse_metadata(pairs: Sequence[str]) -> list[dict[str, Any]]:
    """`KEY=VALUE` filters as the metadata objects any of which must match.

    A value that reads as JSON other than a string also matches as that JSON
    value, so `step=3` finds `{"step": 3}` and `user=42` finds `"42"` or `42`.

    Example:
        >>> parse_metadata(["user=42"])
        [{'user': '42'}, {'user': 42}]
    """
    choices: list[list[tuple[str, Any]]] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(
                f"--metadata {pair!r} is not KEY=VALUE, e.g. --metadata user_id=42",
                exit_code=EXIT_USAGE,
            )
        options: list[Any] = [value]
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        if not isinstance(parsed, str):
            options.append(parsed)
        choices.append([(key, option) for option in options])
    return [dict(combo) for combo in itertools.product(*choices)]


# -- running ------------------------------------------------------------------------


class _Reader:
    """Runs operations through a saver, each in one read-only snapshot."""

    def __init__(self, saver: PostgresSaver) -> None:
        self.saver = saver

    def run(self, op: Op[T]) -> T:
        return self.saver.run(op, atomic=True)


@contextmanager
def _reader(args: argparse.Namespace) -> Iterator[_Reader]:
    from psycopg import Connection, IsolationLevel
    from psycopg.rows import dict_row

    from ..saver import PostgresSaver

    dsn = resolve_dsn(args)
    schema = resolve_schema(args)
    serde = _serde_from_env()
    with Connection.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        # REPEATABLE READ: the page, its counts and its subgraphs agree with
        # each other while the application keeps writing
        conn.read_only = True
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        yield _Reader(PostgresSaver(conn, serde=serde, schema=schema))


def _serde_from_env() -> Any:
    from ..crypto import KEYS_ENV, LANGGRAPH_KEY_ENV, EncryptedSerde
    from ..errors import InvalidInputError

    if not (os.environ.get(KEYS_ENV, "").strip() or os.environ.get(LANGGRAPH_KEY_ENV)):
        return None
    try:
        # A database being migrated to encryption holds both kinds of values.
        return EncryptedSerde.from_env(allow_plaintext=True)
    except InvalidInputError as exc:
        raise CliError(str(exc), exit_code=EXIT_USAGE) from None


def _width() -> int | None:
    """The terminal width to cut lines at, or None when stdout is not a terminal."""
    try:
        if not sys.stdout.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size((100, 24)).columns


def _fit(line: str, width: int | None) -> str:
    # a wrapped line would break the drawing, so it is cut instead
    if width is None or len(line) <= width:
        return line
    return line[: max(1, width - 1)] + "…"


def _emit(lines: Sequence[str]) -> None:
    width = _width()
    out = sys.stdout
    for line in lines:
        out.write(_fit(line, width) + "\n")
    out.flush()


# -- threads ------------------------------------------------------------------------


def threads_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint threads`."""
    from ..threadview import recent_threads_op

    filters = parse_metadata(args.metadata) if args.metadata else None
    with _reader(args) as reader:
        threads = reader.run(
            recent_threads_op(
                reader.saver,
                schema=resolve_schema(args),
                limit=args.limit,
                since=args.since,
                metadata=filters,
            )
        )
    if args.json:
        print(json.dumps([t.as_json() for t in threads], ensure_ascii=False, indent=2))
        return EXIT_OK
    if not threads:
        print("no threads found", file=sys.stderr)
        if filters and _serde_from_env() is not None:
            print(
                "metadata kept encrypted cannot be filtered on; only keys the application "
                "lists in filterable_metadata can",
                file=sys.stderr,
            )
        return EXIT_OK
    _emit(threads_table(threads))
    if len(threads) == args.limit:
        print(
            f"the {len(threads)} most recently active threads; --limit N for more",
            file=sys.stderr,
        )
    return EXIT_OK


def threads_table(threads: Sequence[ThreadSummary]) -> list[str]:
    """The lines of the `threads` table.

    Example:
        >>> threads_table([])[0].split()
        ['THREAD', 'CHECKPOINTS', 'LAST', 'ACTIVITY', '(UTC)', 'SIZE', 'STATUS']
    """
    header = ["THREAD", "CHECKPOINTS", "LAST ACTIVITY (UTC)", "SIZE", "STATUS"]
    rows = []
    for t in threads:
        detail = t.detail
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
                f"{t.status:<13}{detail}".rstrip(),
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


# -- show ---------------------------------------------------------------------------


def show_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint show`."""
    from ..threadview import resolve_checkpoint_op, thread_page_op

    if args.values and args.dot:
        raise CliError("--dot draws the tree; drop --values", exit_code=EXIT_USAGE)
    with _reader(args) as reader:
        checkpoint_id = None
        if args.checkpoint:
            found = reader.run(
                resolve_checkpoint_op(reader.saver, args.thread_id, args.ns, args.checkpoint)
            )
            checkpoint_id = _one_checkpoint(args, found)
        if args.values:
            return _show_values(args, reader, checkpoint_id)
        page = reader.run(
            thread_page_op(
                reader.saver,
                args.thread_id,
                args.ns,
                limit=args.limit,
                until=checkpoint_id,
            )
        )
    if page.total == 0:
        raise CliError(_not_found(args.thread_id, args.ns, page.namespaces))
    if args.json:
        print(json.dumps(page.as_json(), ensure_ascii=False, indent=2))
    elif args.dot:
        sys.stdout.write(dot_graph(page))
    else:
        _emit(page_lines(page))
    return EXIT_OK


def _one_checkpoint(args: argparse.Namespace, found: Sequence[str]) -> str:
    wanted: str = args.checkpoint
    if wanted in found:
        return wanted
    if len(found) == 1:
        return found[0]
    where = f"thread {args.thread_id!r}, namespace {args.ns!r}"
    if not found:
        raise CliError(
            f"no checkpoint {args.checkpoint!r} in {where}; `pgcheckpoint show "
            f"{_quote(args.thread_id)}` lists them"
        )
    raise CliError(
        f"{args.checkpoint!r} matches several checkpoints of {where} "
        f"({', '.join(found[:3])}, ...): give more of the id"
    )


def _not_found(thread_id: str, ns: str, namespaces: dict[str, int]) -> str:
    if not namespaces:
        return f"thread {thread_id!r} has no checkpoints; `pgcheckpoint threads` lists recent ones"
    listed = ", ".join(f"{n!r} ({c})" for n, c in list(namespaces.items())[:5])
    return (
        f"thread {thread_id!r} has no checkpoints in namespace {ns!r}; its namespaces are "
        f"{listed}: pass one with --ns"
    )


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def page_lines(page: ThreadPage) -> list[str]:
    """The drawn tree of a page, with a header (plain text, no colour).

    Example:
        >>> from pgcheckpoint.threadview import ThreadPage
        >>> page_lines(ThreadPage("t", "", 0, 0, []))[0]
        "thread 't'  namespace (root)  0 checkpoints"
    """
    from ..threadview import classify, tree_rows

    ns = repr(page.checkpoint_ns) if page.checkpoint_ns else "(root)"
    lines = [f"thread {page.thread_id!r}  namespace {ns}  {page.total:,} checkpoints"]
    latest = page.latest
    if latest is not None:
        status, detail = classify(latest)
        lines.append(f"status: {status}" + (f": {detail}" if detail else ""))
    if page.older:
        lines.append(
            f"┆ {page.older:,} older checkpoints not shown; the page before: pgcheckpoint show "
            f"{_quote(page.thread_id)}{_ns_option(page.checkpoint_ns)} --checkpoint "
            f"{page.older_id} --limit {len(page.nodes)}"
        )
    short = short_ids([n.checkpoint_id for n in page.nodes])
    for row in tree_rows(page.nodes):
        node = row.node
        hidden = row.parent_hidden
        if hidden is not None and hidden != page.older_id:
            # a fork from before the page, or a parent deleted by a prune
            gone = ", not shown" if page.older else " (pruned)"
            lines.append(f"{row.prefix}┆ from {hidden[-_SHORT_ID:]}{gone}")
        lines.append(f"{row.prefix}● {node_line(node, short[node.checkpoint_id])}")
        lines.extend(f"{row.continuation}  {text}" for text in node_details(node))
    if page.newer:
        lines.append(f"┆ {page.newer:,} newer checkpoints not shown")
    return lines


def _ns_option(ns: str) -> str:
    return f" --ns {_quote(ns)}" if ns else ""


def short_ids(ids: Sequence[str]) -> dict[str, str]:
    """The last characters of each id, as many as keep them apart (at least 8).

    LangGraph's checkpoint ids are UUIDv6: the first part is a clock shared by
    a thread's checkpoints, the last part is random.

    Example:
        >>> short_ids(["1ef-aaaa0001", "1ef-bbbb0001"])
        {'1ef-aaaa0001': 'aaaa0001', '1ef-bbbb0001': 'bbbb0001'}
    """
    size = _SHORT_ID
    while True:
        tails = [i[-size:] for i in ids]
        if len(set(tails)) == len(tails) or all(len(i) <= size for i in ids):
            return dict(zip(ids, tails, strict=True))
        size += 4


def node_line(node: CheckpointNode, short_id: str) -> str:
    """The line drawn for a checkpoint: id, step, source, size, what ran, what changed.

    Example:
        >>> from pgcheckpoint.threadview import CheckpointNode
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
        ("input" if c.channel == "__start__" else c.channel)
        + ("" if c.bytes is None else f" ({human_bytes(c.bytes)})")
        for c in node.changed
        if (c.channel == "__start__" or not c.internal) and c.stored != "cleared"
    ]
    if changed:
        parts.append("changed " + ", ".join(changed))
    source = node.source or "?"
    line = f"{short_id}  step {step:<2}  {source:<6} {human_bytes(node.bytes):>9}"
    return line + ("  " + " · ".join(parts) if parts else "")


def node_details(node: CheckpointNode) -> list[str]:
    """The lines under a checkpoint: interrupts, errors, pending writes, subgraphs, status.

    Example:
        >>> from pgcheckpoint.threadview import CheckpointNode
        >>> node_details(CheckpointNode("t", "", "c1", next=[]))
        ['finished']
    """
    from ..threadview import classify, summarize

    lines = []
    for task in node.tasks:
        for value in task.interrupts:
            if task.state == "interrupted":
                lines.append(f"interrupt: {task.label} asks {summarize(value)}")
            else:
                answer = f"got {summarize(task.resume[0], 30)} for" if task.resume else "asked"
                lines.append(f"interrupt: {task.label} {answer} {summarize(value)}")
        if task.error is not None:
            error = task.error if isinstance(task.error, str) else summarize(task.error)
            lines.append(f"error: {task.label} failed: {_cut(error, 80)}")
    if node.pending_writes:
        for task in node.tasks:
            if task.state == "done":
                writes = ", ".join(
                    f"{channel} ({human_bytes(size)})"
                    for channel, size in task.writes
                    if not channel.startswith(("branch:to:", "join:"))
                )
                lines.append(
                    f"pending: {task.label} wrote {writes or 'only edges'}; no checkpoint followed"
                )
    for sub in node.subgraphs:
        status = sub.status
        lines.append(
            f"subgraph: {sub.checkpoints} checkpoints, {status}:{_ns_option(sub.checkpoint_ns)}"
        )
    if node.head:
        lines.append(_head_status(node, classify(node)))
    return lines


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _head_status(node: CheckpointNode, status: tuple[str, str]) -> str:
    name, detail = status
    if name == "interrupted":
        return "interrupted: waiting for Command(resume=...)"
    if name == "stopped":
        saved = any(t.state in ("done", "failed") for t in node.tasks)
        nodes = ", ".join(node.next or ()) or "?"
        return f"stopped mid-step: next {nodes}" if saved else f"stopped before {nodes}"
    return name + (f": {detail}" if detail else "")


def dot_graph(page: ThreadPage) -> str:
    """The page as a Graphviz digraph, oldest at the top.

    Interrupted checkpoints are yellow, failed steps red, finished heads green;
    a step whose writes no checkpoint followed has a dashed border.

    Example:
        >>> from pgcheckpoint.threadview import ThreadPage
        >>> dot_graph(ThreadPage("t", "", 0, 0, [])).splitlines()[0]
        'digraph "t" {'
    """
    from ..threadview import classify

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
                f"  {_dot(node.parent_id)} [label={_dot('…' + node.parent_id[-_SHORT_ID:])}, "
                'style="rounded,dashed"];'
            )
            lines.append(f"  {_dot(node.parent_id)} -> {_dot(node.checkpoint_id)} [style=dashed];")
        for sub in node.subgraphs:
            sub_id = f"ns:{sub.checkpoint_ns}"
            sub_label = f"subgraph {sub.checkpoint_ns}\n{sub.checkpoints} checkpoints, {sub.status}"
            lines.append(
                f'  {_dot(sub_id)} [label={_dot(sub_label)}, shape=component, fillcolor="#e7f5ff"];'
            )
            lines.append(f"  {_dot(node.checkpoint_id)} -> {_dot(sub_id)} [style=dotted];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _dot_attrs(attrs: dict[str, str]) -> str:
    return ", ".join(f"{k}={_dot(v)}" for k, v in attrs.items())


# -- values -------------------------------------------------------------------------


def _show_values(args: argparse.Namespace, reader: _Reader, checkpoint_id: str | None) -> int:
    from ..threadview import checkpoint_values_op, thread_page_op

    if checkpoint_id is None:
        page = reader.run(thread_page_op(reader.saver, args.thread_id, args.ns, limit=1))
        if page.total == 0:
            raise CliError(_not_found(args.thread_id, args.ns, page.namespaces))
        checkpoint_id = page.nodes[0].checkpoint_id
    tup = reader.run(checkpoint_values_op(reader.saver, args.thread_id, args.ns, checkpoint_id))
    if tup is None:  # deleted between the two reads
        raise CliError(f"checkpoint {checkpoint_id!r} no longer exists")
    if args.json:
        print(json.dumps(values_json(tup), ensure_ascii=False, indent=2))
    else:
        _emit(values_lines(tup, _width()))
    return EXIT_OK


def values_json(tup: Any) -> dict[str, Any]:
    """A checkpoint's full state for `show --values --json`."""
    from ..threadview import is_internal, jsonable

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


def values_lines(tup: Any, width: int | None) -> list[str]:
    """A checkpoint's full state for people: each channel pretty-printed."""
    import pprint

    from ..threadview import is_internal

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

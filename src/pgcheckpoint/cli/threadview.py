"""See threads from the terminal: `pgcheckpoint threads` and `pgcheckpoint show`.

Both only read, in one read-only snapshot (REPEATABLE READ), so they are safe
on a live database and never block the application. Values are decoded in
LangGraph's strict msgpack mode (`pgcheckpoint.codec.strict`): a stored object of a
type outside its allowlist shows as `<blocked: module.name>`, and nothing a
row names is ever imported or called. They are decrypted when
`PGCHECKPOINT_AES_KEYS` (or `LANGGRAPH_AES_KEY`) is set, and then a value
stored unencrypted is refused unless `--allow-plaintext` is given; without a
key, encrypted payloads show as `<encrypted>`. A value that cannot be read
shows as `<unreadable: why>` in its place, and a damaged row as `damaged`.
`threads --metadata` matches the sealed metadata when a key is set
(`pgcheckpoint.threadview.search`) and otherwise says its answer, read from
the editable readable column, is unverified. This module parses the options, runs the ops of
`pgcheckpoint.threadview` through `saver.run` and prints what
`pgcheckpoint.threadview.render` makes of their result.

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
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..threadview.terminal import json_text, printable, shell_quote
from . import (
    DURATION_UNITS,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_command,
    parse_duration,
    positive_int,
    resolve_dsn,
    resolve_schema,
)

if TYPE_CHECKING:  # the rest is imported by the handlers, keeping `--help` cheap
    from ..drivers.saver import PostgresSaver

DEFAULT_THREADS = 20
DEFAULT_PAGE = 50
DEFAULT_SCAN = 10_000  # threadview.search.DEFAULT_SCAN, without importing it for --help
_KEYS_ENV = "PGCHECKPOINT_AES_KEYS"


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
        "require several); the value matches as text or as JSON (42, true). With "
        f"{_KEYS_ENV} set, matched against the decrypted, authenticated metadata of "
        "the newest --scan checkpoints; without it, against the readable metadata "
        "column, which anyone who can write the table can edit (said as unverified)",
    )
    p.add_argument(
        "--scan",
        type=positive_int,
        default=DEFAULT_SCAN,
        metavar="N",
        help="with --metadata and a key: how many of the newest checkpoints to decrypt "
        f"and match at most (default: {DEFAULT_SCAN}); the command says when it "
        "stopped there",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    _add_allow_plaintext(p)
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
    _add_allow_plaintext(p)
    p.set_defaults(handler=show_command)


def _add_allow_plaintext(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-plaintext",
        action="store_true",
        help="with a key set, also read values stored unencrypted (a database being "
        "migrated to encryption); otherwise they are refused",
    )


def parse_since(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """A `--since` value: a duration back from now (`2d`) or a date/time (UTC if naive).

    Example:
        >>> now = dt.datetime(2025, 6, 3, tzinfo=dt.timezone.utc)
        >>> parse_since("2d", now).isoformat()
        '2025-06-01T00:00:00+00:00'
    """
    cleaned = text.strip().lower().replace(" ", "")
    if cleaned[:1].isdigit() and cleaned[-1:] in DURATION_UNITS:
        try:
            back = parse_duration(cleaned)
        except argparse.ArgumentTypeError as exc:
            if "1000 years" in str(exc):
                raise argparse.ArgumentTypeError(
                    f"{text!r} reaches back more than 1000 years: give a shorter duration or a date"
                ) from None
            raise
        now = now if now is not None else dt.datetime.now(dt.timezone.utc)
        return now - back
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


# -- the snapshot and the terminal ----------------------------------------------------


@contextmanager
def _reading_saver(args: argparse.Namespace) -> Iterator[PostgresSaver]:
    """A saver on one read-only REPEATABLE READ connection; run its ops with `atomic=True`."""
    from psycopg import Connection, IsolationLevel
    from psycopg.rows import dict_row

    from ..drivers.saver import PostgresSaver

    dsn = resolve_dsn(args)
    schema = resolve_schema(args)
    serde = _serde_from_env(args.allow_plaintext)
    with Connection.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        # REPEATABLE READ: the page, its counts and its subgraphs agree with
        # each other while the application keeps writing
        conn.read_only = True
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        yield PostgresSaver(conn, serde=serde, schema=schema)


def _serde_from_env(allow_plaintext: bool) -> Any:
    """Strict msgpack, inside the encryption when a key is set: no stored row runs code."""
    from ..codec.crypto import EncryptedSerde
    from ..codec.strict import StrictSerializer
    from ..errors import InvalidInputError

    strict = StrictSerializer()
    if not _key_configured():
        return strict
    try:
        return EncryptedSerde.from_env(serde=strict, allow_plaintext=allow_plaintext)
    except InvalidInputError as exc:
        raise CliError(str(exc), exit_code=EXIT_USAGE) from None


def _key_configured() -> bool:
    from ..codec.labels import KEYS_ENV, LANGGRAPH_KEY_ENV

    return bool(os.environ.get(KEYS_ENV, "").strip() or os.environ.get(LANGGRAPH_KEY_ENV))


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
    # what the application stored never reaches the terminal raw (escape sequences)
    width = _width()
    out = sys.stdout
    for line in lines:
        out.write(_fit(printable(line), width) + "\n")
    out.flush()


def _print_json(data: Any) -> None:
    print(json_text(data, indent=2))


# -- threads ------------------------------------------------------------------------


def threads_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint threads`."""
    from ..threadview.ops import recent_threads_op
    from ..threadview.render import thread_json, threads_table
    from ..threadview.search import MetadataSearch, sealed_search_op

    filters = parse_metadata(args.metadata) if args.metadata else None
    search: MetadataSearch | None = None
    with _reading_saver(args) as saver:
        if filters and _key_configured():
            op = sealed_search_op(
                saver,
                metadata=filters,
                schema=resolve_schema(args),
                limit=args.limit,
                since=args.since,
                scan=args.scan,
            )
            search = saver.run(op, atomic=True)
            threads = search.threads
        else:
            threads = saver.run(
                recent_threads_op(
                    saver,
                    schema=resolve_schema(args),
                    limit=args.limit,
                    since=args.since,
                    metadata=filters,
                ),
                atomic=True,
            )
    if args.json:
        _print_json([thread_json(t) for t in threads])
    elif threads:
        _emit(threads_table(threads))
    else:
        print("no threads found", file=sys.stderr)
    for note in _threads_notes(args, threads, filters, search):
        print(printable(note), file=sys.stderr)
    return EXIT_OK


def _threads_notes(
    args: argparse.Namespace, threads: Sequence[Any], filters: Any, search: Any
) -> list[str]:
    """What `threads` says on stderr besides the list: how far to trust it."""
    from ..threadview.render import STANDBY_LOCKS

    notes = []
    if filters and search is None:
        notes.append(
            "--metadata matched the readable metadata column, which anyone who can write "
            "the table can edit: the result is unverified; with the key set "
            f"({_KEYS_ENV}) it is matched against the sealed metadata instead"
            + ("" if threads else ", where every key is, not only those of filterable_metadata")
        )
    if search is not None:
        notes += _search_notes(args, search)
    damaged = [t.thread_id for t in threads if t.latest is not None and t.latest.damage]
    if damaged:
        notes.append(
            f"{len(damaged)} damaged: `pgcheckpoint show {shell_quote(damaged[0])}` says what "
            "is wrong with each checkpoint and the query that shows its row"
        )
    if any(not t.lock_seen for t in threads):
        notes.append(f"this server is a standby; whether a thread runs now: {STANDBY_LOCKS}")
    if threads and len(threads) == args.limit and not args.json:
        notes.append(f"the {len(threads)} most recently active threads; --limit N for more")
    return notes


def _search_notes(args: argparse.Namespace, search: Any) -> list[str]:
    notes = []
    if search.truncated:
        oldest = search.oldest
        back = "" if oldest is None else f", back to {_utc(oldest)} (UTC)"
        notes.append(
            f"--metadata: stopped after the newest {search.scanned:,} checkpoints{back}: "
            "threads older than that were not searched; --scan N to read more"
        )
    if search.altered:
        thread_ids = sorted({key[0] for key in search.altered})
        notes.append(
            f"--metadata: {len(search.altered)} checkpoints (threads {_some(thread_ids)}) "
            "have a readable metadata column that differs from their sealed metadata: "
            "someone without the key edited it; they were matched on the sealed metadata"
        )
    if search.unreadable:
        thread_ids = sorted({key[0] for key, _ in search.unreadable})
        notes.append(
            f"--metadata: the metadata of {len(search.unreadable)} checkpoints (threads "
            f"{_some(thread_ids)}) could not be read or authenticated, so they were not "
            f"matched: {search.unreadable[0][1]}"
        )
    unverified = [t.thread_id for t in search.threads if t.metadata_filter == "unverified"]
    if unverified:
        notes.append(
            f"--metadata: threads {_some(unverified)} matched on metadata no key "
            "authenticates (stored unencrypted, or in LangGraph's own format): unverified"
        )
    return notes


def _utc(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _some(names: Sequence[str], shown: int = 3) -> str:
    listed = ", ".join(repr(n) for n in names[:shown])
    return listed + (f" and {len(names) - shown} more" if len(names) > shown else "")


# -- show ---------------------------------------------------------------------------


def show_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint show`."""
    from ..threadview.dot import dot_graph
    from ..threadview.ops import resolve_checkpoint_op, thread_page_op
    from ..threadview.render import page_json, page_lines

    if args.values and args.dot:
        raise CliError("--dot draws the tree; drop --values", exit_code=EXIT_USAGE)
    with _reading_saver(args) as saver:
        checkpoint_id = None
        if args.checkpoint:
            op = resolve_checkpoint_op(saver, args.thread_id, args.ns, args.checkpoint)
            checkpoint_id = _one_checkpoint(args, saver.run(op, atomic=True))
        if args.values:
            return _show_values(args, saver, checkpoint_id)
        page_op = thread_page_op(
            saver, args.thread_id, args.ns, limit=args.limit, until=checkpoint_id
        )
        page = saver.run(page_op, atomic=True)
    if page.total == 0:
        raise CliError(_not_found(args.thread_id, args.ns, page.namespaces))
    if args.json:
        _print_json(page_json(page))
    elif args.dot:
        sys.stdout.write(printable(dot_graph(page), keep="\n"))
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
            f"{shell_quote(args.thread_id)}` lists them"
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


def _show_values(args: argparse.Namespace, saver: PostgresSaver, checkpoint_id: str | None) -> int:
    from ..threadview.damage import TornRowError
    from ..threadview.ops import checkpoint_values_op, thread_page_op
    from ..threadview.render import values_json, values_lines

    if checkpoint_id is None:
        page = saver.run(thread_page_op(saver, args.thread_id, args.ns, limit=1), atomic=True)
        if page.total == 0:
            raise CliError(_not_found(args.thread_id, args.ns, page.namespaces))
        checkpoint_id = page.nodes[0].checkpoint_id
    op = checkpoint_values_op(saver, args.thread_id, args.ns, checkpoint_id)
    try:
        tup = saver.run(op, atomic=True)
    except TornRowError as exc:  # a column the read cannot take apart (no JSON object)
        raise CliError(
            f"checkpoint {checkpoint_id!r} is damaged: its row cannot be read whole "
            f"({type(exc).__name__}: {exc}); `pgcheckpoint show {shell_quote(args.thread_id)}"
            f"{' --ns ' + shell_quote(args.ns) if args.ns else ''}` says what is wrong and "
            "the query that shows the row"
        ) from None
    if tup is None:  # deleted between the two reads
        raise CliError(f"checkpoint {checkpoint_id!r} no longer exists")
    if args.json:
        _print_json(values_json(tup))
    else:
        _emit(values_lines(tup, _width()))
    return EXIT_OK

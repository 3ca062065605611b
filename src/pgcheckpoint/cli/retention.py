"""`pgcheckpoint prune` (for cron): the sweeps of `pgcheckpoint.maintenance.retention`.

`pgcheckpoint prune` deletes threads idle for longer than `--older-than`, or
trims history, in short transactions while the application keeps running,
then the store's expired items (what `pgcheckpoint store sweep` deletes;
`--no-store` leaves them). Run it from cron; it exits 0 when the sweep ran,
even if some threads were skipped because something else held them (the
next run takes them), and non-zero with a message when it could not run.

Example:
    $ pgcheckpoint prune --older-than 30d --dry-run
    $ pgcheckpoint prune --older-than 30d --max-seconds 600
    $ pgcheckpoint prune --older-than 7d --strategy keep_latest
    $ pgcheckpoint prune --keep-last 50 --no-store
    # crontab: every night at 03:17
    17 3 * * * PGCHECKPOINT_DSN=postgresql://app@db/app pgcheckpoint prune --older-than 30d
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..maintenance.retention import DEFAULT_BATCH_SIZE
from ..threadview.terminal import json_text
from . import (
    DURATION_UNITS,
    EXIT_OK,
    add_command,
    human_size,
    parse_duration,
    positive_int,
    resolve_dsn,
    resolve_schema,
    seconds_value,
)

if TYPE_CHECKING:  # the rest is imported by the handlers
    from ..maintenance.retention import PruneReport


def register(subparsers: Any) -> None:
    """Add the `prune` command."""
    p = add_command(
        subparsers,
        "prune",
        help="delete idle threads or trim history (for cron)",
        description=(
            "Delete the threads whose newest checkpoint is older than --older-than, or keep "
            "only their latest checkpoint (--strategy keep_latest), or trim every thread to "
            "its newest N checkpoints (--keep-last N); then delete the store's expired items "
            "(--no-store: leave them). Runs in short transactions, safe while the application "
            "writes; a thread in use is skipped and taken by the next run."
        ),
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--older-than",
        type=parse_duration,
        metavar="AGE",
        help="threads idle for longer than AGE: a number and a unit s, m, h, d or w "
        "(30d, 12h, 2w3d)",
    )
    what.add_argument(
        "--keep-last",
        type=positive_int,
        metavar="N",
        help="keep every thread's newest N checkpoints per namespace, whatever their age",
    )
    p.add_argument(
        "--strategy",
        choices=("delete", "keep_latest"),
        default=None,
        help="with --older-than: delete the threads (default) or keep their latest "
        "checkpoint per namespace",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would go; change nothing")
    p.add_argument(
        "--no-store",
        dest="sweep_store",
        action="store_false",
        help="leave the store's expired items alone (by default they are deleted too, as "
        "`pgcheckpoint store sweep` does)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"threads per transaction (default: {DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--max-threads", type=positive_int, metavar="N", help="look at most at N threads"
    )
    p.add_argument(
        "--max-seconds",
        type=_positive_float,
        metavar="S",
        help="start no new batch after S seconds",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=prune_command)


def _positive_float(text: str) -> float:
    value = seconds_value(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def prune_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint prune`."""
    from ..drivers.saver import PostgresSaver
    from . import EXIT_USAGE, CliError
    from .progress import Progress

    if args.keep_last is not None and args.strategy is not None:
        raise CliError(
            "--strategy goes with --older-than; --keep-last always keeps the newest N checkpoints",
            exit_code=EXIT_USAGE,
        )
    dsn = resolve_dsn(args)
    schema = resolve_schema(args)
    strategy = args.strategy or "delete"
    if args.keep_last is not None:
        doing = f"keeping the newest {args.keep_last} checkpoints"
    elif strategy == "delete":
        doing = f"deleting threads idle for {_age(args.older_than)}"
    else:
        doing = f"trimming threads idle for {_age(args.older_than)} to their latest checkpoint"
    label = ("dry run: " if args.dry_run else "") + doing
    bar = Progress(label, total=None)

    def advance(report: PruneReport) -> None:
        bar.total = report.total
        bar.advance(report.examined - bar.done)

    limits = {
        "batch_size": args.batch_size,
        "max_threads": args.max_threads,
        "max_seconds": args.max_seconds,
        "dry_run": args.dry_run,
        "progress": advance,
        "sweep_store": args.sweep_store,
    }
    with PostgresSaver.from_conn_string(dsn, schema=schema) as saver, bar:
        if args.keep_last is not None:
            report = saver.prune_keep_last(args.keep_last, **limits)
        else:
            report = saver.prune_older_than(args.older_than, strategy=strategy, **limits)
    if args.json:
        print(json_text(report.as_dict()))
    else:
        _print_report(report, trim=args.keep_last is not None or strategy != "delete")
    return EXIT_OK


def _print_report(report: PruneReport, *, trim: bool) -> None:
    verb = (
        ("would trim" if trim else "would delete")
        if report.dry_run
        else ("trimmed" if trim else "deleted")
    )
    print(
        f"{verb} {_n(report.threads, 'thread')}: {_n(report.checkpoints, 'checkpoint')}, "
        f"{_n(report.writes, 'write')}, {_n(report.blobs, 'value')}, {human_size(report.bytes)} "
        f"(looked at {_n(report.examined, 'thread')})"
    )
    if report.store_items is not None:
        verb = "would delete" if report.dry_run else "deleted"
        print(f"{verb} {_n(report.store_items, 'expired store item')}")
    if report.skipped:
        print(
            f"skipped {_n(len(report.skipped), 'thread')} in use (another sweep, a prune or a "
            f"run held them, or they were written to meanwhile): {_some(report.skipped)}; "
            "the next run takes them",
            file=sys.stderr,
        )
    if report.failed:
        print(
            f"left {_n(len(report.failed), 'thread')} whole after conflicts with concurrent "
            f"writes: {_some(report.failed)}; the next run tries them again",
            file=sys.stderr,
        )
    if not report.complete:
        print(
            "stopped at --max-threads or --max-seconds before the last thread or expired "
            "store item; run again to go on",
            file=sys.stderr,
        )


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _age(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds != delta.total_seconds():  # a fraction of a second: show it
        return f"{delta.total_seconds():g}s"
    for unit in ("w", "d", "h", "m"):
        if seconds % DURATION_UNITS[unit] == 0:
            return f"{seconds // DURATION_UNITS[unit]}{unit}"
    return f"{seconds}s"


def _some(thread_ids: list[str], limit: int = 5) -> str:
    shown = ", ".join(repr(t) for t in thread_ids[:limit])
    return shown + (f" and {len(thread_ids) - limit} more" if len(thread_ids) > limit else "")

"""`pgcheckpoint stats`: what the tables hold, from `pgcheckpoint.maintenance.stats`.

Rows and bytes of each table (data and indexes), the store's items (and
those expired but not swept yet), the oldest and newest checkpoint, and the
threads whose stored values take the most room. Read-only.
`--prometheus` prints the figures in Prometheus' text format, for
node_exporter's textfile collector (without the largest threads).

Example:
    $ pgcheckpoint stats
    $ pgcheckpoint stats --top 0 --json
    # written whole, then renamed, so node_exporter never reads half a file
    $ pgcheckpoint stats --prometheus > dir/pgcheckpoint.prom.tmp &&
      mv dir/pgcheckpoint.prom.tmp dir/pgcheckpoint.prom
"""

from __future__ import annotations

import argparse
from typing import Any

from ..threadview.terminal import json_text, printable
from . import (
    EXIT_OK,
    add_command,
    human_size,
    positive_int,
    print_table,
    resolve_dsn,
    resolve_schema,
)

DEFAULT_TOP = 10


def register(subparsers: Any) -> None:
    """Add the `stats` command."""
    p = add_command(
        subparsers,
        "stats",
        help="show what the tables hold: rows, bytes, activity, largest threads",
    )
    p.add_argument(
        "--top",
        type=_non_negative_int,
        default=DEFAULT_TOP,
        metavar="N",
        help=f"list the N largest threads (default: {DEFAULT_TOP}; 0: none)",
    )
    output = p.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the stats as JSON")
    output.add_argument(
        "--prometheus",
        action="store_true",
        help="print the stats in Prometheus' text format (for node_exporter's textfile "
        "collector), without the largest threads",
    )
    p.set_defaults(handler=stats_command)


def _non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else positive_int(text)


def stats_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint stats`."""
    from ..drivers.saver import PostgresSaver
    from ..maintenance.stats import DAMAGED_THREADS, prometheus_text, storage_stats_op

    dsn = resolve_dsn(args)
    schema = resolve_schema(args)
    top = 0 if args.prometheus else args.top
    with PostgresSaver.from_conn_string(dsn, schema=schema) as saver:
        stats = saver.run(storage_stats_op(schema, top=top))
    if args.prometheus:
        print(prometheus_text(stats, schema), end="")
        return EXIT_OK
    if args.json:
        print(json_text(stats.as_dict()))
        return EXIT_OK
    print(f"threads      {stats.threads}")
    print(f"checkpoints  {stats.checkpoints}")
    print(f"values       {stats.blobs}")
    print(f"writes       {stats.writes}")
    items, expired = stats.store.get("items", 0), stats.store.get("expired", 0)
    print(f"store items  {items}" + (f" ({expired} expired, not swept yet)" if expired else ""))
    print(f"oldest       {_when(stats.oldest)}")
    print(f"newest       {_when(stats.newest)}")
    lost = stats.unreachable
    if lost.get("checkpoints") or lost.get("blobs") or lost.get("writes"):
        print(
            f"unreachable  {lost['checkpoints']} checkpoints, {lost['blobs']} values, "
            f"{lost['writes']} writes, {human_size(lost['bytes'])}: rows no read returns"
        )
    else:
        print("unreachable  0")
    damaged = stats.damaged
    if damaged.get("checkpoints") or damaged.get("blobs"):
        some = ", ".join(repr(t) for t in damaged["thread_ids"])
        if len(damaged["thread_ids"]) >= DAMAGED_THREADS:
            some += ", ..."
        print(
            printable(
                f"damaged      {damaged['checkpoints']} checkpoints, {damaged['blobs']} values "
                f"(threads {some}): not as pgcheckpoint writes them; `pgcheckpoint show "
                "THREAD` says what is wrong"
            )
        )
    else:
        print("damaged      0")
    print()
    rows = [["table", "rows", "data", "indexes", "total"]]
    counts = {
        "pgc_checkpoints": str(stats.checkpoints),
        "pgc_blobs": str(stats.blobs),
        "pgc_writes": str(stats.writes),
        "pgc_store": str(items),
    }
    # the tables whose rows are not counted (pgc_deletions; the vector table,
    # where a store with an index made it) with their sizes, which `all` adds up
    for table in [*counts, *(t for t in stats.tables if t not in counts)]:
        size = stats.tables.get(table, {})
        rows.append(
            [
                table,
                counts.get(table, "-"),
                human_size(size.get("table_bytes", 0)),
                human_size(size.get("index_bytes", 0)),
                human_size(size.get("total_bytes", 0)),
            ]
        )
    total = sum(t.get("total_bytes", 0) for t in stats.tables.values())
    rows.append(["all", "", "", "", human_size(total)])
    print_table(rows)
    if stats.largest:
        print()
        print("largest threads (bytes of stored values)")
        rows = [["thread", "checkpoints", "values", "writes", "bytes", "newest"]]
        for t in stats.largest:
            rows.append(
                [
                    t["thread_id"],
                    str(t["checkpoints"]),
                    str(t["blobs"]),
                    str(t["writes"]),
                    human_size(t["bytes"]),
                    _when(t["newest"]),
                ]
            )
        print_table(rows)
    return EXIT_OK


def _when(value: Any) -> str:
    return "-" if value is None else value.isoformat(sep=" ", timespec="seconds")

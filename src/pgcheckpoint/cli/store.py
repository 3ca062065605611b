"""`pgcheckpoint store`: look into the store (`PostgresStore`) and sweep its expired items.

A namespace is written as its labels joined by `.` (no label holds one), or
`-` for the whole store. `show` reads an item without refreshing its TTL;
with `PGCHECKPOINT_AES_KEYS` set, sealed values are opened with those keys.
`sweep` deletes the items whose TTL has run out (from cron, beside
`pgcheckpoint prune`). `import` copies an official store's items and vectors.
Every command takes `--json`.

Example:
    $ pgcheckpoint store namespaces --prefix users
    $ pgcheckpoint store show users.u1 prefs --json
    $ pgcheckpoint store count users
    $ pgcheckpoint store sweep
    $ pgcheckpoint store import
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..threadview.terminal import json_text, printable
from . import EXIT_FAILED, EXIT_OK, CliError, add_command, positive_int, resolve_dsn, resolve_schema

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the `store` command group."""
    p = add_command(
        subparsers,
        "store",
        help="look into the store (namespaces, items, counts) and sweep expired items",
    )
    commands = p.add_subparsers(title="store commands", metavar="STORE_COMMAND")
    commands.required = True
    ls = add_command(commands, "namespaces", help="list namespaces, in label order")
    ls.add_argument("--prefix", default=None, help="labels a namespace starts with (a.b; * any)")
    ls.add_argument("--suffix", default=None, help="labels a namespace ends with (a.b; * any)")
    ls.add_argument(
        "--max-depth",
        type=positive_int,
        default=None,
        metavar="N",
        help="cut namespaces to N labels",
    )
    ls.add_argument(
        "--limit", type=positive_int, default=100, metavar="N", help="list at most N (default: 100)"
    )
    ls.set_defaults(handler=namespaces_command)
    show = add_command(commands, "show", help="print one item (its TTL is not refreshed)")
    show.add_argument("namespace", help="the item's namespace, labels joined by '.'")
    show.add_argument("key", help="the item's key")
    show.set_defaults(handler=show_command)
    count = add_command(commands, "count", help="count the items under a namespace prefix")
    count.add_argument("prefix", nargs="?", default="-", help="labels joined by '.'; - for all")
    count.set_defaults(handler=count_command)
    sweep = add_command(commands, "sweep", help="delete the items whose TTL has run out")
    sweep.set_defaults(handler=sweep_command)
    imp = add_command(
        commands,
        "import",
        help="copy the items and vectors of langgraph-checkpoint-postgres's store (table "
        "'store' of the schema); items already here stay",
    )
    imp.add_argument(
        "--page-size",
        type=positive_int,
        default=500,
        metavar="N",
        help="items per transaction (default: 500)",
    )
    imp.set_defaults(handler=import_command)
    for command in (ls, show, count, sweep, imp):
        command.add_argument("--json", action="store_true", help="print the result as JSON")


def _labels(text: str | None) -> tuple[str, ...]:
    if text is None or text == "-":
        return ()
    return tuple(text.split("."))


def _store(args: argparse.Namespace) -> Any:
    from ..codec.labels import KEYS_ENV, LANGGRAPH_KEY_ENV
    from ..drivers.store import PostgresStore

    serde = None
    if os.environ.get(KEYS_ENV, "").strip() or os.environ.get(LANGGRAPH_KEY_ENV):
        from ..codec.crypto import EncryptedSerde

        serde = EncryptedSerde.from_env(allow_plaintext=True)
    return PostgresStore.from_conn_string(
        resolve_dsn(args), schema=resolve_schema(args), serde=serde
    )


def _text(namespace: tuple[str, ...]) -> str:
    return printable(".".join(namespace))


def namespaces_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint store namespaces`."""
    with _store(args) as store:
        found = store.list_namespaces(
            prefix=_labels(args.prefix) or None,
            suffix=_labels(args.suffix) or None,
            max_depth=args.max_depth,
            limit=args.limit,
        )
    if args.json:
        print(json_text([list(ns) for ns in found]))
    else:
        for ns in found:
            print(_text(ns))
    return EXIT_OK


def show_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint store show`."""
    with _store(args) as store:
        item = store.get(_labels(args.namespace), args.key, refresh_ttl=False)
    if item is None:
        raise CliError(
            f"no item {args.key!r} in namespace {args.namespace!r}; list them with "
            "`pgcheckpoint store namespaces`",
            exit_code=EXIT_FAILED,
        )
    if args.json:
        print(json_text(item.dict(), indent=2))
    else:
        print(f"namespace  {_text(item.namespace)}")
        print(f"key        {printable(item.key)}")
        print(f"created    {item.created_at.isoformat(sep=' ', timespec='seconds')}")
        print(f"updated    {item.updated_at.isoformat(sep=' ', timespec='seconds')}")
        print(json_text(item.value, indent=2))
    return EXIT_OK


def count_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint store count`."""
    from ..store.batch import count_op

    with _store(args) as store:
        counts = store.run(count_op(_labels(args.prefix)), name="store_count")
    if args.json:
        print(json_text(counts))
    else:
        print(f"items    {counts['items']}")
        print(f"expired  {counts['expired']} (not swept yet)")
    return EXIT_OK


def sweep_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint store sweep`."""
    with _store(args) as store:
        swept = store.sweep_ttl()
    if args.json:
        print(json_text({"swept": swept}))
    else:
        print(f"swept {swept} expired items")
    return EXIT_OK


def import_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint store import`."""
    from ..store.importer import import_sweep

    with _store(args) as store:
        report = store.run_each(import_sweep(store.state, page_size=args.page_size))
    if args.json:
        print(json_text(report.as_dict()))
    else:
        print(
            f"copied {report.items} items and {report.vectors} vectors; "
            f"{report.kept} were here already"
        )
        for where, error in report.failed.items():
            print(f"failed {printable(where)}: {printable(error)}")
    return EXIT_FAILED if report.failed else EXIT_OK

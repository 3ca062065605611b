"""`pgcheckpoint import-langgraph`: copy threads from the official saver's tables.

Runs the import sweep of `pgcheckpoint.maintenance.importer`: reads the
`checkpoints`, `checkpoint_blobs` and `checkpoint_writes` tables of
`langgraph-checkpoint-postgres` (same database, or `--from-dsn`) and writes
every thread into pgcheckpoint's tables, a page of checkpoints per
transaction. Rows already copied are skipped, so the command can be re-run
after an interruption, or again after the application switched savers to pick
up what the old one wrote meanwhile.

Example:
    $ pgcheckpoint migrate --dsn postgresql://deploy@db/app
    $ pgcheckpoint import-langgraph --dsn postgresql://deploy@db/app
    $ pgcheckpoint import-langgraph --dsn postgresql://new/app --from-dsn postgresql://old/app
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from . import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_command,
    positive_int,
    resolve_dsn,
    resolve_schema,
)


def register(subparsers: Any) -> None:
    """Add the `import-langgraph` command."""
    p = add_command(
        subparsers,
        "import-langgraph",
        help="copy every thread from langgraph-checkpoint-postgres tables into pgcheckpoint's",
        description=(
            "Copy every thread from the tables of the official langgraph-checkpoint-postgres "
            "saver (the --dsn database, or --from-dsn; schema --from-schema) into "
            "pgcheckpoint's tables (--dsn, --schema). It does not create or upgrade those: "
            "run `pgcheckpoint migrate` first. Idempotent and resumable: rows already "
            "copied are skipped. The official tables are left as they are."
        ),
    )
    p.add_argument(
        "--from-dsn",
        metavar="DSN",
        help="database of the official saver's tables (default: the --dsn database)",
    )
    p.add_argument(
        "--from-schema",
        default="public",
        metavar="SCHEMA",
        help="schema of the official saver's tables (default: public)",
    )
    p.add_argument(
        "--thread",
        action="append",
        metavar="THREAD_ID",
        help="copy only this thread (repeatable)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=200,
        metavar="N",
        help="checkpoints per transaction (default: 200)",
    )
    p.add_argument(
        "--serde",
        metavar="MODULE:NAME",
        help="serializer your pgcheckpoint savers use, e.g. an encrypting one "
        "(default: LangGraph's, in strict msgpack mode: the few values the import "
        "decodes never run code)",
    )
    p.add_argument(
        "--from-serde",
        metavar="MODULE:NAME",
        help="serializer the official saver was given, when not LangGraph's default",
    )
    p.set_defaults(handler=run_import)


def run_import(args: argparse.Namespace) -> int:
    import psycopg
    from psycopg.rows import dict_row

    from ..codec.strict import StrictSerializer
    from ..commands import migrate_command
    from ..drivers.saver import PostgresSaver
    from ..maintenance.importer import LangGraphImporter, import_sweep
    from ..schema.migrate import current, head
    from .progress import Progress

    schema = resolve_schema(args)
    from_schema = resolve_schema(args, "from_schema")
    dsn = resolve_dsn(args)
    from_dsn = args.from_dsn or dsn
    # strict msgpack: a planted row of the source database must not run code here
    serde = _load_serde(args.serde, "--serde") if args.serde else StrictSerializer()
    source_serde = _load_serde(args.from_serde, "--from-serde") if args.from_serde else None
    revision = current(dsn, schema=schema)
    if revision != head():
        raise CliError(
            f"schema {schema!r} is at {revision or 'no revision'}, not {head()!r}: "
            f"run `{migrate_command(schema)}` first"
        )
    # No prepared statements: the command may go through a pooler like the app does.
    with (
        psycopg.connect(
            from_dsn, autocommit=True, prepare_threshold=None, row_factory=dict_row
        ) as source_conn,
        psycopg.connect(
            dsn, autocommit=True, prepare_threshold=None, row_factory=dict_row
        ) as target_conn,
    ):
        source = PostgresSaver(source_conn, schema=from_schema)
        target = PostgresSaver(target_conn, serde=serde, schema=schema)
        importer = LangGraphImporter(target, source_serde=source_serde, batch_size=args.batch_size)
        total = source.run(importer.check_source_op(args.from_schema))
        threads = None
        if args.thread:
            threads, total = list(dict.fromkeys(args.thread)), len(set(args.thread))
        with Progress("importing threads", total) as progress:

            def advance(thread_id: str, error: Exception | None) -> None:
                # one bad thread (an id too long, a value no serializer reads)
                # does not stop the others; the exit code reports it
                if error is not None:
                    progress.note(f"thread {thread_id!r} not copied: {error}")
                progress.advance()

            stats = target.run_each(import_sweep(importer, source, threads, progress=advance))
    print(
        f"copied {stats.checkpoints} checkpoints of {stats.threads} threads from schema "
        f"{args.from_schema!r} into schema {schema!r} ({stats.checkpoints_present} were "
        f"already there; {stats.blobs} values and {stats.writes} pending writes sent)"
    )
    if stats.failed:
        print(
            f"pgcheckpoint: error: {len(stats.failed)} threads were not copied (see above); "
            "fix them and run the command again: what was copied is kept",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _load_serde(spec: str, option: str) -> Any:
    """The serializer `MODULE:NAME` names: an instance, or a callable that makes one."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(
            f"{option} takes MODULE:NAME, e.g. myapp.checkpoints:serde, not {spec!r}",
            exit_code=EXIT_USAGE,
        )
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"{option} {spec!r} cannot be loaded: {exc}", exit_code=EXIT_USAGE) from exc
    if not hasattr(obj, "dumps_typed") and callable(obj):
        obj = obj()
    if not hasattr(obj, "dumps_typed") or not hasattr(obj, "loads_typed"):
        raise CliError(
            f"{option} {spec!r} is not a serializer (it has no dumps_typed/loads_typed)",
            exit_code=EXIT_USAGE,
        )
    return obj

"""Schema commands: `migrate`, `downgrade`, `current`, `history`.

`pgcheckpoint migrate` is meant for deploy pipelines: every replica may run it
at once (one migrates, the others wait for it and find nothing to do), and a
run that was interrupted can simply be run again.

Example:
    $ pgcheckpoint migrate --dsn postgresql://deploy@db/app
    $ pgcheckpoint migrate --schema tenant_a --to 0001
    $ pgcheckpoint migrate --sql > upgrade.sql
    $ pgcheckpoint current --check
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_command,
    add_connection_options,
    database_error,
    resolve_dsn,
    resolve_schema,
    schema_option,
    seconds_value,
)


def register(subparsers: Any) -> None:
    """Add the schema commands."""
    p = add_command(
        subparsers,
        "migrate",
        help="upgrade the schema to the newest revision (or --to REV)",
        description=(
            "Create or upgrade pgcheckpoint's tables. Safe to run from many processes at "
            "once and to re-run after an interruption. Needs a role that may run DDL."
        ),
    )
    p.add_argument("--to", metavar="REV", default="head", help="target revision (default: head)")
    p.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL instead of running it (no database needed), for DBAs",
    )
    p.add_argument(
        "--from",
        dest="from_rev",
        metavar="REV",
        help="with --sql: the revision the database is at (default: an empty database)",
    )
    p.add_argument(
        "--lock-timeout",
        type=seconds_value,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for another process's migration (default: 600)",
    )
    p.set_defaults(handler=run_migrate)

    p = add_command(
        subparsers,
        "downgrade",
        help="downgrade the schema to REV ('base' drops every table)",
    )
    p.add_argument("revision", metavar="REV", help="target revision, or 'base'")
    p.add_argument("--lock-timeout", type=seconds_value, default=600.0, metavar="SECONDS")
    p.set_defaults(handler=run_downgrade)

    p = add_command(subparsers, "current", help="print the revision the database is at")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if the schema is behind this version: not migrated, or before head "
        "(for readiness checks; a newer release's revision passes)",
    )
    p.set_defaults(handler=run_current)

    p = add_command(
        subparsers,
        "grants",
        help="print (or --apply) the GRANTs an application role needs at run time",
        description=(
            "Print the GRANT statements that let ROLE run the savers without DDL rights: "
            "USAGE on the schema, SELECT/INSERT/UPDATE/DELETE on the tables, SELECT on "
            "the version table. With --apply, run them (as the migrating role)."
        ),
    )
    p.add_argument("--role", required=True, help="the application's role")
    p.add_argument("--apply", action="store_true", help="run the statements on --dsn")
    p.set_defaults(handler=run_grants)

    p = subparsers.add_parser(
        "history",
        help="list the revisions this version ships",
        description="List the revisions this version of pgcheckpoint ships, oldest first.",
    )
    add_connection_options(p)  # accepted and ignored, so a shared option list works
    p.set_defaults(handler=run_history)


def run_migrate(args: argparse.Namespace) -> int:
    from ..schema.migrate import current, offline_sql, upgrade

    schema = resolve_schema(args)
    if args.sql:
        with _alembic_errors(schema):
            text = offline_sql(schema=schema, revision=args.to, start=args.from_rev)
        print(text, end="" if text.endswith("\n") else "\n")
        return EXIT_OK
    if args.from_rev is not None:
        raise CliError("--from only applies to --sql", exit_code=EXIT_USAGE)
    dsn = resolve_dsn(args)
    with _alembic_errors(schema):
        before = upgrade(dsn, schema=schema, revision=args.to, lock_timeout=args.lock_timeout)
        after = current(dsn, schema=schema)
    if before == after:
        print(f"schema {schema!r} is already at {_describe(after)}")
    else:
        print(f"schema {schema!r} migrated from {_describe(before)} to {_describe(after)}")
    warning = _official_threads_warning(dsn, schema)
    if warning:
        print(f"pgcheckpoint: warning: {warning}", file=sys.stderr)
    return EXIT_OK


def _official_threads_warning(dsn: str, schema: str) -> str | None:
    """What `setup()` logs when the official saver's tables hold threads ours lack."""
    import psycopg

    from ..core.official import official_threads_op
    from ..drivers.saver import PostgresSaver
    from ..errors import PgCheckpointError

    try:
        with PostgresSaver.from_conn_string(dsn, schema=schema) as saver:
            found = saver.run(official_threads_op(schema))
    except (psycopg.Error, PgCheckpointError):  # the migration succeeded all the same
        return None
    return None if found is None else found.message()


def run_downgrade(args: argparse.Namespace) -> int:
    from ..schema.migrate import current, downgrade

    schema = resolve_schema(args)
    dsn = resolve_dsn(args)
    with _alembic_errors(schema):
        before = downgrade(dsn, args.revision, schema=schema, lock_timeout=args.lock_timeout)
        after = current(dsn, schema=schema)
    if before == after:
        print(f"schema {schema!r} is already at {_describe(after)}")
    else:
        print(f"schema {schema!r} downgraded from {_describe(before)} to {_describe(after)}")
    return EXIT_OK


def run_current(args: argparse.Namespace) -> int:
    from ..schema.migrate import current, head, history

    schema = resolve_schema(args)
    dsn = resolve_dsn(args)
    revision = current(dsn, schema=schema)
    print(_describe(revision))
    known = [rev for rev, _down, _title in history()]
    # a revision this version does not know is a newer release's (rolling deploys)
    behind = revision is None or (revision in known and revision != known[-1])
    if args.check and behind:
        print(
            f"pgcheckpoint: schema {schema!r} is not at the newest revision "
            f"{head()!r}: run `pgcheckpoint migrate{schema_option(schema)}`",
            file=sys.stderr,
        )
        return EXIT_FAILED
    problem = _tables_problem(dsn, schema) if args.check else None
    if problem is not None:
        print(f"pgcheckpoint: {problem}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _tables_problem(dsn: str, schema: str) -> str | None:
    """What is wrong with the tables of a schema whose version table says it is migrated.

    A version table that another role planted, or that outlived its tables,
    claims revisions whose changes never ran: its tables are missing, or owned
    by another role than it.
    """
    from ..schema.ddl import TABLES, VERSION_TABLE
    from ..schema.roles import ownership

    owners = ownership(dsn, schema=schema).owners
    version_owner = owners.get(VERSION_TABLE)
    missing = [t for t in TABLES if t not in owners]
    others = {t: owners[t] for t in TABLES if t in owners and owners[t] != version_owner}
    if not missing and not others:
        return None
    found = [f"{t} is missing" for t in missing]
    found += [f"{t} is owned by {o!r}" for t, o in others.items()]
    return (
        f"schema {schema!r} has a version table (owned by {version_owner!r}) that does not "
        f"match its tables: {'; '.join(found)}; run `pgcheckpoint migrate{schema_option(schema)}` "
        "as the role that owns the tables, which checks them"
    )


def run_grants(args: argparse.Namespace) -> int:
    from ..commands import migrate_command
    from ..schema.migrate import current
    from ..schema.roles import runtime_grants

    schema = resolve_schema(args)
    statements = runtime_grants(args.role, schema)
    if not args.apply:
        for statement in statements:
            print(f"{statement};")
        return EXIT_OK
    import psycopg

    dsn = resolve_dsn(args)
    if current(dsn, schema=schema) is None:
        raise CliError(
            f"schema {schema!r} has no pgcheckpoint tables to grant on: "
            f"run `{migrate_command(schema)}` first"
        )
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        for statement in statements:
            conn.execute(statement)
    print(f"granted {args.role!r} run-time access to schema {schema!r}")
    return EXIT_OK


def run_history(args: argparse.Namespace) -> int:
    from ..schema.migrate import head, history

    newest = head()
    for revision, _down, title in history():
        marker = " (head)" if revision == newest else ""
        print(f"{revision}{marker}  {title.rstrip('.')}".rstrip())
    return EXIT_OK


def _describe(revision: str | None) -> str:
    from ..schema.migrate import head, history

    if revision is None:
        return "no revision (not migrated)"
    known = {rev for rev, _down, _title in history()}
    if revision == head():
        return f"{revision} (head)"
    if revision not in known:
        return f"{revision} (unknown to this version of pgcheckpoint: upgrade the package)"
    return f"{revision} (behind head {head()})"


@contextmanager
def _alembic_errors(schema: str) -> Iterator[None]:
    """Turn Alembic's and SQLAlchemy's errors into messages that say what to do."""
    from alembic.util import CommandError
    from sqlalchemy.exc import DBAPIError

    try:
        yield
    except CommandError as exc:
        raise CliError(_revision_hint(str(exc), schema)) from exc
    except DBAPIError as exc:
        # the driver's own error says it best; SQLAlchemy adds the statement text
        raise CliError(database_error(exc.orig if exc.orig is not None else exc)) from exc


_HINTS: list[tuple[str, Callable[[str], str]]] = [
    ("Can't locate revision", lambda s: "run `pgcheckpoint history` to list the revisions"),
    (
        "is not a valid upgrade target",
        lambda s: f"to go back, run `pgcheckpoint downgrade REV{schema_option(s)}`",
    ),
    (
        "is not a valid downgrade target",
        lambda s: f"to go forward, run `pgcheckpoint migrate --to REV{schema_option(s)}`",
    ),
]


def _revision_hint(message: str, schema: str) -> str:
    message = message.strip().rstrip(".")
    for needle, hint in _HINTS:
        if needle in message:
            return f"{message}; {hint(schema)}"
    return message

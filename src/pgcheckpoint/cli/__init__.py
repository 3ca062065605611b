"""The `pgcheckpoint` command line.

Every command group is a module of this package named in `COMMAND_MODULES`,
after the library module it drives (`cli/rotation.py` runs
`pgcheckpoint.maintenance.rotation`, `cli/threadview.py` runs
`pgcheckpoint.threadview`). A module exposes `register(subparsers)`, which
adds its commands with `add_command(subparsers, "name", help="...")` and
points each at a handler (`parser.set_defaults(handler=fn)`; `fn(args) -> int`
returns the exit code).
Modules import only the standard library at top level and the rest inside
their handlers, so building the parser stays cheap; a module that fails to
import is left out, and the other commands keep working.

Handlers raise `CliError` (or any `PgCheckpointError`, or a psycopg error) for
failures a user can fix: `main` prints the message without a traceback.

Exit codes: 0 done, 1 the operation failed, 2 bad usage or configuration,
130 interrupted.

Example:
    >>> from pgcheckpoint.cli import main
    >>> main(["migrate", "--dsn", "postgresql://postgres@127.0.0.1/app"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ..errors import PgCheckpointError

__all__ = [
    "COMMAND_MODULES",
    "DURATION_UNITS",
    "EMBEDDED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "MAX_COUNT",
    "MAX_DURATION_SECONDS",
    "CliError",
    "add_command",
    "add_connection_options",
    "database_error",
    "human_size",
    "main",
    "parse_duration",
    "positive_int",
    "print_table",
    "resolve_dsn",
    "resolve_schema",
    "seconds_value",
]

# Modules of this package that add commands, in `--help` order. Append yours.
COMMAND_MODULES: list[str] = [
    "migrate",
    "importer",
    "rotation",
    "threadview",
    "retention",
    "stats",
    "store",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# The --dsn (or $PGCHECKPOINT_DSN) that names the embedded server.
EMBEDDED = "embedded"
# The largest whole number an option takes: statements take counts as int4.
MAX_COUNT = 2**31 - 1
# The longest age or duration an option takes (1,000 years).
MAX_DURATION_SECONDS = 1000 * 365 * 86400


class CliError(PgCheckpointError):
    """A failure the user can fix; printed without a traceback.

    Attributes:
        exit_code: The process exit code (`EXIT_FAILED` or `EXIT_USAGE`).

    Example:
        >>> CliError("no database given", exit_code=EXIT_USAGE).exit_code
        2
    """

    def __init__(self, message: str, *, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# Seconds in each unit a duration option accepts (`30d`, `12h`, ...).
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# One part of a duration: a number (decimals too) and its unit.
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> timedelta:
    """An argparse type: a duration like `30d`, `12h`, `90m`, `45s`, `2w`, `1d12h` or `1.5d`.

    Every option that takes an age or a duration reads it with this.

    Example:
        >>> parse_duration("1d12h") == parse_duration("1.5d")
        True
    """
    compact = text.strip().lower().replace(" ", "")
    if not compact or _DURATION_PART.sub("", compact):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: write a number and a unit s, m, h, d or w, "
            "e.g. 30d, 12h or 1d12h"
        )
    seconds = sum(float(n) * DURATION_UNITS[unit] for n, unit in _DURATION_PART.findall(compact))
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is no time at all: give a positive duration")
    if seconds > MAX_DURATION_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is longer than 1000 years ({MAX_DURATION_SECONDS // 604800}w): "
            "give a shorter duration"
        )
    return timedelta(seconds=seconds)


def positive_int(text: str) -> int:
    """An argparse type: a whole number from 1 to `MAX_COUNT`.

    Example:
        >>> positive_int("3")
        3
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}")
    return value


def seconds_value(text: str) -> float:
    """An argparse type: a number of seconds, 0 or more, finite.

    Example:
        >>> seconds_value("2.5")
        2.5
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= MAX_DURATION_SECONDS:  # NaN and infinities too
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds from 0 to {MAX_DURATION_SECONDS}"
        )
    return value


def add_connection_options(parser: argparse.ArgumentParser, *, schema: bool = True) -> None:
    """Add `--dsn` (and `--schema`) to a command.

    The options are also accepted before the command name; see `resolve_dsn`.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> add_connection_options(p)
        >>> resolve_schema(p.parse_args(["--schema", "tenant_a"]))
        'tenant_a'
    """
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--dsn",
        default=argparse.SUPPRESS,
        help="libpq connection string or URI (default: $PGCHECKPOINT_DSN, else "
        "$DATABASE_URL); 'embedded' for the embedded server of .pgcheckpoint/pgdata, "
        "which make demo uses",
    )
    if schema:
        group.add_argument(
            "--schema",
            default=argparse.SUPPRESS,
            help="Postgres schema of the pgcheckpoint tables (default: public)",
        )


def add_command(
    subparsers: Any, name: str, *, help: str, description: str | None = None, **kwargs: Any
) -> argparse.ArgumentParser:
    """Add a command with the shared connection options.

    Example:
        >>> def register(subparsers):
        ...     p = add_command(subparsers, "stats", help="show table sizes")
        ...     p.set_defaults(handler=lambda args: 0)
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=description or help, **kwargs
    )
    add_connection_options(parser)
    return parser


def resolve_dsn(args: argparse.Namespace) -> str:
    """The DSN: `--dsn`, else `$PGCHECKPOINT_DSN`, else `$DATABASE_URL`.

    Any libpq string or URI, a Unix-socket directory as its host included
    (`host=/run/postgresql dbname=app`, `postgresql://u@/db?host=/run/postgresql`);
    a SQLAlchemy-style scheme (`postgresql+psycopg://`) is reduced to the one
    libpq reads (`pgcheckpoint.libpq_dsn`). `embedded` starts (or
    reuses) the embedded server in `.pgcheckpoint/pgdata` under the current
    directory, the one `make demo` uses without `PGCHECKPOINT_DSN`.

    Example:
        >>> resolve_dsn(argparse.Namespace(dsn="postgresql+psycopg://u@h/db"))
        'postgresql://u@h/db'
    """
    dsn = (
        getattr(args, "dsn", None)
        or os.environ.get("PGCHECKPOINT_DSN")
        or os.environ.get("DATABASE_URL")
    )
    if not dsn:
        raise CliError(
            "no database given: pass --dsn postgresql://user@host/db, "
            "or set PGCHECKPOINT_DSN or DATABASE_URL",
            exit_code=EXIT_USAGE,
        )
    if dsn == EMBEDDED:
        from ..contrib.embedded import embedded_dsn

        try:
            return embedded_dsn()
        except ImportError as exc:
            raise CliError(str(exc), exit_code=EXIT_USAGE) from None
    from ..errors import InvalidInputError
    from ..validate import libpq_dsn

    try:
        return libpq_dsn(dsn)
    except InvalidInputError as exc:
        raise CliError(str(exc), exit_code=EXIT_USAGE) from None


def resolve_schema(args: argparse.Namespace, option: str = "schema") -> str:
    """The schema of `--schema` (or another such option; default "public"), checked.

    Any name PostgreSQL accepts as it is works; others (over 63 bytes, empty,
    `pg_...`) are refused as bad usage.

    Example:
        >>> resolve_schema(argparse.Namespace())
        'public'
    """
    from ..errors import InvalidInputError
    from ..validate import check_schema

    schema = getattr(args, option, None)
    try:
        return check_schema("public" if schema is None else schema)
    except InvalidInputError as exc:
        flag = "--" + option.replace("_", "-")
        raise CliError(f"{flag}: {exc}", exit_code=EXIT_USAGE) from None


def schema_option(schema: str) -> str:
    """The `--schema` option to repeat in a suggested command ("" for public).

    Example:
        >>> schema_option("tenant_a")
        ' --schema tenant_a'
    """
    from ..commands import schema_option as option

    return option(schema)


def human_size(n: int) -> str:
    """A size in bytes for people, in B, KiB, MiB, GiB or TiB.

    Example:
        >>> human_size(512), human_size(14_580)
        ('512 B', '14.2 KiB')
    """
    value, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"


def print_table(rows: Sequence[Sequence[str]]) -> None:
    """Print rows as columns: the first left-aligned, the others right-aligned (numbers).

    Example:
        >>> print_table([["table", "rows"], ["pgc_blobs", "12"]])
        table      rows
        pgc_blobs    12
    """
    from ..threadview.terminal import printable

    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)]
        print("  ".join(cells).rstrip())


def build_parser() -> tuple[argparse.ArgumentParser, set[str], dict[str, BaseException]]:
    """The parser, the commands that loaded, and the modules that did not.

    Example:
        >>> parser, commands, broken = build_parser()
        >>> "show" in commands, broken
        (True, {})
    """
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="pgcheckpoint",
        description="Manage pgcheckpoint's PostgreSQL schema and data.",
    )
    parser.add_argument("--version", action="version", version=f"pgcheckpoint {__version__}")
    _add_output_options(parser, default=False)
    add_connection_options(parser)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    broken: dict[str, BaseException] = {}
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
            module.register(subparsers)
        except Exception as exc:  # one broken module must not take the others down
            broken[name] = exc
    for command in subparsers.choices.values():
        # after the command name too, as users append them to the command they ran
        _add_output_options(command, default=argparse.SUPPRESS)
    return parser, set(subparsers.choices), broken


def _add_output_options(parser: argparse.ArgumentParser, *, default: Any) -> None:
    # SUPPRESS on a command: an option not given there keeps the value given before it
    group = parser.add_argument_group("output")
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="log what is being done (e.g. each revision)",
    )
    group.add_argument(
        "--traceback",
        action="store_true",
        default=default,
        help="show a traceback for every error (debugging)",
    )


def _requested(argv: Sequence[str]) -> str | None:
    """The command name in argv, skipping top-level options and their values."""
    takes_value = {"--dsn", "--schema"}
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in takes_value:
            skip = True
        elif not token.startswith("-"):
            return token
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run `pgcheckpoint` with `argv` (default: the process arguments).

    Returns the exit code instead of exiting, so callers and tests can use it.

    Example:
        >>> main(["history"])  # doctest: +SKIP
        0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, commands, broken = build_parser()
    wanted = _requested(argv)
    if broken and wanted is not None and wanted not in commands:
        # which commands a module that failed to load adds is unknown: any
        # command no loaded module added may be one of them
        failures = "; ".join(
            f"module 'pgcheckpoint.cli.{module}' failed to load ({type(exc).__name__}: {exc})"
            for module, exc in broken.items()
        )
        print(
            f"pgcheckpoint: error: command {wanted!r} is unavailable: {failures}", file=sys.stderr
        )
        return EXIT_FAILED
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        print("pgcheckpoint: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `pgcheckpoint history | head -1`
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:
        code = _expected_exit_code(exc)
        if code is None or args.traceback:
            raise
        from ..threadview.terminal import printable

        print(f"pgcheckpoint: error: {printable(_message(exc), keep=chr(10))}", file=sys.stderr)
        return code


def _expected_exit_code(exc: BaseException) -> int | None:
    if isinstance(exc, CliError):
        return exc.exit_code
    if isinstance(exc, PgCheckpointError):
        return EXIT_FAILED
    import psycopg

    if isinstance(exc, psycopg.Error):
        return EXIT_FAILED
    return None


def _message(exc: BaseException) -> str:
    import psycopg

    text = str(exc).strip()
    if isinstance(exc, psycopg.OperationalError) and not isinstance(exc, PgCheckpointError):
        return f"cannot use the database: {text}"
    if isinstance(exc, psycopg.Error) and not isinstance(exc, PgCheckpointError):
        return database_error(exc)
    return text


def database_error(exc: BaseException) -> str:
    """One line for an error the server raised, with what to do where it is known.

    Example:
        >>> import psycopg
        >>> text = database_error(psycopg.errors.ReadOnlySqlTransaction("cannot execute DELETE"))
        >>> text.endswith("point --dsn at the primary")
        True
    """
    import psycopg

    text = f"{type(exc).__name__}: {str(exc).strip()}"
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        text += (
            "; this server takes no writes (a standby, or default_transaction_read_only"
            " is on): point --dsn at the primary"
        )
    return text


def _silence_stdout() -> None:
    # Python flushes stdout at exit; a closed pipe would raise again there.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass

"""The `pgcheckpoint` command line: connection options, messages, exit codes."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from support.dsn import url_of

import pgcheckpoint.cli
from pgcheckpoint.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from pgcheckpoint.schema.migrate import current, head, history, upgrade


@pytest.fixture(autouse=True)
def no_dsn_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGCHECKPOINT_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)


def test_migrate_current_and_downgrade(empty_db_dsn: str, capsys: Any) -> None:
    assert main(["current", "--dsn", empty_db_dsn]) == EXIT_OK
    assert capsys.readouterr().out.strip() == "no revision (not migrated)"
    assert main(["current", "--check", "--dsn", empty_db_dsn]) == EXIT_FAILED
    assert "run `pgcheckpoint migrate`" in capsys.readouterr().err

    first = history()[0][0]
    assert main(["migrate", "--to", first, "--dsn", empty_db_dsn]) == EXIT_OK
    assert capsys.readouterr().out.strip() == (
        f"schema 'public' migrated from no revision (not migrated) to {first} "
        f"(behind head {head()})"
    )
    assert main(["migrate", "--dsn", empty_db_dsn]) == EXIT_OK
    assert f"to {head()} (head)" in capsys.readouterr().out
    assert main(["migrate", "--dsn", empty_db_dsn]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"schema 'public' is already at {head()} (head)"
    assert main(["current", "--check", "--dsn", empty_db_dsn]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"{head()} (head)"

    assert main(["downgrade", first, "--dsn", empty_db_dsn]) == EXIT_OK
    assert current(empty_db_dsn) == first
    assert main(["downgrade", "base", "--dsn", empty_db_dsn]) == EXIT_OK
    assert current(empty_db_dsn) is None


def test_dsn_comes_from_the_option_then_pgcheckpoint_dsn_then_database_url(
    db_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # SQLAlchemy-style URLs, common in DATABASE_URL, work too
    monkeypatch.setenv("DATABASE_URL", url_of(db_dsn, "postgresql+psycopg"))
    assert main(["current"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"{head()} (head)"
    monkeypatch.setenv("PGCHECKPOINT_DSN", empty_db_dsn)
    assert main(["current"]) == EXIT_OK
    assert "not migrated" in capsys.readouterr().out
    # an option before the command works like one after it
    assert main(["--dsn", db_dsn, "current"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"{head()} (head)"
    assert main(["current", "--dsn", db_dsn]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"{head()} (head)"


def test_schema_option(empty_db_dsn: str, capsys: Any) -> None:
    assert main(["--schema", "tenant_a", "migrate", "--dsn", empty_db_dsn]) == EXIT_OK
    assert "schema 'tenant_a' migrated" in capsys.readouterr().out
    assert current(empty_db_dsn, schema="tenant_a") == head()
    assert current(empty_db_dsn) is None
    assert main(["current", "--check", "--dsn", empty_db_dsn]) == EXIT_FAILED
    assert main(["current", "--check", "--schema", "tenant_a", "--dsn", empty_db_dsn]) == 0
    assert main(["migrate", "--schema", "x" * 64, "--dsn", empty_db_dsn]) == EXIT_USAGE
    assert "PostgreSQL allows 63" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["migrate"], EXIT_USAGE, "no database given: pass --dsn"),
        (["migrate", "--to", "9999", "--dsn", "{dsn}"], EXIT_FAILED, "pgcheckpoint history"),
        (["downgrade", "9999", "--dsn", "{dsn}"], EXIT_FAILED, "pgcheckpoint history"),
        (["migrate", "--from", "0001", "--dsn", "{dsn}"], EXIT_USAGE, "--from only applies"),
        (["migrate", "--dsn", "{missing}"], EXIT_FAILED, "cannot use the database"),
        (["migrate", "--dsn", "not a dsn"], EXIT_USAGE, "invalid connection string"),
        (["migrate", "--bogus"], EXIT_USAGE, "unrecognized arguments: --bogus"),
        ([], EXIT_USAGE, "usage: pgcheckpoint"),
    ],
)
def test_expected_errors_give_a_message_and_no_traceback(
    db_dsn: str, argv: list[str], code: int, message: str, capsys: Any
) -> None:
    missing = make_conninfo(db_dsn, dbname="pgc_test_no_such_database")
    argv = [a.format(dsn=db_dsn, missing=missing) for a in argv]
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_verbose_and_traceback_work_after_the_command_too(db_dsn: str, capsys: Any) -> None:
    missing = make_conninfo(db_dsn, dbname="pgc_test_no_such_database")
    for argv in (
        ["--traceback", "current", "--dsn", missing],
        ["current", "--dsn", missing, "--traceback"],
    ):
        with pytest.raises(psycopg.OperationalError):
            main(argv)
    assert main(["current", "--dsn", missing]) == EXIT_FAILED
    assert "Traceback" not in capsys.readouterr().err
    for argv in (["-v", "history"], ["history", "-v"], ["history", "--verbose"]):
        parser, _commands, _broken = pgcheckpoint.cli.build_parser()
        assert parser.parse_args(argv).verbose is True, argv
    assert pgcheckpoint.cli.build_parser()[0].parse_args(["history"]).verbose is False


def test_going_the_wrong_way_says_which_command_to_use(db_dsn: str, capsys: Any) -> None:
    assert main(["migrate", "--to", history()[0][0], "--dsn", db_dsn]) == EXIT_FAILED
    assert "run `pgcheckpoint downgrade 0001`" in capsys.readouterr().err
    upgrade(db_dsn, schema="tenant_a", revision=history()[0][0])
    assert main(["downgrade", head(), "--schema", "tenant_a", "--dsn", db_dsn]) == EXIT_FAILED
    assert "pgcheckpoint migrate --to REV --schema tenant_a" in capsys.readouterr().err


def test_older_release_migrating_a_newer_schema_leaves_it_alone(db_dsn: str, capsys: Any) -> None:
    """In a rolling deploy, replicas of the previous release may still run `migrate`."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgcheckpoint_alembic_version SET version_num = '9999'")
    assert main(["migrate", "--dsn", db_dsn]) == EXIT_OK
    assert "is already at 9999 (unknown to this version" in capsys.readouterr().out
    assert current(db_dsn) == "9999"
    assert main(["current", "--check", "--dsn", db_dsn]) == EXIT_OK


def test_history_and_offline_sql_need_no_database(capsys: Any) -> None:
    assert main(["history"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [rev for rev, _d, _t in history()]
    assert lines[-1].startswith(f"{head()} (head)  ")
    assert main(["migrate", "--sql", "--schema", "tenant_a"]) == EXIT_OK
    script = capsys.readouterr().out
    assert script.startswith('CREATE SCHEMA IF NOT EXISTS "tenant_a";')
    assert 'CREATE TABLE IF NOT EXISTS "tenant_a".pgc_checkpoints' in script
    assert "CREATE INDEX CONCURRENTLY" in script
    assert main(["migrate", "--sql", "--from", history()[0][0]]) == EXIT_OK
    assert 'TABLE IF NOT EXISTS "public".pgc_checkpoints' not in capsys.readouterr().out


def test_a_broken_command_module_leaves_the_others_working(
    empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr(
        pgcheckpoint.cli, "COMMAND_MODULES", [*pgcheckpoint.cli.COMMAND_MODULES, "no_such_thing"]
    )
    assert main(["migrate", "--dsn", empty_db_dsn]) == EXIT_OK
    assert current(empty_db_dsn) == head()
    assert main(["no-such-thing"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "command 'no-such-thing' is unavailable" in err
    assert "pgcheckpoint.cli.no_such_thing" in err
    assert main(["--help"]) == EXIT_OK


def test_console_entry_point_runs_as_a_module(db_dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pgcheckpoint", "current", "--dsn", db_dsn],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{head()} (head)"


def test_runtime_error_in_the_database_is_reported_not_raised(db_dsn: str, capsys: Any) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA locked_out")
        conn.execute("CREATE TABLE locked_out.pgc_checkpoints (x int)")
    # the revision's CREATE TABLE IF NOT EXISTS passes, the next statement cannot
    assert main(["migrate", "--schema", "locked_out", "--dsn", db_dsn]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert err.startswith("pgcheckpoint: error: UndefinedColumn")
    assert "Traceback" not in err

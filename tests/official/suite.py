"""The official saver's and store's own tests, fetched, pointed at pgcheckpoint, and run.

The tests are the official project's code, so none of it lives in this
repository: `fetch_sdist` downloads the `langgraph-checkpoint-postgres` sdist
with pip into a cache outside the checkout, `prepare` unpacks its tests into a
temporary folder and rewrites two things there, the imports of the two savers
and the two stores (pgcheckpoint's `PostgresSaver`, `AsyncPostgresSaver`,
`PostgresStore` and `AsyncPostgresStore` instead of the official ones; every
other import, the official internals included, stays) and the conftest's
server URIs, and `run` runs pytest on them in a subprocess and reads back
each case's outcome. `test_prune.py` runs with the plugin of `own_tables.py`,
which has its `_rows` read pgcheckpoint's tables, and the store modules with
that of `own_store_table.py`, which has their row helpers use pgcheckpoint's
table.
"""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from psycopg.conninfo import conninfo_to_dict

import pgcheckpoint

VERSION = "3.2.0"
SDIST = f"langgraph_checkpoint_postgres-{VERSION}.tar.gz"
# the sdist on PyPI; a download that differs is refused
SDIST_SHA256 = "dffef0e6822d7c614019f7f2c4bdbef42859746aee2d3e6d9d9747cf3744ca90"
# the test modules issue 32 names, and how many cases each has without the shallow savers
FILES = {
    "test_sync.py": 16,
    "test_async.py": 18,
    "test_prune.py": 71,
    "test_delta_pagination.py": 13,
    "test_conformance_delta.py": 1,
    "test_delta_plain_value_seed.py": 5,
}
# the store's test modules issue 33 names, and their cases; they need a server with
# pgvector 0.7+ (their vector cases use halfvec)
STORE_FILES = {
    "test_store.py": 193,
    "test_async_store.py": 106,
}
# what the modules import besides themselves
_HELPERS = ("__init__.py", "conftest.py", "embed_test_utils.py")
# the savers and stores swapped, by the official module that defines them
_SWAPPED = {
    "langgraph.checkpoint.postgres": ("PostgresSaver",),
    "langgraph.checkpoint.postgres.aio": ("AsyncPostgresSaver",),
    "langgraph.store.postgres": ("PostgresStore", "AsyncPostgresStore"),
}
# pgcheckpoint has no shallow savers: their cases are left out of the run
DESELECT = "not shallow"
# a test function whose cases spend their time asleep (17 s each, waiting for TTLs to
# pass): they run in a second subprocess beside the module's others, which go on meanwhile
SLEEPERS = "test_store_ttl"
# a case that hangs fails instead of holding the run for ever
CASE_TIMEOUT_SECONDS = 300


class Unavailable(Exception):
    """The sdist could not be had (no network, no index): the caller skips."""


def cache_dir() -> Path:
    """Where the sdist is kept between runs: `$XDG_CACHE_HOME/pgcheckpoint`, else ~/.cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pgcheckpoint" / "official-tests"


def fetch_sdist() -> Path:
    """The sdist, from the cache or downloaded into it with pip."""
    folder = cache_dir()
    path = folder / SDIST
    if path.exists() and _sha256(path) == SDIST_SHA256:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    # a short timeout and one retry: offline, pip would otherwise try for a minute
    command = [
        sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
        "--no-binary", ":all:", "--no-deps", "--retries", "1", "--timeout", "15",
        "--dest", str(folder), f"langgraph-checkpoint-postgres=={VERSION}",
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise Unavailable("pip download of the official sdist took over 300 s") from None
    if done.returncode != 0 or not path.exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Unavailable(f"pip could not download {SDIST} (no network?): {last}")
    digest = _sha256(path)
    if digest != SDIST_SHA256:
        path.unlink()
        raise AssertionError(f"{SDIST} has sha256 {digest}, not the published {SDIST_SHA256}")
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def prepare(sdist: Path, into: Path, *, swap: bool = True) -> Path:
    """Unpack the sdist's tests under `into` with the savers swapped; returns the run's root.

    The root holds `tests/` (the saver's six modules, the store's two and
    what they import) and a pytest.ini with the official project's asyncio
    mode. `swap=False` leaves the official savers and stores in: the control
    run, which shows what this environment lets the official code itself pass.
    """
    prefix = f"langgraph_checkpoint_postgres-{VERSION}/tests/"
    modules = (*FILES, *STORE_FILES)
    wanted = {prefix + name for name in (*modules, *_HELPERS)}
    tests = into / "tests"
    tests.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if member.name in wanted and member.isfile():
                source = archive.extractfile(member)
                assert source is not None
                (tests / Path(member.name).name).write_bytes(source.read())
    missing = sorted(name for name in (*modules, *_HELPERS) if not (tests / name).exists())
    if missing:
        raise AssertionError(f"{SDIST} has no tests/{', tests/'.join(missing)}")
    for name in modules if swap else ():
        module = tests / name
        module.write_text(swap_savers(module.read_text(), name))
    (into / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
        f"timeout = {CASE_TIMEOUT_SECONDS}\n"
    )
    return into


def swap_savers(source: str, name: str = "<module>") -> str:
    """`source` importing pgcheckpoint's savers and stores where it imported the official ones.

    Each `from langgraph.checkpoint.postgres[.aio] import ...` or `from
    langgraph.store.postgres import ...` that names a saver or a store keeps
    its other names (the shallow savers, for the cases left out) and is
    followed by `from pgcheckpoint import <them>`. Nothing else changes.
    """
    lines = source.splitlines(keepends=True)
    swaps = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ImportFrom) or node.module not in _SWAPPED:
            continue
        names = [alias.name for alias in node.names]
        ours = [n for n in names if n in _SWAPPED[node.module]]
        if not ours:
            continue
        if any(alias.asname for alias in node.names):
            raise AssertionError(f"{name}: an import of {node.module} renames a name")
        others = [n for n in names if n not in ours]
        text = f"from {node.module} import {', '.join(others)}\n" if others else ""
        text += f"from pgcheckpoint import {', '.join(ours)}\n"
        swaps.append((node.lineno - 1, node.end_lineno or node.lineno, text))
    if not swaps:
        raise AssertionError(f"{name} imports no official saver or store: the sdist changed")
    for start, end, text in reversed(swaps):
        lines[start:end] = [text]
    return "".join(lines)


def point_conftest(root: Path, server_dsn: str, database: str) -> None:
    """Point the official conftest's two URIs at `server_dsn`, its default database `database`.

    The tests append a database name to `DEFAULT_POSTGRES_URI`, so it ends
    with "/" and names the host in the URI's authority (a Unix-socket
    directory percent-encoded, as libpq reads it); `DEFAULT_URI` is the
    database the tests share.
    """
    server, shared = server_uris(server_dsn, database)
    conftest = root / "tests" / "conftest.py"
    lines = conftest.read_text().splitlines(keepends=True)
    seen = set()
    for i, line in enumerate(lines):
        for name, uri in (("DEFAULT_POSTGRES_URI", server), ("DEFAULT_URI", shared)):
            if line.startswith(f"{name} = "):
                lines[i] = f"{name} = {uri!r}\n"
                seen.add(name)
    if seen != {"DEFAULT_POSTGRES_URI", "DEFAULT_URI"}:
        raise AssertionError(
            "the official conftest no longer sets DEFAULT_POSTGRES_URI and DEFAULT_URI"
        )
    conftest.write_text("".join(lines))


def server_uris(server_dsn: str, database: str) -> tuple[str, str]:
    """(a URI of the server ending in "/", a URI of `database` on it) for `server_dsn`."""
    params = {k: str(v) for k, v in conninfo_to_dict(server_dsn).items()}
    params.pop("dbname", None)
    user = params.pop("user", "")
    password = params.pop("password", "")
    host = params.pop("host", "")
    port = params.pop("port", "")
    if params:
        # the tests append a database name to the URI, so it cannot carry a query
        raise Unavailable(
            f"the test server's DSN sets {', '.join(sorted(params))}, which the official "
            "tests' URIs cannot carry; use a DSN of host, port, user and password"
        )
    netloc = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    netloc += "@" if netloc else ""
    if ":" in host and not host.startswith("/"):
        netloc += f"[{host}]"  # an IPv6 address
    else:
        netloc += quote(host, safe="")  # a Unix-socket directory percent-encoded
    netloc += f":{port}" if port else ""
    server = f"postgresql://{netloc}/"
    return server, server + quote(database, safe="")


@dataclass(frozen=True)
class Outcome:
    """What one case did: "passed", "failed" (or an error in a fixture), or "skipped"."""

    result: str
    message: str = ""


def run(
    root: Path, module: str, *, plugin: str | None = None, env: dict[str, str] | None = None
) -> dict[str, Outcome]:
    """Run one official test module under `root`; each case's id (`test_x.py::name`) and outcome.

    `plugin` names a plugin next to this file to run it with: `own_tables`
    (`test_prune.py`'s `_rows` reads pgcheckpoint's tables) or
    `own_store_table` (the store modules' row helpers use pgcheckpoint's
    table). `env` adds to the subprocess's environment. The module's
    `SLEEPERS` run at the same time, in a second one.
    """
    selections = [""]
    if f"def {SLEEPERS}(" in (root / "tests" / module).read_text():
        selections = [f"not {SLEEPERS}", SLEEPERS]
    running = []
    for n, selected in enumerate(selections):
        report, log = root / f"{module}.{n}.xml", root / f"{module}.{n}.log"
        command = [
            *_pytest(root, selected), *(["-p", plugin] if plugin else []),
            "-q", f"--junitxml={report}", "-o", "junit_family=xunit2", f"tests/{module}",
        ]  # fmt: skip
        with log.open("w") as output:  # a file: a pipe left unread could fill and block
            process = subprocess.Popen(
                command, cwd=root, env=_environ(env), stdout=output, stderr=subprocess.STDOUT
            )
        running.append((report, log, process))
    found: dict[str, Outcome] = {}
    for report, log, process in running:
        process.wait()
        if not report.exists():
            raise AssertionError(
                f"pytest on the official tests/{module} wrote no report "
                f"(exit {process.returncode}):\n{log.read_text()[-6000:]}"
            )
        found.update(outcomes(report.read_text(), module))
    return found


def _pytest(root: Path, selected: str = "") -> list[str]:
    """The start of a command that runs pytest on the official tests under `root`.

    `selected`: a `-k` expression that picks some of the cases not deselected.
    """
    chosen = f"{DESELECT} and ({selected})" if selected else DESELECT
    return [
        sys.executable, "-m", "pytest", "-c", str(root / "pytest.ini"), "--rootdir", str(root),
        "-p", "no:cacheprovider", "-k", chosen,
    ]  # fmt: skip


def _environ(env: dict[str, str] | None = None) -> dict[str, str]:
    """The subprocess's environment: this one, with `env` and without this run's pytest's."""
    environ = {**os.environ, **(env or {})}
    # the subprocess imports the pgcheckpoint this run imports (a worktree's src/),
    # and the plugin next to this file
    package_parent = str(Path(pgcheckpoint.__file__).resolve().parents[1])
    plugin_dir = str(Path(__file__).resolve().parent)
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_parent, plugin_dir, environ.get("PYTHONPATH", "")) if p
    )
    for name in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_PLUGINS"):
        environ.pop(name, None)
    return environ


def outcomes(junit_xml: str, module: str) -> dict[str, Outcome]:
    """Each case of a JUnit report, by id (`test_x.py::name[param]`)."""
    found: dict[str, Outcome] = {}
    for case in ET.fromstring(junit_xml).iter("testcase"):
        case_id = f"{module}::{case.get('name')}"
        result, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                result, message = "failed", child.get("message") or ""
                break
            if child.tag == "skipped":
                result, message = "skipped", child.get("message") or ""
        earlier = found.get(case_id)
        if earlier is not None:
            # a second entry of a case: its teardown failed, after the call passed or failed
            result = "failed"
            message = "\n".join(m for m in (earlier.message, message) if m)
        found[case_id] = Outcome(result, message)
    return found

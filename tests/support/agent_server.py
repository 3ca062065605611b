"""LangGraph's Agent Server (`langgraph dev`) in a process of its own, as a user starts it.

`AgentServer` runs `langgraph dev --no-browser --no-reload` in a folder that
holds a `langgraph.json` (`server_folder` writes one beside the example's
graph), on a free loopback port, offline (no analytics, no version check, no
tracing), with the database and keys a test gives and none of the caller's.
The server's packages are the `server` extra; `missing_server_packages` says
why a suite must skip without them. `make bench` starts its servers with it too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from support.cli import cli_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agent-server"
SERVER_PACKAGES = ("langgraph_api", "langgraph_cli", "langgraph_runtime_inmem", "langgraph_sdk")
# What keeps `langgraph dev` from reaching out: the CLI's analytics, the server's
# check for a newer version, LangSmith tracing.
OFFLINE = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
}
# Variables a factory reads that only a test may set.
_OWN = (
    "PGCHECKPOINT_DSN",
    "POSTGRES_URI",
    "DATABASE_URI",
    "DATABASE_URL",
    "PGCHECKPOINT_AES_KEYS",
    "LANGGRAPH_AES_KEY",
    "LANGGRAPH_THREAD_TTL",
    "PGCHECKPOINT_TTL_SWEEP_SECONDS",
    "PGCHECKPOINT_AUTO_MIGRATE",
    "LANGSMITH_API_KEY",
    "LANGCHAIN_API_KEY",
)
_API_LINE = re.compile(r"API: \S*?(http://127\.0\.0\.1:\d+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The in-memory runtime writes its own records (threads, runs) to
# .langgraph_api/ every 10 s (langgraph_runtime_inmem._persistence).
OPS_FILE = Path(".langgraph_api") / ".langgraph_ops.pckl"


def missing_server_packages() -> str | None:
    """Why the Agent Server cannot run here, or None when it can."""
    if sys.version_info < (3, 11):
        return "the Agent Server (langgraph-api) needs Python 3.11+"
    missing = [name for name in SERVER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"the Agent Server's packages are not installed ({', '.join(missing)}): "
            "pip install '.[server]' (make install does)"
        )
    return None


def langgraph_command() -> str:
    """The `langgraph` command of this environment."""
    beside = Path(sys.executable).parent / "langgraph"
    return str(beside) if beside.exists() else (shutil.which("langgraph") or "langgraph")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_folder(
    folder: Path,
    *,
    checkpointer: Mapping[str, Any] | None = None,
    graphs: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
) -> Path:
    """A folder with the example's graph and a `langgraph.json`: the example's, or `config`.

    `checkpointer` replaces the example's block; `graphs` adds graphs (files
    the caller writes into the folder).
    """
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "graph.py", folder / "graph.py")
    if config is None:
        config = json.loads((EXAMPLE / "langgraph.json").read_text())
        if checkpointer is not None:
            config = {**config, "checkpointer": dict(checkpointer)}
        if graphs:
            config = {**config, "graphs": {**config["graphs"], **graphs}}
    (folder / "langgraph.json").write_text(json.dumps(config, indent=2))
    return folder


def server_env(dsn: str | None, **extra: str) -> dict[str, str]:
    """The server's environment: the live source, offline, the database `dsn`, and `extra`."""
    env = {k: v for k, v in cli_env().items() if k not in _OWN}
    env.update(OFFLINE)
    if dsn is not None:
        env["PGCHECKPOINT_DSN"] = dsn
    env.update(extra)
    return env


class AgentServer:
    """One `langgraph dev` process in `folder`; `start` again after `stop` to restart it.

    Attributes:
        url: Where it serves, as its own log says (it picks another port when
            the one asked for is taken).
        log: The file its output goes to.
    """

    def __init__(
        self, folder: Path, env: Mapping[str, str], command: Sequence[str] | None = None
    ) -> None:
        self.folder = folder
        self.env = dict(env)
        # `langgraph dev` with its options; a free port is added when none is given
        self.command = list(command or [langgraph_command(), "dev", "--no-browser", "--no-reload"])
        # beside the folder: a server that reloads on changes watches the folder
        self.log = folder.parent / f"{folder.name}.log"
        self.url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 90) -> None:
        """Start the server and wait until it answers; fail with its log if it exits."""
        self.starts += 1
        command = self.command
        if "--port" not in command:
            command = [*command, "--port", str(free_port())]
        with open(self.log, "ab") as out:
            out.write(f"\n--- start {self.starts}: {' '.join(command[1:])}\n".encode())
            out.flush()
            offset = out.tell()  # what this start prints comes after
            self.process = subprocess.Popen(
                command,
                cwd=self.folder,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"langgraph dev exited {self.process.returncode}:\n{self.output()[-4000:]}"
                )
            found = _API_LINE.search(_ANSI.sub("", self.output(offset)))
            if found and _answers(found.group(1)):
                self.url = found.group(1)
                return
            if time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise RuntimeError(f"langgraph dev did not answer:\n{self.output()[-4000:]}")
            time.sleep(0.1)

    def stop(self, how: signal.Signals = signal.SIGTERM, timeout: float = 60) -> int | None:
        """Send `how` and wait for the process to end; its exit code."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        process.send_signal(how)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait(timeout)

    def output(self, offset: int = 0) -> str:
        """What the server printed (from byte `offset` of its log)."""
        return self.log.read_bytes()[offset:].decode(errors="replace")

    def wait_for_flush(self, since: float, timeout: float = 30) -> None:
        """Wait until the in-memory runtime wrote its records to disk after `since` (epoch s).

        Its threads and runs live in memory and reach `.langgraph_api/` every
        10 s; a server killed before that forgets what came since.
        """
        path = self.folder / OPS_FILE
        deadline = time.monotonic() + timeout
        while not (path.exists() and path.stat().st_mtime > since):
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} was not written after {since}")
            time.sleep(0.2)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ok", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def running(folder: Path, env: Mapping[str, str]) -> Iterator[AgentServer]:
    """A started `AgentServer`, stopped (SIGTERM) when the block ends."""
    server = AgentServer(folder, env)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def interrupt_values(state: Mapping[str, Any]) -> list[Any]:
    """The interrupt values of a thread's state, root tasks first."""
    return [i["value"] for task in state.get("tasks") or () for i in task.get("interrupts") or ()]

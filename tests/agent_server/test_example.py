"""examples/agent-server runs as its README says, on a database never migrated.

The README's commands, as a user pastes them into two terminals of the
example's folder: `pgcheckpoint migrate`, `langgraph dev --no-browser` (left
running, reloading on changes as it does by default), then the client, whose
output must be what the README shows; the `pgcheckpoint show` command it
prints last then draws the thread.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.agent_server import EXAMPLE, AgentServer, langgraph_command, server_env
from support.docblocks import output_matches, parse


@pytest.fixture(scope="module")
def empty_module_dsn(_databases: Any) -> Iterator[str]:
    """A database without pgcheckpoint's tables, for the module."""
    name = _databases.new_name()
    _databases.create(name, "template0")
    try:
        yield _databases.dsn(name)
    finally:
        _databases.drop(name)


def run(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-c", command],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stderr}"
    return done


def test_the_readme_runs_as_pasted(empty_module_dsn: str, tmp_path: Path) -> None:
    blocks = parse(EXAMPLE / "README.md")
    terminal, second_terminal = (b.text.splitlines() for b in blocks if b.lang == "bash")
    (shown,) = (b.text.splitlines() for b in blocks if b.lang == "text")
    migrate, dev = terminal
    assert shlex.split(dev)[:2] == ["langgraph", "dev"]

    folder = shutil.copytree(EXAMPLE, tmp_path / "agent-server")
    env = server_env(empty_module_dsn)
    # the commands of this environment, as a user's activated virtualenv has them
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    assert "migrated" in run(migrate, env, folder).stdout

    server = AgentServer(folder, env, command=[langgraph_command(), *shlex.split(dev)[1:]])
    server.start()
    try:
        (client,) = second_terminal
        printed = run(client, {**env, "LANGGRAPH_URL": server.url}, folder).stdout.splitlines()
        assert output_matches(shown, printed), printed
        drawn = run(printed[-1], env, folder).stdout
        assert "status: finished" in drawn and "interrupt: review asked" in drawn
    finally:
        server.stop()

"""Running the `pgcheckpoint` console command in a process of its own, as users run it.

`python -m pgcheckpoint` runs the source tree under test (not an installed
copy), with no `PGCHECKPOINT_DSN` or `DATABASE_URL` but what a test passes.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for `pgcheckpoint`: no DSN of the caller's, the live source, `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PGCHECKPOINT_DSN", "DATABASE_URL")}
    src = Path(__file__).resolve().parents[2] / "src"
    if src.is_dir():  # a checkout: run the live source, as the tests do
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m pgcheckpoint ARGS` with its output captured, as cron or a script runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pgcheckpoint", *args],
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_cli_on_terminal(*args: str, **env: str) -> tuple[int, str]:
    """Run the command with stdout and stderr on a pseudo-terminal; its exit code and output."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "pgcheckpoint", *args],
            env=cli_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=terminal,
            stderr=terminal,
        )
    finally:
        os.close(terminal)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(controller)
    return process.wait(timeout=120), b"".join(chunks).decode()

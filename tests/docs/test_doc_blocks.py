"""Every code block of README.md and docs/ runs against a real database.

How each block is run is in `support.docblocks`: its language, or a
`<!-- check: ... -->` comment before it. A block with no way to run fails
`test_every_block_says_how_it_is_run`, so a new one cannot slip in unchecked.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import secrets
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support.cli import cli_env
from support.docblocks import (
    KINDS,
    ROOT,
    Block,
    all_blocks,
    chain,
    console_steps,
    output_matches,
)
from support.dsn import url_of

from pgcheckpoint import PostgresSaver

CONTEXTS = Path(__file__).resolve().parent / "contexts"
BLOCKS = all_blocks()
RUN = ("python", "shell", "sql", "crontab")
# `env=keys`: the keys of tests/docs/contexts/keys.py, k2 active
KEY_ENV = {
    "keys": {
        "PGCHECKPOINT_AES_KEYS": ",".join(
            f"{name}:{base64.b64encode(key).decode()}"
            for name, key in (("k2", bytes(range(100, 132))), ("k1", bytes(range(32))))
        )
    }
}
_URL = re.compile(r"postgres(?:ql)?(?:\+\w+)?://[^\s'\"]*")


def test_every_block_says_how_it_is_run() -> None:
    assert len(BLOCKS) > 30
    for block in BLOCKS:
        assert block.kind in KINDS, f"{block.name}: no way to run a {block.lang!r} block"
        context = block.options.get("context")
        if context:
            assert (CONTEXTS / f"{context}.py").is_file(), f"{block.name}: no context {context}"
        chain(block, BLOCKS)  # every `after` names a block of the same page
        env = block.options.get("env")
        assert env is None or env in KEY_ENV, f"{block.name}: unknown env {env!r}"


def test_the_commands_of_ci_blocks_are_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = [b for b in BLOCKS if b.kind == "ci"]
    assert blocks
    for block in blocks:
        for line in block.text.splitlines():
            command = line.split("#")[0].strip()
            if command:
                assert re.search(rf"(^|\s){re.escape(command)}(\s|$)", ci, re.M), (
                    f"{block.name}: .ci/run does not run {command!r}"
                )


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind in RUN], ids=lambda b: b.name)
def test_the_block_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    blocks = chain(block, BLOCKS)
    wanted = {b.options.get("db") for b in blocks}
    fixture = "empty_db_dsn" if "empty" in wanted else "db_dsn"
    dsn: str = request.getfixturevalue("vector_db_dsn" if "vector" in wanted else fixture)
    with _roles(blocks, dsn) as roles, _pooler(blocks, dsn) as extra:
        if block.kind == "python":  # appended to the same file, as a reader pastes them
            _run_python(block, "".join(b.text for b in blocks), dsn, tmp_path, extra)
            return
        for step in blocks:
            _run(step, dsn, roles, tmp_path, extra)


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "install"], ids=lambda b: b.name)
def test_the_install_lines_install_what_the_quick_start_needs(
    block: Block, db_dsn: str, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    quick_start = next(b for b in BLOCKS if b.id == "quick-start" and b.path.name == "README.md")
    script = tmp_path / "quick_start.py"
    script.write_text(quick_start.text)
    ran = subprocess.run(
        [str(venv / "bin" / "python"), str(script)],
        cwd=tmp_path,
        env={**env, "PGCHECKPOINT_DSN": db_dsn},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import pgcheckpoint; print(pgcheckpoint.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(venv) in site.stdout  # the installed copy, not the checkout's source


# -- running one block -------------------------------------------------------------------


@contextlib.contextmanager
def _roles(blocks: list[Block], dsn: str) -> Iterator[dict[str, str]]:
    """The roles the blocks name (`roles=`), renamed to the test's own, dropped after."""
    names = [r for b in blocks for r in b.options.get("roles", "").split(",") if r]
    token = secrets.token_hex(3)
    renamed = {name: f"{name}_{token}" for name in names}
    try:
        yield renamed
    finally:
        if renamed:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for role in renamed.values():
                    exists = conn.execute(
                        "SELECT 1 FROM pg_roles WHERE rolname = %s", [role]
                    ).fetchone()
                    if exists:
                        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@contextlib.contextmanager
def _pooler(blocks: list[Block], dsn: str) -> Iterator[dict[str, str]]:
    """`pgbouncer`: the database through pgbouncer in transaction mode, as `BOUNCER_DSN`."""
    if not any("pgbouncer" in b.options for b in blocks):
        yield {}
        return
    from conftest import transaction_pooler

    with transaction_pooler(dsn, pool_size=2) as bouncer:
        yield {"BOUNCER_DSN": bouncer}


def _text(block: Block, dsn: str, roles: dict[str, str]) -> str:
    """The block's text with its URLs on the test's database and its roles renamed."""
    password = conninfo_to_dict(dsn).get("password")

    def database(match: re.Match[str]) -> str:
        url = match.group(0)
        user = re.match(r"[^:]+://([^@/:]+)@", url)
        # a role the blocks create logs in as itself, unless the server wants passwords
        if user and user.group(1) in roles and not password:
            url = url_of(make_conninfo(dsn, user=roles[user.group(1)]))
        else:
            url = url_of(dsn)
        # a socket host's URL has `?host=...&port=...`, which a shell would split
        return shlex.quote(url)

    text = _URL.sub(database, block.text)
    for name, new in roles.items():
        text = re.sub(rf"\b{re.escape(name)}\b", new, text)
    return text


def _env(block: Block, dsn: str, bin_dir: Path, extra: dict[str, str]) -> dict[str, str]:
    env = cli_env(PGCHECKPOINT_DSN=dsn, **extra)
    for name in ("PGCHECKPOINT_AES_KEYS", "LANGGRAPH_AES_KEY"):  # only the block's own
        env.pop(name, None)
    env.update(KEY_ENV.get(block.options.get("env", ""), {}))
    env["PYTHONPATH"] = os.pathsep.join([str(CONTEXTS), str(ROOT / "examples"), env["PYTHONPATH"]])
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def _commands(tmp_path: Path) -> Path:
    """`pgcheckpoint`, `python` and `alembic` as users have them, from the source under test."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.is_dir():
        bin_dir.mkdir()
        for name, run in [
            ("pgcheckpoint", "-m pgcheckpoint"),
            ("alembic", "-m alembic"),
            ("python", ""),
        ]:
            script = bin_dir / name
            script.write_text(f'#!/bin/sh\nexec "{sys.executable}" {run} "$@"\n')
            script.chmod(0o755)
    return bin_dir


def _run(
    block: Block, dsn: str, roles: dict[str, str], tmp_path: Path, extra: dict[str, str]
) -> None:
    env = _env(block, dsn, _commands(tmp_path), extra)
    context = block.options.get("context")
    if context:
        _check(
            subprocess.run(
                [sys.executable, str(CONTEXTS / f"{context}.py")], **_quietly(env, tmp_path)
            ),
            f"context {context}",
        )
    text = _text(block, dsn, roles)
    if block.kind == "sql":
        _run_sql(block, text, dsn)
    elif block.kind == "crontab":
        for line in text.splitlines():
            if line.strip() and not line.startswith("#"):
                command = line.split(None, 5)[5]
                _check(subprocess.run(["bash", "-c", command], **_quietly(env, tmp_path)), line)
    elif block.lang == "console":
        for command, shown in console_steps(text):
            # `stderr`: the block shows what a terminal shows of both streams
            if "stderr" in block.options:
                command += " 2>&1"
            done = subprocess.run(["bash", "-c", command], **_quietly(env, tmp_path))
            _check(done, command)
            assert output_matches(shown, done.stdout.splitlines()), (
                f"{block.name}: `{command}` printed\n{done.stdout}\nnot what the block shows:\n"
                + "\n".join(shown)
            )
    else:
        script = "set -euo pipefail\n" + text
        _check(subprocess.run(["bash", "-c", script], **_quietly(env, tmp_path)), block.name)


def _quietly(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    return {
        "env": env,
        "cwd": cwd,
        "capture_output": True,
        "text": True,
        "timeout": 600,
        "check": False,
    }


def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
    assert done.returncode == 0, f"{what} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


def _run_python(block: Block, source: str, dsn: str, tmp_path: Path, extra: dict[str, str]) -> None:
    env = _env(block, dsn, _commands(tmp_path), extra)
    context = block.options.get("context")
    if context:
        source = (CONTEXTS / f"{context}.py").read_text() + "\n# -- the block --\n" + source
    script = tmp_path / "block.py"
    script.write_text(source)
    try:
        compile(source, str(script), "exec")
        command = [sys.executable, str(script)]
    except SyntaxError:  # a top-level await: run it in an event loop
        command = [sys.executable, str(CONTEXTS.parent / "run_async.py"), str(script)]
    if "loop" in block.options:  # code from an async function, without an await
        command = [sys.executable, str(CONTEXTS.parent / "run_async.py"), str(script)]
    _check(subprocess.run(command, **_quietly(env, tmp_path)), block.name)


def _run_sql(block: Block, text: str, dsn: str) -> None:
    from pgcheckpoint.resources import sql_dir

    text = re.sub(r"^\\i (\S+)$", lambda m: (sql_dir() / m.group(1)).read_text(), text, flags=re.M)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if "cron" in block.options:
            _stand_in_for_pg_cron(conn)
        holding = block.options.get("holding")
        if holding:
            with PostgresSaver.from_conn_string(dsn) as saver, saver.lock_thread(holding) as lock:
                rows = conn.execute(text).fetchall()
            assert [row[0] for row in rows] == [lock.backend_pid], f"{block.name}: {rows}"
        else:
            conn.execute(text)
        if "cron" in block.options:
            jobs = conn.execute("SELECT command FROM cron.job ORDER BY jobid").fetchall()
            assert jobs, f"{block.name}: nothing was scheduled"
            for (command,) in jobs:
                conn.execute(command)


def _stand_in_for_pg_cron(conn: psycopg.Connection[Any]) -> None:
    """pg_cron's `cron.schedule`, recording the job (the test then runs it)."""
    conn.execute(
        """
        CREATE SCHEMA cron;
        CREATE TABLE cron.job (
            jobid bigserial PRIMARY KEY, jobname text, schedule text, command text
        );
        CREATE FUNCTION cron.schedule(job_name text, schedule text, command text)
        RETURNS bigint LANGUAGE sql AS $$
            INSERT INTO cron.job (jobname, schedule, command) VALUES ($1, $2, $3)
            RETURNING jobid
        $$;
        """
    )

"""`pgcheckpoint threads` and `pgcheckpoint show` on threads written by real LangGraph graphs.

One thread, "story", holds everything the commands must tell apart:

1. `plan`, then the `research` subgraph (its own namespace), then `review`
   calls `interrupt()`: the run stops, waiting for an answer;
2. resumed, `review` finishes and `act` fans out to `a` and `b` in parallel;
   `b` raises once `a`'s writes are saved, so the step stops part way: writes
   with no checkpoint after them (a crash mid-step);
3. `update_state` on the checkpoint after `plan` forks the thread, and the
   fork runs on through `research` to the interrupt in `review` again.

So the root namespace has a fork, an answered interrupt, a pending one, two
subgraph runs and a crashed step; `show --json` must report each, and the
tree drawn on a terminal must branch where the thread forked.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import struct
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from psycopg.rows import dict_row
from support_threads import State, support_graph

from pgcheckpoint import PostgresSaver
from pgcheckpoint.cli import main
from pgcheckpoint.core.writes import put_op

SCREEN_COLUMNS = 80
SCREEN_ROWS = 60


def _write_story(dsn: str, thread_id: str = "story", *, fork: bool = True) -> dict[str, str]:
    """Run the story; return the ids of the checkpoints the assertions name."""
    with PostgresSaver.from_conn_string(dsn) as saver:
        graph = support_graph(dsn).compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": thread_id}}
        graph.invoke({"topic": "llamas"}, config)
        with pytest.raises(RuntimeError, match="tool timed out"):
            graph.invoke(Command(resume="yes"), config)
        history = list(graph.get_state_history(config))
        ids = {
            "after_plan": next(s for s in history if s.next == ("research",)),
            "crashed": history[0],
        }
        out = {k: v.config["configurable"]["checkpoint_id"] for k, v in ids.items()}
        if fork:
            fork_config = graph.update_state(ids["after_plan"].config, {"topic": "alpacas"})
            out["fork"] = fork_config["configurable"]["checkpoint_id"]
            graph.invoke(None, fork_config)
            out["latest"] = graph.get_state(config).config["configurable"]["checkpoint_id"]
        return out


def _finished_thread(dsn: str, thread_id: str, metadata: dict[str, Any] | None = None) -> None:
    g = StateGraph(State)
    g.add_node("plan", lambda s: {"log": ["planned"]})
    g.add_edge(START, "plan")
    g.add_edge("plan", END)
    with PostgresSaver.from_conn_string(dsn) as saver:
        graph = g.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": thread_id}, "metadata": metadata or {}}
        graph.invoke({"topic": "x"}, config)


def _run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _show_json(capsys: pytest.CaptureFixture[str], dsn: str, *argv: str) -> dict[str, Any]:
    code, out, err = _run_cli(capsys, "show", *argv, "--dsn", dsn, "--json")
    assert code == 0, err
    page: dict[str, Any] = json.loads(out)
    return page


def _by_id(page: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["checkpoint_id"]: c for c in page["checkpoints"]}


def _task(node: dict[str, Any], name: str | None) -> dict[str, Any]:
    return next(t for t in node["tasks"] if t["name"] == name)


# -- show --json ---------------------------------------------------------------------


def test_show_json_reports_the_fork_the_interrupts_the_subgraphs_and_the_crash(
    db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _write_story(db_dsn)
    page = _show_json(capsys, db_dsn, "story")
    nodes = _by_id(page)
    assert (page["total"], page["shown"], page["older"], page["newer"]) == (8, 8, 0, 0)
    assert page["latest_checkpoint_id"] == ids["latest"]

    # the thread waits at the interrupt on the fork
    assert page["status"] == "interrupted"
    assert "approve the plan?" in page["detail"]
    latest = nodes[ids["latest"]]
    assert latest["head"] and latest["status"] == "interrupted"
    assert latest["parent_checkpoint_id"] == ids["fork"]
    assert latest["next"] == ["review"]
    review = _task(latest, "review")
    assert review["state"] == "interrupted"
    assert [i["value"] for i in review["interrupts"]] == [
        {"question": "approve the plan?", "topic": "alpacas"}
    ]
    assert review["interrupts"][0]["id"]
    assert not latest["pending_writes"]

    # the fork: update_state on the checkpoint after plan, a second child of it
    after_plan = nodes[ids["after_plan"]]
    assert after_plan["step"] == 1 and after_plan["ran"] == ["plan"]
    assert len(after_plan["children"]) == 2 and ids["fork"] in after_plan["children"]
    fork = nodes[ids["fork"]]
    assert fork["fork"] and fork["source"] == "update" and not fork["head"]
    assert fork["parent_checkpoint_id"] == ids["after_plan"]
    assert {c["channel"] for c in fork["changed"] if not c["channel"].startswith("branch:")} == {
        "topic"
    }
    original = next(c for c in after_plan["children"] if c != ids["fork"])
    assert not nodes[original]["fork"]

    # each run of the subgraph hangs off the checkpoint it ran from
    for parent in (after_plan, fork):
        [sub] = parent["subgraphs"]
        assert sub["checkpoint_ns"].startswith("research:")
        assert sub["checkpoints"] == 4 and sub["status"] == "finished"
    assert after_plan["subgraphs"][0]["checkpoint_ns"] != fork["subgraphs"][0]["checkpoint_ns"]

    # the answered interrupt on the original line
    answered = nodes[original]
    assert answered["ran"] == ["research"]
    review = _task(answered, "review")
    assert review["state"] == "done"
    assert review["interrupts"][0]["value"]["topic"] == "llamas"
    assert review["resume"] == ["yes"]
    assert not answered["pending_writes"]

    # the crash: a's writes and b's error saved, no checkpoint after them
    crashed = nodes[ids["crashed"]]
    assert crashed["head"] and crashed["step"] == 4 and crashed["ran"] == ["act"]
    assert crashed["status"] == "stopped" and crashed["pending_writes"]
    assert crashed["next"] == ["a", "b"]
    a, b = _task(crashed, "a"), _task(crashed, "b")
    assert a["state"] == "done" and [w["channel"] for w in a["writes"]] == ["log"]
    assert a["writes"][0]["bytes"] > 0
    assert b["state"] == "failed" and "tool timed out" in b["error"]
    assert "b failed" in crashed["detail"] and "a saved writes" in crashed["detail"]

    # what changed, by name and stored size
    log = next(c for c in crashed["changed"] if c["channel"] == "log")
    assert log["stored"] in ("blob", "delta") and log["bytes"] > 0
    first = next(n for n in page["checkpoints"] if n["parent_checkpoint_id"] is None)
    assert first["source"] == "input" and first["step"] == -1 and first["next"] == ["__start__"]
    assert all(n["bytes"] > 0 for n in page["checkpoints"])


def test_show_a_subgraph_namespace(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = _write_story(db_dsn, fork=False)
    page = _show_json(capsys, db_dsn, "story")
    [sub] = _by_id(page)[ids["after_plan"]]["subgraphs"]
    inner = _show_json(capsys, db_dsn, "story", "--ns", sub["checkpoint_ns"])
    assert inner["checkpoint_ns"] == sub["checkpoint_ns"] and inner["total"] == 4
    assert inner["status"] == "finished"
    assert [n["ran"] for n in reversed(inner["checkpoints"])] == [
        [],
        ["__start__"],
        ["search"],
        ["summarise"],
    ]
    assert all(n["metadata"]["parents"] == {"": ids["after_plan"]} for n in inner["checkpoints"])

    code, _, err = _run_cli(capsys, "show", "story", "--ns", "nope", "--dsn", db_dsn)
    assert code == 1
    assert "no checkpoints in namespace 'nope'" in err and sub["checkpoint_ns"] in err


def test_values_prints_one_checkpoint_in_full(
    db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _write_story(db_dsn, fork=False)
    short = ids["crashed"][-8:]
    code, out, err = _run_cli(
        capsys, "show", "story", "--values", "--checkpoint", short, "--json", "--dsn", db_dsn
    )
    assert code == 0, err
    state = json.loads(out)
    assert state["checkpoint_id"] == ids["crashed"]
    assert state["values"]["log"][-1] == "act" and state["values"]["approved"] == "yes"
    assert state["values"]["findings"] == ["search llamas", "summary"]
    assert set(state["internal"]) == {"branch:to:a", "branch:to:b"}
    writes = {(w["channel"], json.dumps(w["value"])) for w in state["pending_writes"]}
    assert ("log", '["a done"]') in writes
    assert any(c == "__error__" and "tool timed out" in v for c, v in writes)

    code, out, err = _run_cli(capsys, "show", "story", "--values", "--dsn", db_dsn)
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"checkpoint {ids['crashed']}")
    assert "  log: [" in out and "  approved: 'yes'" in out

    code, _, err = _run_cli(capsys, "show", "story", "--checkpoint", "zzzz", "--dsn", db_dsn)
    assert code == 1 and "no checkpoint 'zzzz'" in err


def test_dot_draws_the_fork_and_the_subgraphs(
    db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _write_story(db_dsn)
    code, out, err = _run_cli(capsys, "show", "story", "--dot", "--dsn", db_dsn)
    assert code == 0, err
    assert out.startswith('digraph "story" {') and out.rstrip().endswith("}")
    assert f'"{ids["after_plan"]}" -> "{ids["fork"]}" [style=bold, label="fork"];' in out
    assert out.count("shape=component") == 2
    assert re.search(rf'"{ids["crashed"]}" \[.*fillcolor="#ffc9c9", style="[^"]*dashed', out)


# -- threads -------------------------------------------------------------------------


def test_threads_lists_each_status(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    _write_story(db_dsn, "crashed", fork=False)
    _finished_thread(db_dsn, "done", {"user_id": "u-42", "tier": 2})
    _write_story(db_dsn, "story")
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        saver.put(
            {"configurable": {"thread_id": "paused", "checkpoint_ns": ""}},
            _checkpoint(0, {"branch:to:join": None}, seen={}),
            {"source": "loop", "step": 0, "parents": {}},
            {"branch:to:join": "1"},
        )

    code, out, err = _run_cli(capsys, "threads", "--json", "--dsn", db_dsn)
    assert code == 0, err
    threads = {t["thread_id"]: t for t in json.loads(out)}
    assert list(threads) == ["paused", "story", "done", "crashed"]  # newest first
    assert threads["story"]["status"] == "interrupted"
    assert threads["crashed"]["status"] == "stopped"
    assert "b failed" in threads["crashed"]["detail"]
    assert threads["done"]["status"] == "finished" and threads["done"]["next"] == []
    assert threads["paused"]["status"] == "stopped"
    assert threads["paused"]["detail"] == "next join, nothing saved yet"
    assert threads["story"]["checkpoints"] == 16 and threads["story"]["namespaces"] == 3
    assert threads["story"]["size_bytes"] > threads["done"]["size_bytes"] > 0
    assert all(t["locked_by"] is None for t in threads.values())

    code, out, _ = _run_cli(capsys, "threads", "--limit", "2", "--json", "--dsn", db_dsn)
    assert [t["thread_id"] for t in json.loads(out)] == ["paused", "story"]
    for flag in (["--metadata", "user_id=u-42"], ["--metadata", "tier=2"]):
        code, out, _ = _run_cli(capsys, "threads", *flag, "--json", "--dsn", db_dsn)
        assert [t["thread_id"] for t in json.loads(out)] == ["done"], flag
    code, out, _ = _run_cli(capsys, "threads", "--since", "1h", "--json", "--dsn", db_dsn)
    assert len(json.loads(out)) == 4
    code, out, err = _run_cli(capsys, "threads", "--since", "2999-01-01", "--dsn", db_dsn)
    assert code == 0 and out == "" and "no threads found" in err

    # a thread whose lock a worker holds is running now
    with PostgresSaver.from_conn_string(db_dsn) as saver, saver.lock_thread("done") as lock:
        code, out, _ = _run_cli(capsys, "threads", "--json", "--dsn", db_dsn)
        assert {t["thread_id"]: t["locked_by"] for t in json.loads(out)}["done"] == lock.backend_pid

    code, out, _ = _run_cli(capsys, "threads", "--dsn", db_dsn)
    lines = out.splitlines()
    assert lines[0].split() == [
        "THREAD",
        "CHECKPOINTS",
        "LAST",
        "ACTIVITY",
        "(UTC)",
        "SIZE",
        "STATUS",
    ]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert re.search(r"\binterrupted\s+review asks", rows["story"])
    assert re.search(r"\bfinished$", rows["done"])


def _checkpoint(step: int, values: dict[str, Any], *, seen: dict[str, dict[str, str]]) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=step))
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = dict.fromkeys(values, "1")
    checkpoint["versions_seen"] = seen
    return checkpoint


# -- a long thread -----------------------------------------------------------------


def test_a_long_thread_shows_its_newest_page(
    db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    total = 10_000
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        # the saver's own put, its statements sent in one pipeline: no round trip each
        with conn.pipeline(), conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            config: Any = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
            version = None
            for step in range(total):
                version = saver.get_next_version(version, None)
                checkpoint = _checkpoint(
                    step, {"counter": step, "notes": [f"note {step}"]}, seen={}
                )
                checkpoint["channel_versions"] = {"counter": version, "notes": version}
                checkpoint["versions_seen"] = {"tick": {"counter": version}}
                metadata: Any = {"source": "loop", "step": step, "parents": {}}
                op = put_op(
                    saver, config, checkpoint, metadata, {"counter": version, "notes": version}
                )
                config = saver._drive(cur, op)

    page = _show_json(capsys, db_dsn, "long", "--limit", "20")
    assert (page["total"], page["shown"], page["older"]) == (total, 20, total - 20)
    assert [n["step"] for n in page["checkpoints"]] == list(range(total - 1, total - 21, -1))
    assert page["status"] == "finished"
    assert all(n["ran"] == ["tick"] for n in page["checkpoints"])

    before = _show_json(
        capsys, db_dsn, "long", "--limit", "20", "--checkpoint", page["older_checkpoint_id"]
    )
    assert before["newer"] == 20 and before["older"] == total - 40
    assert [n["step"] for n in before["checkpoints"]] == list(range(total - 21, total - 41, -1))
    assert before["status"] is None  # the latest is not on this page

    code, out, err = _run_cli(capsys, "show", "long", "--limit", "5", "--dsn", db_dsn)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "thread 'long'  namespace (root)  10,000 checkpoints"
    assert lines[2].startswith("┆ 9,995 older checkpoints not shown; the page before: ")
    assert [line.split()[3] for line in lines[3:8]] == ["9995", "9996", "9997", "9998", "9999"]


# -- encryption ------------------------------------------------------------------------


def test_encrypted_threads_show_structure_without_the_key_and_values_with_it(
    db_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgcheckpoint.codec.crypto import EncryptedSerde
    from pgcheckpoint.codec.labels import KEYS_ENV

    key = base64.b64encode(secrets.token_bytes(32)).decode()
    serde = EncryptedSerde.from_env(environ={KEYS_ENV: f"k1:{key}"})
    g = StateGraph(State)
    g.add_node("review", lambda s: {"approved": interrupt({"question": "ship it?"})})
    g.add_edge(START, "review")
    g.add_edge("review", END)
    with PostgresSaver.from_conn_string(db_dsn, serde=serde) as saver:
        g.compile(checkpointer=saver).invoke(
            {"topic": "x"}, {"configurable": {"thread_id": "sealed"}}
        )

    monkeypatch.delenv(KEYS_ENV, raising=False)
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    page = _show_json(capsys, db_dsn, "sealed")
    # the interrupt is seen from its channel name; its payload stays sealed
    assert page["status"] == "interrupted"
    latest = page["checkpoints"][0]
    assert latest["next"] is None and latest["ran"] is None
    assert _task(latest, "review")["interrupts"][0]["value"] == "<encrypted>"
    code, _, err = _run_cli(capsys, "show", "sealed", "--values", "--dsn", db_dsn)
    assert code == 1 and KEYS_ENV in err and "'k1'" in err

    monkeypatch.setenv(KEYS_ENV, f"k1:{key}")
    page = _show_json(capsys, db_dsn, "sealed")
    latest = page["checkpoints"][0]
    assert latest["next"] == ["review"]
    assert _task(latest, "review")["interrupts"][0]["value"] == {"question": "ship it?"}
    code, out, err = _run_cli(capsys, "show", "sealed", "--values", "--json", "--dsn", db_dsn)
    assert code == 0, err
    assert json.loads(out)["values"]["topic"] == "x"


# -- the terminal ----------------------------------------------------------------------


def test_the_tree_on_a_terminal_branches_where_the_thread_forked(db_dsn: str) -> None:
    ids = _write_story(db_dsn)
    command = [sys.executable, "-m", "pgcheckpoint", "show", "story", "--dsn", db_dsn]
    screen = _screen(command)
    assert all(len(line) <= SCREEN_COLUMNS for line in screen), "\n".join(screen)
    text = "\n".join(screen)
    assert screen[0] == "thread 'story'  namespace (root)  8 checkpoints", text
    assert screen[1].startswith("status: interrupted: review asks {"), text

    tree = [line for line in screen[2:] if line]
    bullets = [(i, line) for i, line in enumerate(tree) if "● " in line]
    columns = [line.index("●") for _, line in bullets]
    # the line to the latest state is the leftmost; the old line hangs off it
    assert columns == [0, 0, 0, 2, 2, 2, 0, 0], text
    short = {k: v[-8:] for k, v in ids.items()}
    assert bullets[2][1].startswith(f"● {short['after_plan']}  step 1"), text
    assert re.match(r"├─● \w{8}  step 2 +loop ", bullets[3][1]), text
    assert bullets[5][1].startswith(f"│ ● {short['crashed']}  step 4"), text
    assert bullets[6][1].startswith(f"● {short['fork']}  step 2   update "), text
    assert bullets[7][1].startswith(f"● {short['latest']}  step 3   loop "), text
    assert "fork" in bullets[6][1]

    # while the old line is drawn, the main line runs beside it
    first_side, back = bullets[3][0], bullets[6][0]
    assert all(line.startswith(("│ ", "├─")) for line in tree[first_side:back]), text
    side = tree[bullets[5][0] : back]
    assert "│     error: b failed: RuntimeError('tool timed out')" in side, text
    assert any(line.startswith("│     pending: a wrote log (") for line in side), text
    assert "│     stopped mid-step: next a, b" in side, text
    assert any(line.startswith("│ │   interrupt: review got 'yes' for {") for line in tree)

    # a subgraph line too long for the screen is cut, not wrapped
    subgraph = [
        line for line in tree if "subgraph: 4 checkpoints, finished: --ns research:" in line
    ]
    assert len(subgraph) == 2 and all(line.endswith("…") for line in subgraph), text
    assert (
        tree[-2]
        == '    interrupt: review asks {"question": "approve the plan?", "topic": "alpacas"}'
    )
    assert tree[-1] == "    interrupted: waiting for Command(resume=...)"


def _screen(command: list[str]) -> list[str]:
    """The screen after running `command` on a SCREEN_COLUMNS-wide terminal."""
    if shutil.which("tmux"):
        return _tmux_screen(command)
    return _pty_screen(command)


def _tmux_screen(command: list[str]) -> list[str]:
    # a server of our own, so nobody else's tmux is touched
    socket = f"pgc-test-{secrets.token_hex(4)}"
    env = " ".join(
        f"{name}={shlex.quote(os.environ[name])}"
        for name in ("PYTHONPATH", "PATH", "HOME")
        if name in os.environ
    )
    done = "__pgc_done__"
    # COLUMNS would override the terminal's width
    script = (
        f"env -u COLUMNS -u LINES {env} TERM=xterm {shlex.join(command)}; echo {done}; sleep 600"
    )
    tmux = ["tmux", "-L", socket, "-f", os.devnull]
    subprocess.run(
        [
            *tmux,
            "new-session",
            "-d",
            "-s",
            "show",
            "-x",
            str(SCREEN_COLUMNS),
            "-y",
            str(SCREEN_ROWS),
            script,
        ],
        check=True,
    )
    try:
        deadline = time.monotonic() + 120
        screen = ""
        while time.monotonic() < deadline:
            screen = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "show"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            if done in screen:
                break
            time.sleep(0.2)
        lines = screen.splitlines()
        assert done in lines, f"the command did not finish:\n{screen}"
        return [line.rstrip() for line in lines[: lines.index(done)]]
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run([*tmux, "kill-server"], check=True, capture_output=True)


def _pty_screen(command: list[str]) -> list[str]:
    # Without tmux: a pseudo-terminal of the same size. The output moves no
    # cursor, so its lines are the screen's rows as long as none wraps.
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SCREEN_ROWS, SCREEN_COLUMNS, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, close_fds=True, env=env
    )
    os.close(slave)
    chunks = []
    with contextlib.suppress(OSError):  # EIO once the child closes the terminal
        while chunk := os.read(master, 65536):
            chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode().replace("\r\n", "\n").rstrip("\n").split("\n")

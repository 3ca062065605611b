"""No command that reads values runs code planted in the database.

A row whose msgpack names `os.system` (and `builtins.open`) is planted in
clear where each command decodes values: a pending interrupt, a channel
value, the metadata (and, for the importer, the sends of a checkpoint in the
pre-v4 format). Each command then runs, as an operator would: without a key,
with a key (where a plaintext row is refused unless `--allow-plaintext`),
and with `--allow-plaintext`. Had anything been called, a file would exist.
"""

from __future__ import annotations

import base64
import json
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import TASKS
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send, interrupt
from support.planted import code_ran, planted_value

from pgcheckpoint import EncryptedSerde, PostgresSaver
from pgcheckpoint.cli import main
from pgcheckpoint.codec.labels import KEYS_ENV

KEY = bytes(range(32))
KEYS = f"k1:{base64.b64encode(KEY).decode()}"
THREAD = "victim"


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    answer: str


def write_thread(dsn: str, serde: Any = None) -> None:
    """A thread whose latest checkpoint waits on an interrupt, its log a stored list."""
    g = StateGraph(State)
    g.add_node("draft", lambda s: {"log": ["drafted " + "x" * 40]})
    g.add_node("review", lambda s: {"answer": interrupt({"question": "ship it?"})})
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", END)
    with PostgresSaver.from_conn_string(dsn, serde=serde) as saver:
        g.compile(checkpointer=saver).invoke(
            {"log": ["start"]}, {"configurable": {"thread_id": THREAD}}
        )


def plant(dsn: str, marker: Path) -> None:
    """The planted bytes, in clear, as the interrupt, the log values and the metadata."""
    evil = planted_value(marker)
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = conn.execute(
            "UPDATE pgc_writes SET type = 'msgpack', blob = %s"
            " WHERE thread_id = %s AND channel = '__interrupt__'",
            [evil, THREAD],
        ).rowcount
        done *= conn.execute(
            "UPDATE pgc_blobs SET type = 'msgpack', blob = %s, base_version = NULL"
            " WHERE thread_id = %s AND channel = 'log'",
            [evil, THREAD],
        ).rowcount
        done *= conn.execute(
            "UPDATE pgc_checkpoints SET metadata_type = 'msgpack', metadata_blob = %s"
            " WHERE thread_id = %s",
            [evil, THREAD],
        ).rowcount
    assert done, "nothing was planted"


COMMANDS = [
    ["threads"],
    ["threads", "--json"],
    ["show", THREAD],
    ["show", THREAD, "--json"],
    ["show", THREAD, "--dot"],
    ["show", THREAD, "--values"],
    ["show", THREAD, "--values", "--json"],
]


def run(capsys: pytest.CaptureFixture[str], dsn: str, *argv: str) -> tuple[int, str]:
    code = main([*argv, "--dsn", dsn])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "code-ran"
    yield path
    assert not code_ran(path), "a command ran code planted in the database"


def test_the_planted_value_does_run_code_under_langgraphs_default_reader(
    tmp_path: Path,
) -> None:
    """The detector works: the permissive reader calls what the bytes name."""
    marker = tmp_path / "proof"
    decoded = JsonPlusSerializer().loads_typed(("msgpack", planted_value(marker)))
    decoded["note"].close()  # the file `builtins.open` opened
    assert marker.exists() and Path(f"{marker}.open").exists()


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_without_a_key_planted_values_show_as_blocked(
    db_dsn: str,
    marker: Path,
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    write_thread(db_dsn)
    plant(db_dsn, marker)
    code, out = run(capsys, db_dsn, *argv)
    assert code == 0, out
    assert not code_ran(marker)
    if "--values" in argv:
        assert "os.system" in out and "builtins.open" in out
        if "--json" in argv:
            values = json.loads(out)["values"]
            assert values["log"]["question"] == {"blocked": "os.system"}
        else:
            assert "<blocked: os.system>" in out


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_with_a_key_planted_plaintext_is_refused_unless_allowed_and_never_run(
    db_dsn: str,
    marker: Path,
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEYS_ENV, KEYS)
    write_thread(db_dsn, EncryptedSerde(keys={"k1": KEY}))
    plant(db_dsn, marker)
    code, out = run(capsys, db_dsn, *argv)
    assert code == 0, out
    if "--values" in argv:
        assert "stored unencrypted" in out and "os.system" not in out
    code, out = run(capsys, db_dsn, *argv, "--allow-plaintext")
    assert code == 0, out
    assert not code_ran(marker)
    if "--values" in argv:
        assert "os.system" in out and "stored unencrypted" not in out


def test_rotate_key_allow_plaintext_never_runs_planted_code(
    db_dsn: str,
    marker: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEYS_ENV, KEYS)
    write_thread(db_dsn)
    plant(db_dsn, marker)
    code, out = run(capsys, db_dsn, "rotate-key", "--dry-run")
    assert code == 0, out
    code, out = run(capsys, db_dsn, "rotate-key")
    assert code == 1 and "stored unencrypted" in out  # plaintext needs --allow-plaintext
    code, out = run(capsys, db_dsn, "rotate-key", "--allow-plaintext")
    assert code == 0, out
    assert not code_ran(marker)
    # what was planted is now sealed as it was: strict decoding still shows it blocked
    code, out = run(capsys, db_dsn, "show", THREAD, "--values")
    assert code == 0 and "<blocked: os.system>" in out, out


def test_import_langgraph_never_runs_planted_code(
    db_dsn: str, marker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The importer decodes the sends of pre-v4 checkpoints: plant one there."""
    with OfficialSaver.from_conn_string(db_dsn) as official:
        official.setup()
        parent = empty_checkpoint()
        parent.update({"v": 1, "pending_sends": []})  # type: ignore[typeddict-item]
        parent["channel_values"] = {"count": 1}
        parent["channel_versions"] = {"count": 1}
        base: Any = {"configurable": {"thread_id": "legacy", "checkpoint_ns": ""}}
        parent_config = official.put(base, parent, {"source": "loop", "step": 0}, {"count": 1})
        official.put_writes(parent_config, [(TASKS, Send("work", {"item": 1}))], "sender")
        child = empty_checkpoint()
        child.update({"v": 1, "pending_sends": []})  # type: ignore[typeddict-item]
        child["channel_values"] = {"count": 2}
        child["channel_versions"] = {"count": 2}
        official.put(parent_config, child, {"source": "loop", "step": 1}, {"count": 2})
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        planted = conn.execute(
            "UPDATE checkpoint_writes SET type = 'msgpack', blob = %s WHERE channel = %s",
            [planted_value(marker), TASKS],
        ).rowcount
    assert planted == 1
    code, out = run(capsys, db_dsn, "import-langgraph")
    assert code == 0, out
    assert not code_ran(marker)

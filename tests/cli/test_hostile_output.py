"""Every command shows what the application stored without letting it drive the terminal.

A thread id, a subgraph's namespace, metadata, an interrupt's question and a
channel value carry escape sequences (set the window title, clear the line,
move the cursor, the one-byte CSI), a bidi override and a carriage return. No
human-readable output holds them raw; JSON output stays JSON and reads back
the same ids.
"""

from __future__ import annotations

import json
import operator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from pgcheckpoint import PostgresSaver
from pgcheckpoint.cli import EXIT_OK, main

HOSTILE = "\x1b]0;pwned\x07\x1b[2K\x1b[1A\u202eevil\x9b31m\r\x7f"
THREAD = f"t{HOSTILE}1"
# every character that must never reach a terminal raw
RAW = {c for c in HOSTILE if not c.isprintable()}


class Inner(TypedDict, total=False):
    notes: Annotated[list[str], operator.add]


class State(TypedDict, total=False):
    notes: Annotated[list[str], operator.add]
    answer: str


def _graph(saver: PostgresSaver) -> Any:
    inner = StateGraph(Inner)
    inner.add_node("note", lambda s: {"notes": [f"inner {HOSTILE}"]})
    inner.add_edge(START, "note")
    inner.add_edge("note", END)

    def ask(state: State) -> State:
        return {"answer": interrupt({"question": f"approve{HOSTILE}?"})}

    builder = StateGraph(State)
    builder.add_node(f"sub{HOSTILE}", inner.compile())
    builder.add_node("ask", ask)
    builder.add_edge(START, f"sub{HOSTILE}")
    builder.add_edge(f"sub{HOSTILE}", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def _clean(text: str) -> None:
    found = sorted({repr(c) for c in text if c in RAW})
    assert not found, f"raw control characters in the output: {found}"


@pytest.fixture
def hostile_thread(db_dsn: str) -> str:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        graph = _graph(PostgresSaver(conn))
        config: Any = {"configurable": {"thread_id": THREAD}, "metadata": {"user": HOSTILE}}
        graph.invoke({"notes": [f"start {HOSTILE}"]}, config)
    return THREAD


@pytest.mark.parametrize(
    "command",
    [
        ["threads"],
        ["threads", "--metadata", f"user={HOSTILE}"],
        ["show", THREAD],
        ["show", THREAD, "--dot"],
        ["show", THREAD, "--values"],
        ["stats"],
        ["prune", "--keep-last", "1", "--dry-run"],
        ["show", THREAD, "--checkpoint", f"no{HOSTILE}"],  # an error message
        ["show", f"other{HOSTILE}"],  # another
    ],
)
def test_human_output_shows_control_characters_as_escapes(
    db_dsn: str, hostile_thread: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*command, "--dsn", db_dsn])
    out, err = capsys.readouterr()
    _clean(out)
    _clean(err)
    assert "Traceback" not in err
    if code == EXIT_OK and command[0] in ("threads", "show") and "--dot" not in command:
        assert "\\x1b]0;pwned\\x07" in out  # shown, not hidden


def test_the_page_before_is_a_command_to_paste_back(
    db_dsn: str, hostile_thread: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", THREAD, "--limit", "1", "--dsn", db_dsn]) == EXIT_OK
    out = capsys.readouterr().out
    _clean(out)
    assert "pgcheckpoint show $'t\\x1b]0;pwned\\x07" in out  # bash's ANSI-C quoting


@pytest.mark.parametrize(
    "command", [["threads", "--json"], ["show", THREAD, "--json"], ["stats", "--json"]]
)
def test_json_output_stays_json_with_the_same_ids(
    db_dsn: str, hostile_thread: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--dsn", db_dsn]) == EXIT_OK
    out = capsys.readouterr().out
    _clean(out)
    data = json.loads(out)
    if command[0] == "threads":
        assert data[0]["thread_id"] == THREAD
    elif command[0] == "show":
        assert data["thread_id"] == THREAD
        assert any(
            sub["checkpoint_ns"].startswith(f"sub{HOSTILE}:")
            for c in data["checkpoints"]
            for sub in c["subgraphs"]
        )
    else:
        assert data["largest"][0]["thread_id"] == THREAD

"""Progress of long commands: plain lines in a log, a bar redrawn on a terminal."""

from __future__ import annotations

import io

import pytest

from pgcheckpoint.cli.progress import Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_writes_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    with Progress("importing threads", total=20, stream=out) as progress:
        for _ in range(20):
            progress.advance()
        progress.note("thread 't3' not copied: bad id")
    lines = out.getvalue().splitlines()
    assert lines[0] == "importing threads: 2/20 (10%)"
    assert "importing threads: thread 't3' not copied: bad id" in lines
    assert lines[-1] == "importing threads: 20/20 (100%) done"
    assert len(lines) == 11  # one per tenth, the note, the last line
    assert "\r" not in out.getvalue()


def test_progress_draws_a_bar_on_a_terminal() -> None:
    out = Tty()
    with Progress("pruning", total=4, stream=out) as progress:
        progress.advance(4)
    text = out.getvalue()
    assert "\r" in text and "[" in text and "4/4" in text
    assert text.endswith("pruning: 4/4 (100%) done\n")


def test_progress_of_unknown_total_and_of_a_failure() -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError), Progress("scanning", total=None, stream=out) as progress:
        progress.advance(3)
        raise RuntimeError("boom")
    assert out.getvalue().splitlines()[-1] == "scanning: 3 stopped"


def test_the_last_line_in_a_log_is_written_once() -> None:
    out = io.StringIO()
    with Progress("pruning", total=3, stream=out) as progress:
        for _ in range(3):
            progress.advance()
    assert out.getvalue().splitlines() == [
        "pruning: 1/3 (33%)",
        "pruning: 2/3 (66%)",
        "pruning: 3/3 (100%) done",
    ]


def test_work_that_fails_before_it_starts_leaves_no_line() -> None:
    log = io.StringIO()
    with pytest.raises(RuntimeError), Progress("pruning", total=None, stream=log):
        raise RuntimeError("no such schema")
    assert log.getvalue() == ""
    terminal = Tty()
    with pytest.raises(RuntimeError), Progress("pruning", total=None, stream=terminal):
        raise RuntimeError("no such schema")
    assert terminal.getvalue().endswith("\r\x1b[2K")  # the bar drawn at the start, cleared

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

"""Progress of a long command: a bar on a terminal, plain log lines otherwise.

Commands that walk many threads (import, prune, rotate-key) report through
`Progress`. On a TTY it redraws one line in place; when the output is a file or
a CI log it writes a line at every tenth of the way (and at least every
`interval` seconds), so logs stay short and readable. Output goes to stderr,
leaving stdout to the command's own results.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> with Progress("importing threads", total=2, stream=out) as progress:
    ...     progress.advance()
    ...     progress.advance()
    >>> out.getvalue().splitlines()[-1]
    'importing threads: 2/2 (100%) done'
"""

from __future__ import annotations

import shutil
import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Count units of work done out of `total` and show it.

    Args:
        label: What is being counted, e.g. "importing threads".
        total: The number of units, or None when unknown (shows a count only).
        stream: Where to write (default: stderr).
        interval: Seconds between log lines when not on a terminal.

    Example:
        >>> import io
        >>> with Progress("pruning", total=None, stream=io.StringIO()) as p:
        ...     p.advance(5)
        >>> p.done
        5
    """

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        stream: TextIO | None = None,
        interval: float = 30.0,
    ) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.done = 0
        self.tty = _isatty(self.stream)
        self._started = time.monotonic()
        self._last_line = self._started
        self._next_tenth = 1
        self._drawn = 0.0
        self._advanced = False  # whether the work started (`advance` was called)

    def __enter__(self) -> Progress:
        if self.tty:
            self._draw()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish(ok=exc_type is None)

    def advance(self, n: int = 1) -> None:
        """Count `n` more units as done."""
        self.done += n
        self._advanced = True
        now = time.monotonic()
        if self.tty:
            # a redraw per unit would cost more than the work on fast loops
            if now - self._drawn >= 0.1 or self.done == self.total:
                self._draw()
            return
        crossed = False
        if self.total:
            # tenths 1-9: the last line is `finish`'s
            while self._next_tenth <= 9 and self.done * 10 >= self._next_tenth * self.total:
                self._next_tenth += 1
                crossed = True
        finished = self.total is not None and self.done >= self.total
        # the line for the end is `finish`'s, which says how it ended
        if (crossed or now - self._last_line >= self.interval) and not finished:
            self._line(self._summary())

    def note(self, message: str) -> None:
        """Write a message on its own line without breaking the bar."""
        from ..threadview.terminal import printable

        if self.tty:
            self.stream.write("\r\x1b[2K")
        self.stream.write(f"{self.label}: {printable(message)}\n")
        if self.tty:
            self._draw()
        self.stream.flush()

    def finish(self, *, ok: bool = True) -> None:
        """End the bar with a final line (called on leaving the `with` block).

        Work that failed before it started (no `advance`) leaves no line: the
        error says what happened.
        """
        if self.tty:
            self.stream.write("\r\x1b[2K")
        if not ok and not self._advanced:
            self.stream.flush()
            return
        self._line(f"{self._summary()} {'done' if ok else 'stopped'}")

    def _summary(self) -> str:
        if self.total:
            percent = min(100, self.done * 100 // self.total)
            return f"{self.label}: {self.done}/{self.total} ({percent}%)"
        if self.total == 0:
            return f"{self.label}: 0/0"
        return f"{self.label}: {self.done}"

    def _line(self, text: str) -> None:
        self._last_line = time.monotonic()
        self.stream.write(text + "\n")
        self.stream.flush()

    def _draw(self) -> None:
        self._drawn = time.monotonic()
        elapsed = self._drawn - self._started
        width = shutil.get_terminal_size((80, 20)).columns
        if self.total:
            fraction = min(1.0, self.done / self.total)
            eta = ""
            if 0 < self.done < self.total:
                eta = f" eta {_duration(elapsed / self.done * (self.total - self.done))}"
            tail = f" {self.done}/{self.total} {fraction:4.0%}{eta}"
            room = max(10, width - len(self.label) - len(tail) - 4)
            filled = int(room * fraction)
            bar = "#" * filled + "." * (room - filled)
            text = f"{self.label} [{bar}]{tail}"
        else:
            text = f"{self.label}: {self.done} ({_duration(elapsed)})"
        self.stream.write("\r" + text[: width - 1])
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"

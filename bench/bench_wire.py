"""Round trips and bytes on the wire, counted from libpq's protocol trace.

A pool made with `configure=trace.configure` traces every connection to a file
(`PQtrace`). A round trip is a turn of the conversation from client to server
and back: a run of frontend messages followed by backend ones, so a pipeline
of several statements with one sync counts once. Tracing is slow (every byte is
printed), so only a separate, untimed pass uses it.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg import Connection, pq

_MESSAGE = re.compile(rb"^([FB])\t(\d+)\t", re.MULTILINE)


@dataclass
class WireCount:
    round_trips: int = 0
    sent: int = 0
    received: int = 0
    calls: int = 1

    def per_call(self) -> dict[str, float]:
        n = max(self.calls, 1)
        return {
            "round_trips": self.round_trips / n,
            "kib_sent": self.sent / n / 1024,
            "kib_received": self.received / n / 1024,
        }


class WireTrace:
    """Traces the connections of a pool; `measure()` counts what a block sent."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="pgc-bench-trace-"))
        self._traced: list[tuple[Connection[Any], int, Path]] = []

    def configure(self, conn: Connection[Any]) -> None:
        path = self._dir / f"conn{len(self._traced)}.trace"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._traced.append((conn, fd, path))
        self._start(conn, fd)

    @staticmethod
    def _start(conn: Connection[Any], fd: int) -> None:
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def _flush(self) -> None:
        # PQuntrace flushes the stream; tracing again opens a new one on the same file
        for conn, fd, _ in self._traced:
            if not conn.closed:
                conn.pgconn.untrace()
                self._start(conn, fd)

    @contextmanager
    def measure(self, calls: int = 1) -> Iterator[WireCount]:
        """Count the round trips and bytes of the block, over `calls` calls."""
        self._flush()
        starts = {path: path.stat().st_size for _, _, path in self._traced}
        count = WireCount(calls=calls)
        yield count
        self._flush()
        for _, _, path in self._traced:
            with path.open("rb") as f:
                f.seek(starts.get(path, 0))
                _tally(f.read(), count)

    def close(self) -> None:
        for conn, fd, path in self._traced:
            if not conn.closed:
                conn.pgconn.untrace()
            os.close(fd)
            path.unlink(missing_ok=True)
        self._traced.clear()
        self._dir.rmdir()


def _tally(trace: bytes, count: WireCount) -> None:
    previous = b"B"
    for match in _MESSAGE.finditer(trace):
        direction, length = match.group(1), int(match.group(2)) + 1  # + the type byte
        if direction == b"F":
            count.sent += length
        else:
            count.received += length
            if previous == b"F":
                count.round_trips += 1
        previous = direction

"""Generate the sync driver (src/pgcheckpoint/saver.py) from the async one (aio.py).

The two drivers are twins: the same methods, one with `await`. aio.py is the
source; saver.py is written by this script and a unit test fails when the
checked-in file differs from what it generates. Edit aio.py, then run
`make sync-twin` (or `python tests/tools/async_to_sync.py`).

Markers in aio.py, for what is not a mechanical rename:
- `# async-only: begin` ... `# async-only: end`: lines left out of saver.py;
- a line ending in `# async-only`: left out of saver.py;
- `# sync-only: CODE`: CODE is a line of saver.py only (indented like the comment);
- `# sync: CODE` at the end of a line: saver.py has CODE there instead.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "pgcheckpoint" / "aio.py"
TARGET = ROOT / "src" / "pgcheckpoint" / "saver.py"

HEADER = (
    "# Generated from aio.py by tests/tools/async_to_sync.py: edit aio.py and run\n"
    "# `make sync-twin`; a unit test checks that this file matches.\n"
)

# Whole phrases first (docstrings), then names, then syntax.
PHRASES = [
    ("the asyncio driver of the core", "the synchronous driver of the core"),
    ("for asyncio code", "for synchronous code"),
    (
        "Drop-in for `langgraph.checkpoint.postgres.aio.AsyncPostgresSaver`. Its\n"
        "    sync methods (`get_tuple`, `list`, ...) work from other threads while the\n"
        "    event loop it was created on runs.",
        "Drop-in for `langgraph.checkpoint.postgres.PostgresSaver`: the same\n"
        "    constructor, `from_conn_string` and `setup()`.",
    ),
    ("    # -- BaseCheckpointSaver, async ---", "    # -- BaseCheckpointSaver ---------"),
]
RENAMES = [
    (r"\bAsyncPostgresSaver\b", "PostgresSaver"),
    (r"\bAsyncConnectionPool\b", "ConnectionPool"),
    (r"\bAsyncConnection\b", "Connection"),
    (r"\bAsyncCursor\b", "Cursor"),
    (r"\bAsyncPipeline\b", "Pipeline"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\basynccontextmanager\b", "contextmanager"),
    (r"\ban (Connection|ConnectionPool)\b", r"a \1"),
    (r"\basync (with|for|def)\b", r"\1"),
    (r"\bawait asyncio\.to_thread\(([\w.]+), ", r"\1("),
    (r"\bawait ", ""),
    (r"\basyncio\.(Lock|BoundedSemaphore)\b", r"threading.\1"),
    (r", asynchronous=True\b", ""),
    (r"\.set_autocommit\((\w+)\)", r".autocommit = \1"),
    (r"\bainvoke\b", "invoke"),
    (
        r"\ba(get_tuple|list|put_writes|put|delete_thread|copy_thread|prune_older_than"
        r"|prune_keep_last|prune|delete_for_runs|get_delta_channel_history|resume|setup)\b",
        r"\1",
    ),
]
_FROM_IMPORT = re.compile(r"^(from [\w.]+ import )([\w, ]+)$")
_SYNC_LINE = re.compile(r"^(\s*)# sync-only: ?(.*)$")
_SYNC_REPLACE = re.compile(r"^(\s*).*?\s+# sync: (.*)$")


def _member_key(name: str) -> tuple[int, str]:
    # ruff's isort order within a `from` import: CONSTANTS, Classes, functions
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def _sort_import(line: str) -> str:
    match = _FROM_IMPORT.match(line)
    if not match:
        return line
    names = sorted({n.strip() for n in match.group(2).split(",") if n.strip()}, key=_member_key)
    return match.group(1) + ", ".join(names)


def generate(source: str) -> str:
    """The text of saver.py for the text of aio.py."""
    for old, new in PHRASES:
        source = source.replace(old, new)
    out: list[str] = []
    skipping = False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == "# async-only: begin":
            skipping = True
            continue
        if stripped == "# async-only: end":
            skipping = False
            continue
        if skipping or line.rstrip().endswith("# async-only"):
            continue
        sync_line = _SYNC_LINE.match(line)
        if sync_line:
            out.append(sync_line.group(1) + sync_line.group(2))
            continue
        replaced = _SYNC_REPLACE.match(line)
        if replaced:
            out.append(replaced.group(1) + replaced.group(2))
            continue
        for pattern, repl in RENAMES:
            line = re.sub(pattern, repl, line)
        out.append(_sort_import(line))
    return HEADER + "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    expected = generate(SOURCE.read_text(encoding="utf-8"))
    if "--check" in argv:
        if TARGET.read_text(encoding="utf-8") != expected:
            print(f"{TARGET} is stale: run `make sync-twin`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(expected, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

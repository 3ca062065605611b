"""The code blocks of README.md and docs/, and how a test runs each.

Every fenced block is run by `tests/docs/test_doc_blocks.py`, so none can rot.
How is said by its language, or by an HTML comment on the line before it
(invisible on GitHub and in the built docs):

    <!-- check: KIND option=value ... -->

Kinds (the default for `python`, `sh`/`bash`/`console` and `sql` blocks is
the one of that name):

- `python`: run with `PGCHECKPOINT_DSN` naming a database of the test's own.
  `context=NAME` runs `tests/docs/contexts/NAME.py` first, in the same
  namespace (for a fragment that uses `saver`, `graph`, `config`, ...); code
  with a top-level `await` runs in an event loop, and so does a block marked
  `loop` (code of an async function that does not await).
- `shell`: `sh`/`bash` blocks run as one bash script (`set -euo pipefail`);
  `console` blocks run each `$ ` line and compare its output with the lines
  shown (numbers, sizes, dates and ids may differ; a `...` line stands for any
  lines; `stderr` adds what the command wrote there, as a terminal shows it).
  `context=NAME` runs that context as a script first.
- `sql`: run in autocommit; `\\i FILE` reads the packaged `sql/FILE`.
  `cron` stands in for pg_cron's `cron.schedule` and then runs the job it was
  given; `holding=THREAD` holds that thread's lock meanwhile and wants a row.
- `crontab`: the command of a crontab line (after its five time fields).
- `ci`: `make` commands that `.ci/run` runs.
- `install`: pip commands, run in a new virtualenv (slow).
- `server`: run against LangGraph's Agent Server by tests/agent_server
  (`test_docs.py` says how: a `json` block is a `langgraph.json` to serve).

Options for every kind: `id=NAME` names a block; `after=NAME` runs that block
(and what it comes after) first on the same database; `db=empty` gives a
database that was never migrated, `db=vector` a migrated one on a server with
pgvector (conftest's `vector_db_dsn`); `env=keys` sets `PGCHECKPOINT_AES_KEYS`;
`pgbouncer` starts pgbouncer in transaction mode in front of it (`BOUNCER_DSN`);
`roles=a,b` renames those roles to ones of the test's own, created by the
block and dropped after.

In shell and SQL blocks, a `postgresql://...` URL stands for the test's
database (as the user it names when that user is one of `roles`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_KINDS = {
    "python": "python",
    "sh": "shell",
    "bash": "shell",
    "console": "shell",
    "sql": "sql",
}
KINDS = {"python", "shell", "sql", "crontab", "ci", "install", "server"}

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*check:\s*(?P<body>.*?)\s*-->\s*$")


@dataclass
class Block:
    """One fenced code block and how to run it."""

    path: Path
    line: int
    lang: str
    text: str
    kind: str | None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def id(self) -> str | None:
        return self.options.get("id")


def markdown_files() -> list[Path]:
    """README.md and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def parse(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, with the directive before each."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence = match["indent"], match["fence"]
        lang = match["info"].strip().split(" ")[0].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        directive = _directive(lines, i)
        if directive is None:
            kind, options = DEFAULT_KINDS.get(lang), {}
        else:
            kind, options = directive
        blocks.append(Block(path, i + 1, lang, "\n".join(body) + "\n", kind, options))
        i = j + 1
    return blocks


def _directive(lines: list[str], fence_index: int) -> tuple[str, dict[str, str]] | None:
    k = fence_index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    if k < 0:
        return None
    match = _DIRECTIVE.match(lines[k])
    if match is None:
        return None
    words = shlex.split(match["body"])
    options = {}
    for word in words[1:]:
        key, _, value = word.partition("=")
        options[key] = value or "yes"
    return words[0], options


def all_blocks() -> list[Block]:
    return [block for path in markdown_files() for block in parse(path)]


def chain(block: Block, blocks: list[Block]) -> list[Block]:
    """The blocks to run for `block`, in order: those it comes `after`, then itself."""
    by_id = {b.id: b for b in blocks if b.id and b.path == block.path}
    order = [block]
    while "after" in order[0].options:
        order.insert(0, by_id[order[0].options["after"]])
    return order


# -- console output -------------------------------------------------------------------

_SIZE = re.compile(r"\b\d+(?:\.\d+)? (?:B|KiB|MiB|GiB|TiB)\b")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_SHORT_ID = re.compile(r"(?<=● )[0-9a-f]{8}\b")
_NUMBER = re.compile(r"\d+")


def normalise(line: str) -> str:
    """A line of output with what differs between runs made alike: sizes, ids, numbers."""
    line = _UUID.sub("UUID", line)
    line = _SHORT_ID.sub("ID", line)
    line = _SIZE.sub("SIZE", line)
    line = _NUMBER.sub("N", line)
    return " ".join(line.split())


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """A console block's commands (`$ ` lines) with the output shown under each."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` has the lines shown, `...` standing for any number of lines."""
    want = [normalise(line) for line in expected]
    got = [normalise(line) for line in actual]
    while want and not want[-1]:
        want.pop()
    while got and not got[-1]:
        got.pop()
    return _match(want, got)


def _match(want: list[str], got: list[str]) -> bool:
    if not want:
        return not got
    if want[0] == "...":
        return any(_match(want[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and want[0] == got[0] and _match(want[1:], got[1:])

"""Generate the sync driver, src/pgcheckpoint/saver.py, from the async one, aio.py.

The two drivers are twins: the same methods, one awaiting. aio.py is the
source; saver.py is written by this tool, and a unit test fails when the
checked-in file differs from what aio.py generates. Edit aio.py, then run
`make sync-twin`:

    python tools/async_to_sync.py            # rewrite saver.py
    python tools/async_to_sync.py --check    # exit 1 if saver.py is stale

The rewrite walks aio.py's syntax tree and edits the source text at the places
the tree points to, so comments and layout survive; ruff then sorts the imports
and formats the result. The rules:

- `async def`, `async with`, `async for` lose `async`; `await` goes (with the
  parentheses of `(await x).y`).
- Every `async def aNAME` becomes `def NAME`, and every use of `aNAME` follows.
- Names in NAMES are renamed (`AsyncConnection` -> `Connection`); a name that
  starts with `Async` or `async` and is missing there stops the tool.
- `import asyncio` -> `import threading`, `asyncio.Lock` -> `threading.Lock`
  (ASYNCIO_NAMES), `await asyncio.to_thread(f, *args)` -> `f(*args)`; any other
  use of asyncio stops the tool.
- psycopg: `await conn.set_autocommit(x)` -> `conn.autocommit = x`; the keyword
  argument `asynchronous=True` goes.
- Docstrings, comments and strings get the same renames ("an AsyncConnection"
  -> "a Connection"); doctest examples are rewritten as code; in docstrings
  "asyncio" becomes "synchronous" and the sentences of DOC_PHRASES are swapped.

Markers in aio.py, for what no rule covers:

- `# async-only: begin` ... `# async-only: end`: lines left out of saver.py;
- a line ending in `# async-only`: left out of saver.py;
- `# sync-only: CODE`: CODE is a line of saver.py only (indented as the comment);
- `CODE  # sync: OTHER`: saver.py has OTHER in place of the line.

The result is checked before it is written (`twin_problems`): no `async`, no
`await`, no `aNAME` left, a twin with a docstring for every definition.
"""

from __future__ import annotations

import ast
import bisect
import io
import itertools
import re
import shutil
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "pgcheckpoint" / "aio.py"
TARGET = ROOT / "src" / "pgcheckpoint" / "saver.py"

HEADER = (
    "# Generated from aio.py by tools/async_to_sync.py: edit aio.py and run\n"
    "# `make sync-twin`; a unit test checks that this file matches.\n"
)

# Async names and their sync twins, in code and in prose.
NAMES = {
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncCursor": "Cursor",
    "AsyncIterator": "Iterator",
    "AsyncPipeline": "Pipeline",
    "AsyncPostgresSaver": "PostgresSaver",
    "asynccontextmanager": "contextmanager",
    "ainvoke": "invoke",  # a compiled graph's
}
ASYNCIO_NAMES = {
    name: f"threading.{name}"
    for name in ("Lock", "RLock", "BoundedSemaphore", "Semaphore", "Event", "Condition")
}
# Docstring text with no mechanical twin: (async text, sync text); each must occur.
DOC_PHRASES = [
    (
        "Drop-in for `langgraph.checkpoint.postgres.aio.AsyncPostgresSaver`. Its\n"
        "    sync methods (`get_tuple`, `list`, ...) work from other threads while the\n"
        "    event loop it was created on runs.",
        "Drop-in for `langgraph.checkpoint.postgres.PostgresSaver`: the same\n"
        "    constructor, `from_conn_string` and `setup()`.",
    ),
]
# `async def` names whose leading `a` is part of the word, not the twin prefix.
KEEP_NAMES: frozenset[str] = frozenset()

_ASYNC_NAME = re.compile(r"_*(Async|async)")
_A_PREFIXED = re.compile(r"(_*)a([a-z]\w*)")
_MARKER = re.compile(r"#\s*(async-only|sync-only:|sync:)")
_SYNC_ONLY = re.compile(r"^(\s*)# sync-only: ?(.*)$")
_SYNC_LINE = re.compile(r"^(\s*)\S.*?\s+# sync: (.*)$")
# in a sync docstring: code that awaits, or an async name ("the async saver" is fine)
_LEFTOVER = re.compile(r"\bawait\b|\basync\s+(with|for|def)\b|\basyncio\b|\bAsync[A-Z]\w*")


class GenerateError(Exception):
    """aio.py holds something the rules cannot turn into sync code."""


def generate(source: str) -> str:
    """The text of saver.py for the text of aio.py."""
    async_only, replaced = marked_lines(source)
    names = twin_names(source)
    text = _Rewriter(source, names, skip=async_only | replaced).rewrite()
    text = format_python(HEADER + apply_markers(text))
    problems = twin_problems(source, text)
    if problems:
        raise GenerateError("the generated sync twin is wrong:\n- " + "\n- ".join(problems))
    return text


def stale_phrases(source: str) -> list[str]:
    """The DOC_PHRASES that `source` no longer holds (each must be dropped or updated)."""
    return [phrase for phrase, _ in DOC_PHRASES if phrase not in source]


def twin_names(source: str) -> dict[str, str]:
    """NAMES plus `aNAME` -> `NAME` for every `async def aNAME` of `source`."""
    names = dict(NAMES)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AsyncFunctionDef) and node.name not in KEEP_NAMES:
            match = _A_PREFIXED.fullmatch(node.name)
            if match:
                names[node.name] = match[1] + match[2]
    return names


def marked_lines(source: str) -> tuple[set[int], set[int]]:
    """Line numbers (1-based) left out of saver.py, and those a `# sync:` replaces."""
    async_only: set[int] = set()
    replaced: set[int] = set()
    inside = False
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if stripped == "# async-only: begin":
            inside = True
        if inside or line.rstrip().endswith("# async-only"):
            async_only.add(number)
        elif _SYNC_LINE.match(line):
            replaced.add(number)
        if stripped == "# async-only: end":
            if not inside:
                raise GenerateError(f"line {number}: `# async-only: end` without a begin")
            inside = False
    if inside:
        raise GenerateError("`# async-only: begin` without an end")
    return async_only, replaced


def apply_markers(text: str) -> str:
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("# async-only: begin", "# async-only: end"):
            inside = stripped.endswith("begin")
            continue
        if inside or line.rstrip().endswith("# async-only"):
            continue
        marked = _SYNC_ONLY.match(line) or _SYNC_LINE.match(line)
        out.append(marked[1] + marked[2] if marked else line)
    return "\n".join(out) + "\n"


def prose(text: str, names: dict[str, str], *, doc: bool = False) -> str:
    """Comment, string or docstring text (`doc`) with the async words made sync."""

    def rename(match: re.Match[str]) -> str:
        twin = names[match[0]]
        # "an AsyncConnection" -> "a Connection": \0 marks where the article may change
        vowel_lost = match[0][0] in "aA" and twin[0].lower() not in "aeiou"
        return "\0" + twin if vowel_lost else twin

    if names:
        text = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b").sub(rename, text)
    text = re.sub(r"\b([Aa])n(\s+`?(?:\w+\.)*)\0", r"\1\2", text).replace("\0", "")
    if doc:
        text = re.sub(r"\bawait\s+", "", text)
        text = re.sub(r"\basync\s+(?=(with|for|def)\b)", "", text)
        text = re.sub(r"\basyncio\b(?!\.)", "synchronous", text)
    return text


def docstring(raw: str, names: dict[str, str]) -> str:
    """A docstring's source text made sync: doctest examples as code, the rest as prose."""
    for phrase, twin in DOC_PHRASES:
        raw = raw.replace(phrase, twin)
    lines = raw.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        first = re.match(r"(\s*)>>> ?(.*)$", lines[i])
        if not first:
            out.append(prose(lines[i], names, doc=True))
            i += 1
            continue
        indent = first[1]
        code = [first[2]]
        i += 1
        while i < len(lines) and re.match(re.escape(indent) + r"\.\.\.( |$)", lines[i]):
            code.append(lines[i][len(indent) + 4 :])
            i += 1
        try:
            rewritten = _Rewriter("\n".join(code), names, top_level_await=True).rewrite()
        except SyntaxError:
            rewritten = prose("\n".join(code), names, doc=True)
        for k, line in enumerate(rewritten.split("\n")):
            out.append(f"{indent}{'>>>' if k == 0 else '...'}{' ' + line if line else ''}")
    return "\n".join(out)


class _Rewriter(ast.NodeVisitor):
    """Collects text edits at the places aio.py's syntax tree points to, then applies them."""

    def __init__(
        self,
        source: str,
        names: dict[str, str],
        *,
        skip: set[int] | None = None,
        top_level_await: bool = False,
    ) -> None:
        self.source = source
        self.names = names
        self.skip = skip or set()  # lines whose edits and errors do not count
        self.top_level_await = top_level_await
        self.edits: list[tuple[int, int, str]] = []
        self.errors: list[tuple[int, str]] = []
        self.docstrings: set[int] = set()
        self.parents: dict[ast.AST, ast.AST] = {}
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def rewrite(self) -> str:
        flags = ast.PyCF_ONLY_AST | (ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if self.top_level_await else 0)
        tree = compile(self.source, "<aio.py>", "exec", flags, dont_inherit=True)
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.visit(tree)
        self._comments()
        errors = [f"line {n}: {msg}" for n, msg in self.errors if n not in self.skip]
        if errors:
            raise GenerateError("no sync rule for:\n- " + "\n- ".join(errors))
        text = self.source
        kept = sorted(e for e in self.edits if self._line_of(e[0]) not in self.skip)
        for (start, end, _), (next_start, _, _) in itertools.pairwise(kept):
            if end > next_start:
                raise GenerateError(f"overlapping edits at line {self._line_of(start)}")
        for start, end, new in reversed(kept):
            text = text[:start] + new + text[end:]
        return text

    # -- positions ----------------------------------------------------------------------

    def _offset(self, lineno: int, col: int) -> int:
        # ast columns count UTF-8 bytes
        line = self.lines[lineno - 1] if lineno <= len(self.lines) else ""
        return self.starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    def _span(self, node: ast.AST) -> tuple[int, int]:
        start = self._offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self._offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def _line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)

    def _edit(self, start: int, end: int, new: str) -> None:
        if self.source[start:end] != new:
            self.edits.append((start, end, new))

    def _error(self, node: ast.AST, message: str) -> None:
        self.errors.append((node.lineno, message))  # type: ignore[attr-defined]

    def _rename(self, node: ast.AST, name: str, start: int) -> None:
        """The identifier `name` at `start`: renamed by NAMES, or an error if it looks async."""
        if name in self.names:
            self._edit(start, start + len(name), self.names[name])
        elif _ASYNC_NAME.match(name):
            self._error(node, f"{name!r}: add its sync name to NAMES in tools/async_to_sync.py")

    def _drop_keyword(self, node: ast.AST, keyword: str) -> None:
        start = self._span(node)[0]
        match = re.compile(keyword + r"\b\s*").match(self.source, start)
        if match:
            self._edit(start, match.end(), "")

    # -- definitions --------------------------------------------------------------------

    def visit_Module(self, node: ast.Module) -> None:
        self._mark_docstring(node.body)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._definition(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._definition(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._drop_keyword(node, "async")
        self._definition(node)

    def _definition(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        keyword = re.compile(r"(async\s+)?(def|class)\s+").match(self.source, self._span(node)[0])
        if keyword:
            self._rename(node, node.name, keyword.end())
        self._mark_docstring(node.body)
        self.generic_visit(node)

    def _mark_docstring(self, body: list[ast.stmt]) -> None:
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            self.docstrings.add(id(body[0].value))

    # -- syntax -------------------------------------------------------------------------

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self._drop_keyword(node, "async")
        self.generic_visit(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self._drop_keyword(node, "async")
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        if node.is_async:
            # a comprehension has no position: `async for` ends where its target starts
            target = self._span(node.target)[0]
            match = re.search(r"\basync\s+(?=for\s*$)", self.source[:target])
            if match:
                self._edit(match.start(), match.end(), "")
        self.generic_visit(node)

    def visit_Await(self, node: ast.Await) -> None:
        start, end = self._span(node)
        self._drop_keyword(node, "await")
        parent = self.parents.get(node)
        # `(await x).y` -> `x.y`: the parentheses only held the await
        primary = (isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is node) or (
            isinstance(parent, ast.Call) and parent.func is node
        )
        if (
            primary
            and isinstance(node.value, (ast.Call, ast.Attribute, ast.Name, ast.Subscript))
            and self.source[start - 1 : start] == "("
            and self.source[end : end + 1] == ")"
        ):
            self._edit(start - 1, start, "")
            self._edit(end, end + 1, "")
        self.generic_visit(node)

    # -- names --------------------------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "asyncio":
            self._error(node, "this use of asyncio (see ASYNCIO_NAMES; or mark it async-only)")
            return
        self._rename(node, node.id, self._span(node)[0])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        start, end = self._span(node)
        if isinstance(node.value, ast.Name) and node.value.id == "asyncio":
            if node.attr in ASYNCIO_NAMES:
                self._edit(start, end, ASYNCIO_NAMES[node.attr])
            else:
                self._error(node, f"asyncio.{node.attr} (add it to ASYNCIO_NAMES, or mark it)")
            return
        self._rename(node, node.attr, end - len(node.attr))
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        start = self._span(node)[0]
        if node.name == "asyncio":
            self._edit(start, start + len("asyncio"), "threading")
        else:
            self._rename(node, node.name, start)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "asyncio"
            and func.attr == "to_thread"
            and node.args
        ):
            self._call_to_thread(node)
            return
        if isinstance(func, ast.Attribute) and func.attr == "set_autocommit":
            self._set_autocommit(node, func)
            return
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg == "asynchronous" and isinstance(value, ast.Constant) and value.value:
                self._drop_argument(node, keyword)
        self.generic_visit(node)

    def _call_to_thread(self, node: ast.Call) -> None:
        # `asyncio.to_thread(f, a, k=b)` -> `f(a, k=b)`
        function, rest = node.args[0], [*node.args[1:], *node.keywords]
        start, end = self._span(node)
        f_start, f_end = self._span(function)
        self._edit(start, f_start, "")
        if rest:
            self._edit(f_end, self._span(rest[0])[0], "(")
        else:
            self._edit(f_end, end, "()")
        for child in [function, *rest]:
            self.visit(child)

    def _set_autocommit(self, node: ast.Call, func: ast.Attribute) -> None:
        # psycopg: `await conn.set_autocommit(x)` -> `conn.autocommit = x`
        awaited = self.parents.get(node)
        statement = self.parents.get(awaited) if awaited else None
        if not (isinstance(awaited, ast.Await) and isinstance(statement, ast.Expr)):
            self._error(node, "set_autocommit() other than as a statement")
            return
        if len(node.args) != 1 or node.keywords:
            self._error(node, "set_autocommit() with other than one argument")
            return
        value_start, value_end = self._span(node.args[0])
        self._edit(self._span(func)[1] - len(func.attr), value_start, "autocommit = ")
        self._edit(value_end, self._span(node)[1], "")
        self.visit(func.value)
        self.visit(node.args[0])

    def _drop_argument(self, call: ast.Call, argument: ast.keyword) -> None:
        # the argument with the comma before it (or after it, when it comes first)
        others = sorted(
            (self._span(a) for a in [*call.args, *call.keywords] if a is not argument),
        )
        start, end = self._span(argument)
        before = [span for span in others if span[1] <= start]
        after = [span for span in others if span[0] >= end]
        if before:
            self._edit(before[-1][1], end, "")
        elif after:
            self._edit(start, after[0][0], "")
        else:
            self._edit(start, end, "")

    # -- text ---------------------------------------------------------------------------

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str):
            return
        start, end = self._span(node)
        raw = self.source[start:end]
        if id(node) in self.docstrings:
            self._edit(start, end, docstring(raw, self.names))
        else:
            self._edit(start, end, prose(raw, self.names))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        # before Python 3.12 the parts of an f-string have no reliable positions
        start, end = self._span(node)
        self._edit(start, end, prose(self.source[start:end], self.names))

    def _comments(self) -> None:
        tokens = tokenize.generate_tokens(io.StringIO(self.source).readline)
        for token in tokens:
            if token.type == tokenize.COMMENT and not _MARKER.match(token.string):
                start = self.starts[token.start[0] - 1] + token.start[1]
                self._edit(start, start + len(token.string), prose(token.string, self.names))


# -- checks ---------------------------------------------------------------------------------


Definition = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _definitions(
    body: list[ast.stmt], prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Definition]]:
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield (*prefix, node.name), node
            yield from _definitions(node.body, (*prefix, node.name))
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.AsyncWith)):
            yield from _definitions(node.body, prefix)


def twin_problems(async_source: str, sync_source: str) -> list[str]:
    """What in `sync_source` is not the sync twin of `async_source`; empty when all is.

    Every class and function of the async source (outside `# async-only`) has a
    twin under its sync name with a docstring when it has one; no `async`,
    `await`, `Async*` name or `aNAME` of the async source is left in the sync
    code or in its docstrings.
    """
    names = twin_names(async_source)
    renamed = {old for old in names if old not in NAMES}  # the aNAME methods
    async_only, _ = marked_lines(async_source)
    problems: list[str] = []
    sync_tree = ast.parse(sync_source)
    sync_defs = dict(_definitions(sync_tree.body))
    for path, definition in _definitions(ast.parse(async_source).body):
        if definition.lineno in async_only:
            continue
        twin_path = tuple(names.get(part, part) for part in path)
        twin = sync_defs.get(twin_path)
        label = ".".join(path)
        if twin is None:
            problems.append(f"{label} has no sync twin {'.'.join(twin_path)}")
        elif (ast.get_docstring(definition) is None) != (ast.get_docstring(twin) is None):
            problems.append(f"{label} and its twin differ in having a docstring")
    leftover = re.compile("|".join([_LEFTOVER.pattern, *(rf"\b{n}\b" for n in renamed)]))
    documented: list[tuple[tuple[str, ...], ast.Module | Definition]] = [((), sync_tree)]
    for path, owner in [*documented, *_definitions(sync_tree.body)]:
        label = ".".join(path) or "the module"
        if isinstance(owner, ast.AsyncFunctionDef):
            problems.append(f"{label} is still `async def`")
        if path and (path[-1] in renamed or _ASYNC_NAME.match(path[-1])):
            problems.append(f"{label} keeps an async name")
        found = leftover.search(ast.get_docstring(owner, clean=False) or "")
        if found:
            problems.append(f"the docstring of {label} says {found[0]!r}")
    for node in ast.walk(sync_tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, (ast.Await, ast.AsyncWith, ast.AsyncFor)) or (
            isinstance(node, ast.comprehension) and node.is_async
        ):
            problems.append(f"line {line}: {type(node).__name__} left")
        name = node.name if isinstance(node, ast.alias) else getattr(node, "attr", None)
        name = name or getattr(node, "id", None)
        if isinstance(name, str) and (
            name in renamed or name == "asyncio" or _ASYNC_NAME.match(name)
        ):
            problems.append(f"line {line}: {name!r} left")
    return problems


# -- formatting -----------------------------------------------------------------------------


def format_python(text: str) -> str:
    """`text` with ruff's import order and format, under the project's ruff settings."""
    text = _ruff(["check", "--fix", "--select", "I", "--exit-zero", "--quiet"], text)
    return _ruff(["format", "--quiet"], text)


def _ruff(args: list[str], text: str) -> str:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        raise GenerateError("ruff not found: install the project's `lint` extra")
    done = subprocess.run(
        [exe, *args, "--stdin-filename", str(TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise GenerateError(f"ruff {args[0]} failed: {done.stderr.strip()}")
    return done.stdout


def main(argv: list[str]) -> int:
    source = SOURCE.read_text(encoding="utf-8")
    try:
        stale = stale_phrases(source)
        if stale:
            raise GenerateError(f"DOC_PHRASES entries not found: {stale}")
        expected = generate(source)
    except GenerateError as exc:
        print(f"{SOURCE.relative_to(ROOT)}: {exc}", file=sys.stderr)
        return 1
    if "--check" in argv:
        if TARGET.read_text(encoding="utf-8") != expected:
            print(f"{TARGET.relative_to(ROOT)} is stale: run `make sync-twin`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(expected, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

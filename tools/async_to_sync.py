"""Generate the sync drivers of src/pgcheckpoint/drivers/ from their async sources.

Each sync module there is the twin of an async one (`runner.py` of
`runner_async.py`, `saver.py` of `saver_async.py`, `locks.py` of
`locks_async.py`): the same code, one awaiting. The async file is the source;
the sync one is written by this tool, and a unit test fails when a checked-in
twin differs from what its source generates. Edit the async file, then run
`make sync-twin`:

    python tools/async_to_sync.py            # rewrite the sync twins
    python tools/async_to_sync.py --check    # exit 1 if one is stale

The rewrite walks the source's syntax tree and edits its text at the places
the tree points to, so comments and layout survive; ruff then sorts the
imports and formats the result. The rules, and no others:

- `async def`, `async with`, `async for` lose `async`; `await` goes (with the
  parentheses of `(await x).y`).
- Every `async def aNAME` becomes `def NAME`, and every use of `aNAME` follows.
- Names in NAMES are renamed (`AsyncConnection` -> `Connection`), and so are
  the async names of `drivers/_acompat.py` that have a twin there (`ALock` ->
  `Lock`, `atry_acquire` -> `try_acquire`); a name that starts with `Async` or
  `async` and has no twin stops the tool.
- An import of a module `x_async` becomes one of `x`.
- psycopg_pool: the keyword argument `asynchronous=True` goes.
- Docstrings, comments and strings get the same renames ("an AsyncConnection"
  -> "a Connection"); doctest examples are rewritten as code; in docstrings
  "asyncio" becomes "synchronous" and the sentences of DOC_PHRASES are swapped.

A source uses no asyncio directly (the tool stops on it): what differs between
the two kinds beyond these rules lives in `_acompat.py`, in both forms, so a
source needs no comment markers. The result is checked before it is written
(`twin_problems`): no `async`, no `await`, no `aNAME` left, a twin with a
docstring for every definition.
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
DRIVERS = ROOT / "src" / "pgcheckpoint" / "drivers"
# (async source, sync twin)
PAIRS = [
    (DRIVERS / f"{name}_async.py", DRIVERS / f"{name}.py")
    for name in ("runner", "locks", "saver", "store")
]
COMPAT = DRIVERS / "_acompat.py"

# Async names and their sync twins, in code and in prose.
NAMES = {
    "AbstractAsyncContextManager": "AbstractContextManager",
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncCrossCalls": "CrossCalls",
    "AsyncCursor": "Cursor",
    "AsyncIterator": "Iterator",
    "AsyncPipeline": "Pipeline",
    "AsyncPostgresSaver": "PostgresSaver",
    "AsyncRunner": "Runner",
    "AsyncPostgresStore": "PostgresStore",
    "AsyncStoreFront": "StoreFront",
    "aembed_documents": "embed_documents",  # store_front's
    "aembed_query": "embed_query",
    "asynccontextmanager": "contextmanager",
    "ainvoke": "invoke",  # a compiled graph's
}
# Docstring text with no mechanical twin, per source: (async text, sync text); each must occur.
DOC_PHRASES: dict[str, list[tuple[str, str]]] = {
    "store_async.py": [
        (
            "`ttl` settings.\n"
            "    Its sync methods (`get`, `put`, ...) work from other threads while the\n"
            "    event loop it was created on runs.",
            "`ttl` settings.\n"
            "    Its async methods run the sync batch in a worker thread.",
        ),
    ],
    "saver_async.py": [
        (
            "Drop-in for `langgraph.checkpoint.postgres.aio.AsyncPostgresSaver`. Its\n"
            "    sync methods (`get_tuple`, `list`, ...) work from other threads while the\n"
            "    event loop it was created on runs.",
            "Drop-in for `langgraph.checkpoint.postgres.PostgresSaver`: the same\n"
            "    constructor, `from_conn_string` and `setup()`.",
        ),
    ],
}
# `async def` names whose leading `a` is part of the word, not the twin prefix.
KEEP_NAMES: frozenset[str] = frozenset()

_ASYNC_NAME = re.compile(r"_*(Async|async)")
_A_PREFIXED = re.compile(r"(_*)a([a-z]\w*)")
# in a sync docstring: code that awaits, or an async name ("the async saver" is fine)
_LEFTOVER = re.compile(r"\bawait\b|\basync\s+(with|for|def)\b|\basyncio\b|\bAsync[A-Z]\w*")


class GenerateError(Exception):
    """A source holds something the rules cannot turn into sync code."""


def header(source: Path) -> str:
    """The comment that opens a generated twin."""
    return (
        f"# Generated from {source.name} by tools/async_to_sync.py: edit {source.name} and\n"
        "# run `make sync-twin`; a unit test checks that this file matches.\n"
    )


def compat_names(text: str | None = None) -> dict[str, str]:
    """The async names `_acompat.py` defines with a sync twin beside them: `ALock` -> `Lock`."""
    tree = ast.parse(COMPAT.read_text(encoding="utf-8") if text is None else text)
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {
        name: name[1:]
        for name in defined
        if name[:1] in "aA"
        and name[1:] in defined
        and name[1:2].isalpha()
        and (name[1:2].isupper() == (name[0] == "A"))
    }


def generate(source: str, *, name: str = "", phrases: list[tuple[str, str]] | None = None) -> str:
    """The text of the sync twin of `source` (the text of an async source named `name`)."""
    names = twin_names(source)
    text = _Rewriter(source, names, phrases=phrases or []).rewrite()
    text = format_python(header(Path(name or "source_async.py")) + text)
    problems = twin_problems(source, text)
    if problems:
        raise GenerateError("the generated sync twin is wrong:\n- " + "\n- ".join(problems))
    return text


def stale_phrases(source: str, phrases: list[tuple[str, str]]) -> list[str]:
    """The DOC_PHRASES of a source that it no longer holds (each must be dropped or updated)."""
    return [phrase for phrase, _ in phrases if phrase not in source]


def twin_names(source: str) -> dict[str, str]:
    """NAMES, the `_acompat` twins, and `aNAME` -> `NAME` for each `async def aNAME` of
    `source` and of the other sources (which it may import)."""
    names = {**NAMES, **compat_names()}
    texts = [source, *(path.read_text(encoding="utf-8") for path, _ in PAIRS if path.exists())]
    for text in texts:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.AsyncFunctionDef) and node.name not in KEEP_NAMES:
                match = _A_PREFIXED.fullmatch(node.name)
                if match:
                    names[node.name] = match[1] + match[2]
    return names


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
    text = re.sub(r"\b(\w+)_async\b", r"\1", text)
    if doc:
        text = re.sub(r"\bawait\s+", "", text)
        text = re.sub(r"\basync\s+(?=(with|for|def)\b)", "", text)
        text = re.sub(r"\basyncio\b(?!\.)", "synchronous", text)
    return text


def docstring(raw: str, names: dict[str, str], phrases: list[tuple[str, str]]) -> str:
    """A docstring's source text made sync: doctest examples as code, the rest as prose."""
    for phrase, twin in phrases:
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
        phrases: list[tuple[str, str]] | None = None,
        top_level_await: bool = False,
    ) -> None:
        self.source = source
        self.names = names
        self.phrases = phrases or []
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
        errors = [f"line {n}: {msg}" for n, msg in self.errors]
        if errors:
            raise GenerateError("no sync rule for:\n- " + "\n- ".join(errors))
        text = self.source
        kept = sorted(self.edits)
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
        self._rename(node, node.id, self._span(node)[0])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        end = self._span(node)[1]
        self._rename(node, node.attr, end - len(node.attr))
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.partition(".")[0] == "asyncio":
                self._error(node, "asyncio: use (or add) its twin names in drivers/_acompat.py")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module.partition(".")[0] == "asyncio":
            self._error(node, "asyncio: use (or add) its twin names in drivers/_acompat.py")
        if module.endswith("_async"):
            # `from .runner_async import` -> `from .runner import`
            start = self._span(node)[0]
            found = re.compile(r"from\s+\.*" + re.escape(module)).match(self.source, start)
            if found:
                self._edit(found.end() - len("_async"), found.end(), "")
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        self._rename(node, node.name, self._span(node)[0])

    def visit_Call(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg == "asynchronous" and isinstance(value, ast.Constant) and value.value:
                self._drop_argument(node, keyword)
        self.generic_visit(node)

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
            self._edit(start, end, docstring(raw, self.names, self.phrases))
        else:
            self._edit(start, end, prose(raw, self.names))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        # before Python 3.12 the parts of an f-string have no reliable positions
        start, end = self._span(node)
        self._edit(start, end, prose(self.source[start:end], self.names))

    def _comments(self) -> None:
        tokens = tokenize.generate_tokens(io.StringIO(self.source).readline)
        for token in tokens:
            if token.type == tokenize.COMMENT:
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

    Every class and function of the async source has a
    twin under its sync name with a docstring when it has one; no `async`,
    `await`, `Async*` name or `aNAME` of the async source is left in the sync
    code or in its docstrings.
    """
    names = twin_names(async_source)
    renamed = {old for old in names if old not in NAMES}  # the aNAME methods
    problems: list[str] = []
    sync_tree = ast.parse(sync_source)
    sync_defs = dict(_definitions(sync_tree.body))
    for path, definition in _definitions(ast.parse(async_source).body):
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
    """`text` with ruff's import order, sorted `__all__` and format (the project's settings)."""
    text = _ruff(["check", "--fix", "--select", "I,RUF022", "--exit-zero", "--quiet"], text)
    return _ruff(["format", "--quiet"], text)


def _ruff(args: list[str], text: str) -> str:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        raise GenerateError("ruff not found: install the project's `lint` extra")
    done = subprocess.run(
        [exe, *args, "--stdin-filename", str(DRIVERS / "generated.py"), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise GenerateError(f"ruff {args[0]} failed: {done.stderr.strip()}")
    return done.stdout


def twin_of(source: Path) -> str:
    """What the sync twin of the async file `source` must hold."""
    text = source.read_text(encoding="utf-8")
    phrases = DOC_PHRASES.get(source.name, [])
    stale = stale_phrases(text, phrases)
    if stale:
        raise GenerateError(f"DOC_PHRASES entries not found: {stale}")
    return generate(text, name=source.name, phrases=phrases)


def main(argv: list[str]) -> int:
    status = 0
    for source, target in PAIRS:
        try:
            expected = twin_of(source)
        except GenerateError as exc:
            print(f"{source.relative_to(ROOT)}: {exc}", file=sys.stderr)
            status = 1
            continue
        if "--check" in argv:
            if target.read_text(encoding="utf-8") != expected:
                print(f"{target.relative_to(ROOT)} is stale: run `make sync-twin`", file=sys.stderr)
                status = 1
            continue
        target.write_text(expected, encoding="utf-8")
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

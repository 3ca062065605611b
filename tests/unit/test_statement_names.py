"""Every SQL statement the code names exists in `sql/queries/`, with the parameters it is given.

The names are read from the package's source: the first argument of every
`Stmt(...)` (each string in it, so `Stmt("a" if x else "b")` counts both), and
every constant subscript of something called `queries` (`self.queries["name"]`).
An f-string name (`Stmt(f"rotation_{table}_page")`) becomes a pattern that at
least one statement must match.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import pgcheckpoint
from pgcheckpoint.statements.queries import Queries, statement_names

PACKAGE = Path(pgcheckpoint.__file__).resolve().parent
SOURCES = sorted(PACKAGE.rglob("*.py"))
_PLACEHOLDER = re.compile(r"%\((\w+)\)[sbt]")  # auto, binary, text


def _names(node: ast.AST) -> list[str]:
    """The statement names an expression can evaluate to, f-strings as regex patterns.

    Names are `\\w+`, so a plain name is also the pattern that matches only itself.
    """
    if isinstance(node, ast.JoinedStr):
        return [
            "".join(
                str(part.value) if isinstance(part, ast.Constant) else r"\w+"
                for part in node.values
            )
        ]
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    return [name for child in ast.iter_child_nodes(node) for name in _names(child)]


def _is_named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (
        isinstance(node, ast.Attribute) and node.attr == name
    )


def used_statements() -> Iterator[tuple[str, int, str, ast.expr | None]]:
    """(module, line, name pattern, params expression or None) for every use."""
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        module = str(path.relative_to(PACKAGE))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _is_named(node.func, "Stmt"):
                name_arg = node.args[0] if node.args else None
                params = node.args[1] if len(node.args) > 1 else None
                for kw in node.keywords:
                    if kw.arg == "name":
                        name_arg = kw.value
                    elif kw.arg == "params":
                        params = kw.value
                if name_arg is None:
                    continue
                for name in _names(name_arg):
                    yield module, node.lineno, name, params
            elif (
                isinstance(node, ast.Subscript)
                and _is_named(node.value, "queries")
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)
            ):
                yield module, node.lineno, node.slice.value, None


USES = list(used_statements())


def test_the_scan_finds_the_core_statements() -> None:
    names = {name for _, _, name, _ in USES}
    # a scan that silently found nothing would make the next test pass vacuously
    assert {"put_checkpoint", "get_latest_checkpoint", "list_checkpoints"} <= names
    assert {"upsert_writes", "insert_writes", "upsert_write", "insert_write"} <= names


@pytest.mark.parametrize(
    ("module", "line", "pattern"), [(m, line, n) for m, line, n, _ in USES], ids=lambda v: str(v)
)
def test_every_named_statement_exists(module: str, line: int, pattern: str) -> None:
    matching = [name for name in statement_names() if re.fullmatch(pattern, name)]
    assert matching, f"{module}:{line} runs {pattern!r}, which sql/queries/ lacks"


def test_literal_parameters_cover_the_statement_placeholders() -> None:
    queries = Queries()
    missing = {}
    for module, line, name, params in USES:
        if not isinstance(params, ast.Dict) or any(k is None for k in params.keys):
            continue  # built elsewhere: the integration tests run those
        if name not in queries:
            continue  # an f-string pattern, or a name the test above reports
        given = {k.value for k in params.keys if isinstance(k, ast.Constant)}
        needed = set(_PLACEHOLDER.findall(queries[name]))
        if needed - given:
            missing[f"{module}:{line} {name}"] = sorted(needed - given)
    assert not missing


def test_every_statement_renders_for_a_schema_without_leftover_placeholders() -> None:
    queries = Queries("tenant a")
    for name in statement_names():
        text = queries[name]
        assert "{schema}" not in text, name
        assert not re.search(r"\{\w+\}", text), f"{name} has an unresolved fragment"
        if "pgc_" in text:
            assert '"tenant a".pgc_' in text, name

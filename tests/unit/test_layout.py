"""The package's folders are its layers: imports run one way, and no module grows too large.

Read from the source (nothing is imported): every import counts, those inside
functions and under `TYPE_CHECKING` too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pgcheckpoint

PACKAGE = Path(pgcheckpoint.__file__).resolve().parent
# From the bottom up: a module may import from its own layer and those before it.
LAYERS = [
    ("errors", "ops", "validate", "commands", "resources"),
    ("telemetry",),
    ("statements",),
    ("codec",),
    ("core",),
    ("store",),
    ("schema",),
    ("maintenance",),
    ("drivers",),
    ("threadview",),
    ("cli", "contrib", "agent_server", "__main__"),
]
MAX_LINES = 600
MAX_ROOT_MODULES = 8
# what the wheel carries inside the package (pyproject's force-include): the
# Alembic revisions and the SQL files, data beside the modules, not modules
SHIPPED_DATA = {"_migrations", "_sql"}


def _sources() -> list[Path]:
    """The package's modules, as installed or in src/."""
    return [
        p for p in PACKAGE.rglob("*.py") if not SHIPPED_DATA & set(p.relative_to(PACKAGE).parts)
    ]


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base[: len(base) - node.level + 1]
                module = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            candidates = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            # a module and its own package or subpackages are one room
            related = name.startswith(candidate + ".") or candidate.startswith(name + ".")
            if candidate and candidate != name and not related:
                found.add(candidate)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module(p): p for p in _sources()}
    known = set(paths)
    return {name: _imports(path, name, known) for name, path in paths.items()}


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for index, names in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS")


def test_imports_run_from_each_layer_to_those_before_it() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in _graph().items()
        if module != "pgcheckpoint"  # the public names gather every layer
        for target in targets
        if target != "pgcheckpoint" and _layer(target) > _layer(module)
    )
    assert upward == []


def test_no_module_imports_itself_round_about() -> None:
    graph = _graph()
    circles = []
    for start in graph:
        seen: set[str] = set()
        stack = [(start, [start])]
        while stack:
            module, path = stack.pop()
            for target in graph.get(module, ()):
                if target == start:
                    circles.append(" -> ".join([*path, target]))
                elif target not in seen:
                    seen.add(target)
                    stack.append((target, [*path, target]))
    assert circles == []


def test_hand_written_modules_stay_small_and_the_root_holds_few() -> None:
    large = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        if not text.startswith("# Generated from") and text.count("\n") > MAX_LINES:
            large.append(str(path.relative_to(PACKAGE)))
    assert large == []
    root = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert len(root) <= MAX_ROOT_MODULES, root

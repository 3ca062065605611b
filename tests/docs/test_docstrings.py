"""The examples in the package's docstrings run, against the installed package.

The API reference (docs/reference) is read from these docstrings, so an example
that names a function that moved, or prints what the code no longer prints, is
a wrong page of the docs. Examples that need a database or a saver in hand say
`# doctest: +SKIP`; the others run here, module by module.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import pgcheckpoint


def _module_names() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(pgcheckpoint.__path__, prefix="pgcheckpoint.")
        if not info.name.endswith("__main__")
    )


def test_the_package_has_examples() -> None:
    examples = 0
    for name in _module_names():
        module = importlib.import_module(name)
        for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
            examples += sum(1 for ex in test.examples if not ex.options.get(doctest.SKIP, False))
    # what the run below checks (347 examples when this test was written)
    assert examples > 300


@pytest.mark.parametrize("name", _module_names())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    assert "site-packages" in (module.__file__ or ""), module.__file__
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures: list[str] = []
    for test in finder.find(module, name):
        out: list[str] = []
        result = runner.run(test, out=out.append, clear_globs=True)
        if result.failed:
            failures.append("".join(out))
    assert not failures, "\n".join(failures)

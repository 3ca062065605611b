"""After a run of the official suite, a line per module: how many of its cases pass."""

from __future__ import annotations

import pytest

from .expected import expected_difference
from .suite import Outcome

RESULTS = pytest.StashKey[dict[str, dict[str, Outcome]]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    results = terminalreporter.config.stash.get(RESULTS, {})
    if not results:
        return
    terminalreporter.section("the official saver's tests against pgcheckpoint")
    total = passed = 0
    for module, found in results.items():
        ok = sum(o.result == "passed" for o in found.values())
        listed = sum(expected_difference(case) is not None for case in found)
        terminalreporter.line(
            f"{module}: {ok} of {len(found)} pass, {listed} listed in expected.py"
        )
        total, passed = total + len(found), passed + ok
    terminalreporter.line(f"in all: {passed} of {total} pass")

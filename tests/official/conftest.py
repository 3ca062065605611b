"""After a run of the official suite, a line per module: how many of its cases pass."""

from __future__ import annotations

import pytest

from .expected import expected_difference, uses_only_public_api
from .suite import STORE_FILES, Outcome

RESULTS = pytest.StashKey[dict[str, dict[str, Outcome]]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    results = terminalreporter.config.stash.get(RESULTS, {})
    savers = {module: found for module, found in results.items() if module not in STORE_FILES}
    stores = {module: found for module, found in results.items() if module in STORE_FILES}
    if savers:
        terminalreporter.section("the official saver's tests against pgcheckpoint")
        _report(terminalreporter, savers)
    if stores:
        terminalreporter.section("the official store's tests against pgcheckpoint")
        _report(terminalreporter, stores)
        public = {
            case: outcome
            for found in stores.values()
            for case, outcome in found.items()
            if uses_only_public_api(case)
        }
        ok = sum(o.result == "passed" for o in public.values())
        listed = sum(expected_difference(case) is not None for case in public)
        terminalreporter.line(
            f"of those using only the public API: {ok} of {len(public)} pass, {listed} listed"
        )


def _report(
    terminalreporter: pytest.TerminalReporter, results: dict[str, dict[str, Outcome]]
) -> None:
    total = passed = 0
    for module, found in results.items():
        ok = sum(o.result == "passed" for o in found.values())
        listed = sum(expected_difference(case) is not None for case in found)
        terminalreporter.line(
            f"{module}: {ok} of {len(found)} pass, {listed} listed in expected.py"
        )
        total, passed = total + len(found), passed + ok
    terminalreporter.line(f"in all: {passed} of {total} pass")

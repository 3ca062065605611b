"""The official saver's and store's own tests pass against pgcheckpoint, but for the cases listed.

Issue 32 holds pgcheckpoint to the tests of `langgraph-checkpoint-postgres`
3.2.0 (`test_sync.py`, `test_async.py`, `test_prune.py`,
`test_delta_pagination.py`, `test_conformance_delta.py`,
`test_delta_plain_value_seed.py`; 124 cases without the shallow savers,
which pgcheckpoint does not have) with the two savers' imports swapped, and
issue 33 to its store's (`test_store.py`, `test_async_store.py`; 299 cases)
with the two stores' imports swapped. `suite.py` fetches them (pip, into a
cache outside the checkout; the tests skip when it cannot) and runs each
module in a subprocess on a fresh database: of the test server for the
saver's, of the vector server (`vector_db_dsn`'s: pgvector 0.7+) for the
store's. Each case must pass, or fail the way `expected.py` says and
docs/moving.md explains. `make official-tests` runs this module alone.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from . import expected, suite
from .conftest import RESULTS

ROOT = Path(__file__).resolve().parents[2]
MOVING = ROOT / "docs" / "moving.md"
DOC_SECTION = "## The official saver's tests"
STORE_DOC_SECTION = "## The official store's tests"
# the modules whose helpers read the official tables, and the plugin that has them read ours
PLUGINS = {
    "test_prune.py": "own_tables",
    "test_store.py": "own_store_table",
    "test_async_store.py": "own_store_table",
}


@pytest.fixture(scope="module")
def sdist() -> Path:
    try:
        return suite.fetch_sdist()
    except suite.Unavailable as exc:
        pytest.skip(f"the official tests cannot be had: {exc}")


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("module", list(suite.FILES))
def test_the_official_module_passes_but_for_the_listed_cases(
    module: str,
    sdist: Path,
    tmp_path: Path,
    _databases: Any,
    request: pytest.FixtureRequest,
) -> None:
    found = _run(module, sdist, tmp_path, _databases, request)
    assert len(found) == suite.FILES[module], (
        f"{module} ran {len(found)} cases, not {suite.FILES[module]}: {sorted(found)}"
    )
    problems = _unexpected(module, found)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("module", list(suite.STORE_FILES))
def test_the_official_store_module_passes_but_for_the_listed_cases(
    module: str,
    sdist: Path,
    tmp_path: Path,
    _vector_databases: Any,
    request: pytest.FixtureRequest,
) -> None:
    found = _run(module, sdist, tmp_path, _vector_databases, request)
    assert len(found) == suite.STORE_FILES[module], (
        f"{module} ran {len(found)} cases, not {suite.STORE_FILES[module]}: {sorted(found)}"
    )
    problems = _unexpected(module, found)
    public = [case for case in found if expected.uses_only_public_api(case)]
    listed = [case for case in public if expected.expected_difference(case) is not None]
    if (len(public), len(listed)) != expected.STORE_PUBLIC[module]:
        problems.append(
            f"{module} has {len(public)} cases that use only the public API, {len(listed)} "
            f"of them listed, where expected.py's STORE_PUBLIC says {expected.STORE_PUBLIC[module]}"
        )
    assert not problems, "\n".join(problems)


def _run(
    module: str, sdist: Path, tmp_path: Path, databases: Any, request: pytest.FixtureRequest
) -> dict[str, suite.Outcome]:
    """Each case of the official `module`, run on a fresh database of `databases`' server."""
    root = suite.prepare(sdist, tmp_path)
    # the database the official tests share (DEFAULT_URI); each makes its own besides
    shared = databases.new_name()
    databases.create(shared, "template0")
    try:
        suite.point_conftest(root, databases.server_dsn, shared)
        # a URI that names no database connects to PGDATABASE's (the tests create theirs there)
        server_db = str(conninfo_to_dict(databases.server_dsn).get("dbname") or "postgres")
        found = suite.run(root, module, plugin=PLUGINS.get(module), env={"PGDATABASE": server_db})
    finally:
        databases.drop(shared)
    request.config.stash.setdefault(RESULTS, {})[module] = found
    return found


def _unexpected(module: str, found: dict[str, suite.Outcome]) -> list[str]:
    """How `found` differs from expected.py: each line a case or an entry that does not fit."""
    problems = []
    for case_id, outcome in sorted(found.items()):
        difference = expected.expected_difference(case_id)
        first_line = outcome.message.strip().splitlines()[0] if outcome.message.strip() else ""
        if difference is None and outcome.result != "passed":
            problems.append(f"{case_id} {outcome.result}: {first_line}")
        elif difference is not None and outcome.result == "passed":
            problems.append(
                f"{case_id} passes now: take it out of tests/official/expected.py and "
                "docs/moving.md"
            )
        elif difference is not None and difference.shows not in outcome.message:
            problems.append(
                f"{case_id} fails, but not as expected.py says ({difference.shows!r}, "
                f"{difference.reason}): {outcome.message[:500]}"
            )
    functions = {_function(case_id) for case_id in found}
    listed = {**expected.DIFFERENCES, **expected.STORE_DIFFERENCES}.get(module, {})
    for name in listed:
        if _function(f"{module}::{name}") not in functions:
            problems.append(f"expected.py lists {module}::{name}, which the suite no longer has")
    for name in expected.STORE_PRIVATE.get(module, {}):
        if f"{module}::{name}" not in functions:
            problems.append(f"expected.py's STORE_PRIVATE names {module}::{name}, which is gone")
    return problems


def _function(case_id: str) -> str:
    """`test_x.py::name` of `test_x.py::name[param]`."""
    return case_id.split("[", 1)[0]


def test_the_listed_cases_are_the_ones_docs_moving_md_names() -> None:
    saver = {name.split("[", 1)[0] for names in expected.DIFFERENCES.values() for name in names}
    saver.add(expected.CONFORMANCE_CASE.split("::", 1)[1])
    store = {
        name.split("[", 1)[0] for names in expected.STORE_DIFFERENCES.values() for name in names
    }
    for heading, listed in ((DOC_SECTION, saver), (STORE_DOC_SECTION, store)):
        named = _named_in(heading)
        assert named == listed, (
            f"docs/moving.md's {heading!r} names {sorted(named - listed)} that expected.py "
            f"does not list, and does not name {sorted(listed - named)}"
        )


def _named_in(heading: str) -> set[str]:
    """The test functions that a section of docs/moving.md names in backquotes."""
    text = MOVING.read_text()
    assert f"\n{heading}\n" in text, f"docs/moving.md has no section {heading!r}"
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`(test_\w+)`", section))


def test_at_most_seven_of_the_stores_public_api_cases_are_listed() -> None:
    """Issue 33: at least 245 of the 252 cases that use only the public API pass."""
    public = sum(cases for cases, _ in expected.STORE_PUBLIC.values())
    listed = sum(listed for _, listed in expected.STORE_PUBLIC.values())
    assert expected.STORE_PUBLIC.keys() == suite.STORE_FILES.keys()
    assert public == expected.STORE_PUBLIC_CASES
    assert listed <= expected.STORE_PUBLIC_LISTED_AT_MOST


def test_only_the_savers_imports_change() -> None:
    source = (
        "import pytest\n"
        "from langgraph.checkpoint.postgres.aio import (\n"
        "    AsyncPostgresSaver,\n"
        "    AsyncShallowPostgresSaver,\n"
        ")\n"
        "from langgraph.checkpoint.postgres.base import PRUNE_HEADS_SQL\n"
        "from langgraph.checkpoint.postgres import PostgresSaver\n"
        "x = AsyncPostgresSaver\n"
    )
    assert suite.swap_savers(source) == (
        "import pytest\n"
        "from langgraph.checkpoint.postgres.aio import AsyncShallowPostgresSaver\n"
        "from pgcheckpoint import AsyncPostgresSaver\n"
        "from langgraph.checkpoint.postgres.base import PRUNE_HEADS_SQL\n"
        "from pgcheckpoint import PostgresSaver\n"
        "x = AsyncPostgresSaver\n"
    )
    with pytest.raises(AssertionError, match="imports no official saver or store"):
        suite.swap_savers("from langgraph.checkpoint.postgres.base import X\n")


def test_only_the_stores_imports_change() -> None:
    source = (
        "from langgraph.checkpoint.postgres import _ainternal\n"
        "from langgraph.store.postgres import AsyncPostgresStore, PostgresStore\n"
        "from langgraph.store.postgres.base import _escape_like_literal\n"
    )
    assert suite.swap_savers(source) == (
        "from langgraph.checkpoint.postgres import _ainternal\n"
        "from pgcheckpoint import AsyncPostgresStore, PostgresStore\n"
        "from langgraph.store.postgres.base import _escape_like_literal\n"
    )


@pytest.mark.parametrize(
    ("dsn", "server"),
    [
        ("host=127.0.0.1 port=5432 user=postgres dbname=postgres", "postgresql://postgres@127.0.0.1:5432/"),
        ("host='/tmp/pg sock' port=5433 user=postgres", "postgresql://postgres@%2Ftmp%2Fpg%20sock:5433/"),
        ("postgresql://u:p%40ss@[::1]:6000/app", "postgresql://u:p%40ss@[::1]:6000/"),
    ],
)  # fmt: skip
def test_the_tests_uris_name_the_server_as_the_dsn_does(dsn: str, server: str) -> None:
    assert suite.server_uris(dsn, "pgc test") == (server, server + "pgc%20test")


def test_a_case_whose_teardown_fails_too_keeps_both_messages() -> None:
    report = (
        '<testsuites><testsuite name="pytest">'
        '<testcase name="test_a"><failure message="call boom"/></testcase>'
        '<testcase name="test_a"><error message="failed on teardown"/></testcase>'
        '<testcase name="test_b"/>'
        '<testcase name="test_b"><error message="failed on teardown"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert suite.outcomes(report, "test_x.py") == {
        "test_x.py::test_a": suite.Outcome("failed", "call boom\nfailed on teardown"),
        "test_x.py::test_b": suite.Outcome("failed", "failed on teardown"),
    }


def test_a_dsn_the_tests_uris_cannot_carry_skips() -> None:
    with pytest.raises(suite.Unavailable, match="sslmode"):
        suite.server_uris("host=db user=u sslmode=require", "x")

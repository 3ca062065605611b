"""The official saver's own tests pass against pgcheckpoint, but for the cases listed.

Issue 32 holds pgcheckpoint to the tests of `langgraph-checkpoint-postgres`
3.2.0 (`test_sync.py`, `test_async.py`, `test_prune.py`,
`test_delta_pagination.py`, `test_conformance_delta.py`,
`test_delta_plain_value_seed.py`; 124 cases without the shallow savers,
which pgcheckpoint does not have) with the two savers' imports swapped.
`suite.py` fetches them (pip, into a cache outside the checkout; the tests
skip when it cannot) and runs each module in a subprocess on a fresh
database of the test server; each case must pass, or fail the way
`expected.py` says and docs/moving.md explains. `make official-tests` runs
this module alone.
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
    pg_server: str,
    _databases: Any,
    request: pytest.FixtureRequest,
) -> None:
    root = suite.prepare(sdist, tmp_path)
    # the database the official tests share (DEFAULT_URI); each makes its own besides
    shared = _databases.new_name()
    _databases.create(shared, "template0")
    try:
        suite.point_conftest(root, pg_server, shared)
        # a URI that names no database connects to PGDATABASE's (the tests create theirs there)
        server_db = str(conninfo_to_dict(pg_server).get("dbname") or "postgres")
        found = suite.run(
            root, module, own_tables=module == "test_prune.py", env={"PGDATABASE": server_db}
        )
    finally:
        _databases.drop(shared)
    request.config.stash.setdefault(RESULTS, {})[module] = found

    assert len(found) == suite.FILES[module], (
        f"{module} ran {len(found)} cases, not {suite.FILES[module]}: {sorted(found)}"
    )
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
    for name in expected.DIFFERENCES.get(module, {}):
        if _function(f"{module}::{name}") not in functions:
            problems.append(f"expected.py lists {module}::{name}, which the suite no longer has")
    assert not problems, "\n".join(problems)


def _function(case_id: str) -> str:
    """`test_x.py::name` of `test_x.py::name[param]`."""
    return case_id.split("[", 1)[0]


def test_the_listed_cases_are_the_ones_docs_moving_md_names() -> None:
    text = MOVING.read_text()
    assert DOC_SECTION in text, f"docs/moving.md has no section {DOC_SECTION!r}"
    section = text.split(DOC_SECTION, 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(test_\w+)`", section))
    listed = {name.split("[", 1)[0] for names in expected.DIFFERENCES.values() for name in names}
    listed.add(expected.CONFORMANCE_CASE.split("::", 1)[1])
    assert named == listed, (
        f"docs/moving.md names {sorted(named - listed)} that expected.py does not list, "
        f"and does not name {sorted(listed - named)}"
    )


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
    with pytest.raises(AssertionError, match="imports neither official saver"):
        suite.swap_savers("from langgraph.checkpoint.postgres.base import X\n")


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


def test_a_dsn_the_tests_uris_cannot_carry_skips() -> None:
    with pytest.raises(suite.Unavailable, match="sslmode"):
        suite.server_uris("host=db user=u sslmode=require", "x")

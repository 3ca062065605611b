"""LangGraph's Agent Server on pgcheckpoint's factory, started for real and driven by its SDK.

Each module starts its own `langgraph dev` (one process, `support.agent_server`)
on a database of its own, cloned from the migrated template as `db_dsn`'s
are, and its tests share it: every test makes threads of its own. The suite
runs on one pytest-xdist worker (group `agent_server`: `make test` passes
`--dist loadgroup`), so its servers start one after another on the 2 cores.
Without the server's packages (the `server` extra), every test skips, saying
which are missing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from support.agent_server import missing_server_packages

HERE = Path(__file__).resolve().parent
MISSING = missing_server_packages()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.xdist_group("agent_server"))
            if MISSING:
                item.add_marker(pytest.mark.skip(reason=MISSING))


@pytest.fixture(scope="module")
def module_dsn(_databases: Any, template_db: str) -> Iterator[str]:
    """A database for the module's server, migrated, as `db_dsn` gives one to a test."""
    name = _databases.new_name()
    _databases.create(name, conninfo_to_dict(template_db)["dbname"])
    try:
        yield _databases.dsn(name)
    finally:
        _databases.drop(name)


@pytest.fixture
async def client(server: Any) -> AsyncIterator[Any]:
    """The SDK's async client for the module's `server` (a fixture each module defines)."""
    async with client_of(server.url) as opened:
        yield opened


def client_of(url: str) -> Any:
    """The SDK's async client for a server, to use in `async with`."""
    from langgraph_sdk import get_client

    return get_client(url=url)


def table_rows(dsn: str, query: str, params: Any = None) -> list[dict[str, Any]]:
    """Rows of a query on the server's database, behind its back."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(query, params).fetchall()


def checkpoint_count(dsn: str, thread_id: str, ns: str | None = None) -> int:
    rows = table_rows(
        dsn,
        "SELECT count(*) AS n FROM pgc_checkpoints WHERE thread_id = %s"
        " AND (%s::text IS NULL OR checkpoint_ns = %s)",
        (thread_id, ns, ns),
    )
    return int(rows[0]["n"])

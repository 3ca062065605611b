"""Orders that must not depend on the database's collation.

`writes_sort_key` orders by code point, as Python compares strings. A database
created with a linguistic collation (the `postgres` Docker image defaults to
en_US.utf8) sorts "a" before "B"; the pending writes must still come back in
LangGraph's order, or a `DeltaChannel` reducer replays them in another order
than the run applied them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import writes_sort_key
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from psycopg import sql
from support.chat import append

from pgcheckpoint import PostgresSaver
from pgcheckpoint.schema.migrate import upgrade


@pytest.fixture
def icu_db_dsn(_databases: Any) -> Iterator[str]:
    """A migrated database whose default collation is ICU's en-US.

    Named by the root conftest's `_databases`, so a run that dies leaves nothing
    the next run does not drop.
    """
    name = _databases.new_name("icu")
    with psycopg.connect(_databases.server_dsn, autocommit=True) as conn:
        try:
            conn.execute(
                sql.SQL(
                    "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'"
                    " LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
                ).format(sql.Identifier(name))
            )
        # PostgreSQL before 15 has no LOCALE_PROVIDER; a build without ICU refuses it
        except (
            psycopg.errors.SyntaxError,
            psycopg.errors.FeatureNotSupported,
            psycopg.errors.InvalidParameterValue,
        ) as exc:
            pytest.skip(f"this server cannot create an ICU database: {exc}")
    try:
        dsn = _databases.dsn(name)
        upgrade(dsn)
        yield dsn
    finally:
        _databases.drop(name)


def test_pending_writes_follow_writes_sort_key_under_a_linguistic_collation(
    icu_db_dsn: str,
) -> None:
    paths = ["~__pregel_pull, a", "~__pregel_pull, B", "~__pregel_pull, _z", "~__pregel_pull, Z"]
    with psycopg.connect(icu_db_dsn) as conn:
        (differs,) = conn.execute(
            'SELECT array_agg(p ORDER BY p) <> array_agg(p ORDER BY p COLLATE "C")'
            " FROM unnest(%s::text[]) AS p",
            [paths],
        ).fetchone() or (None,)
    assert differs, "the ICU collation should order these paths differently from Python"

    memory = InMemorySaver()
    checkpoint = generate_checkpoint()
    with PostgresSaver.from_conn_string(icu_db_dsn) as saver:
        for target in (memory, saver):
            config = target.put(generate_config("t"), checkpoint, generate_metadata(), {})
            for n, path in enumerate(paths):
                target.put_writes(config, [("messages", path)], f"task-{n}", path)
        got = saver.get_tuple(config)
        want = memory.get_tuple(config)
    assert got is not None and want is not None
    assert [w[2] for w in got.pending_writes] == sorted(paths, key=writes_sort_key)
    assert got.pending_writes == want.pending_writes


class Chat(TypedDict, total=False):
    messages: Annotated[list[str], DeltaChannel(append, snapshot_frequency=4)]


def test_a_delta_channel_graph_on_a_linguistic_collation_equals_in_memory(
    icu_db_dsn: str,
) -> None:
    """Parallel writers whose names sort differently by code point and in en-US."""

    builder = StateGraph(Chat)
    for name in ("agent", "tool_a", "Tool_B", "_helper"):
        builder.add_node(name, lambda state, name=name: {"messages": [name]})
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    config: RunnableConfig = {"configurable": {"thread_id": "chat"}}

    seen = []
    with PostgresSaver.from_conn_string(icu_db_dsn) as saver:
        for checkpointer in (saver, InMemorySaver()):
            graph = builder.compile(checkpointer=checkpointer)
            for turn in range(12):
                graph.invoke({"messages": [f"human {turn}"]}, config)
            seen.append(
                [(s.values, s.next, s.metadata["step"]) for s in graph.get_state_history(config)]
            )
    assert seen[0][0][0]["messages"][-5:] == ["human 11", "Tool_B", "_helper", "agent", "tool_a"]
    assert seen[0] == seen[1]

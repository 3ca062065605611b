"""A checkpoint row whose `channel_versions` is not an object of versions, as read back.

Someone may write any JSON into the column (a hand edit, a tool, a bad
restore). A read of that checkpoint then raises `UnreadableValueError` naming
the row, on every driver, by id, as the thread's latest and in a `list`,
instead of a raw PostgreSQL error from the statement (`cannot call
jsonb_object_keys on a scalar`) or versions LangGraph cannot compare; the
thread's other checkpoints and other threads read as before, and the thread
can still be deleted.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from support.savers import SaverApi

from pgcheckpoint import UnreadableValueError

SHAPES = [
    '"1"',
    "[1]",
    "null",
    "5",
    '{"messages": null}',
    '{"messages": {"v": 1}}',
    '{"messages": true}',
]


async def _put(api: SaverApi, config: dict, value: list[str], version: str) -> dict:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": value}
    checkpoint["channel_versions"] = {"messages": version}
    return await api.put(config, checkpoint, {"step": int(version)}, {"messages": version})


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_read_of_the_row_names_it_and_the_rest_reads(
    api: SaverApi, db_dsn: str, shape: str
) -> None:
    thread_id, other = f"damaged-{uuid.uuid4()}", f"healthy-{uuid.uuid4()}"
    first = await _put(api, {"configurable": {"thread_id": thread_id}}, ["a"], "1")
    second = await _put(api, first, ["a", "b"], "2")
    healthy = await _put(api, {"configurable": {"thread_id": other}}, ["x"], "1")
    before = await api.get_tuple(first)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgc_checkpoints SET channel_versions = %s::jsonb"
            " WHERE thread_id = %s AND checkpoint_id = %s",
            (shape, thread_id, second["configurable"]["checkpoint_id"]),
        )
    wanted = (
        rf"pgc_checkpoints row .*{second['configurable']['checkpoint_id']}.* outside pgcheckpoint"
    )
    with pytest.raises(UnreadableValueError, match=wanted):
        await api.get_tuple(second)
    with pytest.raises(UnreadableValueError, match=wanted):
        await api.get_tuple({"configurable": {"thread_id": thread_id}})
    with pytest.raises(UnreadableValueError, match=wanted):
        await api.list({"configurable": {"thread_id": thread_id}})
    # what is not damaged reads as before
    after = await api.get_tuple(first)
    assert after is not None and before is not None
    assert after.checkpoint == before.checkpoint
    got = await api.get_tuple(healthy)
    assert got is not None and got.checkpoint["channel_values"] == {"messages": ["x"]}
    await api.delete_thread(thread_id)
    assert await api.list({"configurable": {"thread_id": thread_id}}) == []

"""What a read hands out is the caller's own, at any cache budget (`pgcheckpoint.core.sharing`).

A caller who edits in place a value that `get_tuple`, `list` or
`get_delta_channel_history` returned must change nothing another value of the
same result holds, nothing a later read returns, and nothing stored.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base.id import uuid6
from support.savers import SaverApi

from pgcheckpoint.core.caches import DEFAULT_CACHE_BYTES

# nothing kept; a budget that keeps small values only; the default
BUDGETS = [0, 6000, DEFAULT_CACHE_BYTES]
LONG = "x" * 400  # long enough for the first list to be the base of deltas


def chat_message(n: int) -> AIMessage:
    return AIMessage(
        content=[{"type": "text", "text": f"answer {n} {LONG}"}],
        id=f"a{n}",
        tool_calls=[{"name": "lookup", "args": {"q": f"q{n}"}, "id": f"c{n}"}],
        additional_kwargs={"n": n},
    )


async def put_chat(api: SaverApi, thread_id: str) -> list[list[Any]]:
    """Four checkpoints: `messages` grows by a message at each of the first three (a
    full value, then deltas on it), and is unchanged at the fourth."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    stored: list[list[Any]] = []
    messages: list[Any] = [HumanMessage(LONG, id="h0")]
    for step in range(4):
        if step < 3:
            messages = [*messages, chat_message(step)]
        version = f"{min(step, 2) + 1:032}.0"
        checkpoint = {
            "v": 4,
            "id": str(uuid6()),
            "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": {"messages": messages},
            "channel_versions": {"messages": version},
            "versions_seen": {},
            "updated_channels": ["messages"] if step < 3 else [],
        }
        new = {"messages": version} if step < 3 else {}
        config = await api.put(config, checkpoint, {"step": step}, new)
        stored.append(messages)
    return stored[::-1]  # as list returns them, newest first


@pytest.mark.parametrize("cache_bytes", BUDGETS)
async def test_the_checkpoints_of_one_listing_share_no_message(api: SaverApi) -> None:
    """Issue 31, item 2: appending to a message of one checkpoint of a listing
    changed the same message in the others."""
    expected = await put_chat(api, "t")
    config = {"configurable": {"thread_id": "t"}}
    for _ in range(3):  # pieces are kept from the second read on
        listed = await api.list(config)
        assert len(listed) == len(expected)
        for tup, stored in zip(listed, expected, strict=True):
            # what the checkpoints before it in the listing were handed was edited
            assert tup.checkpoint["channel_values"]["messages"] == stored
            for message in tup.checkpoint["channel_values"]["messages"]:
                if isinstance(message, AIMessage):
                    message.content.append({"type": "text", "text": "edited"})
                    message.additional_kwargs["seen"] = True
                    message.tool_calls[0]["args"]["q"] = "edited"
                message.id = "edited"
        got = await api.get_tuple(config)
        assert got.checkpoint["channel_values"]["messages"] == expected[0]

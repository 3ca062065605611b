"""What a read hands out is the caller's own, at any cache budget (`pgcheckpoint.core.sharing`).

A caller who edits in place a value that `get_tuple`, `list` or
`get_delta_channel_history` returned must change nothing another value of the
same result holds, nothing a later read returns, and nothing stored.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import operator
from datetime import datetime, timezone
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from support.chat import append
from support.savers import SaverApi, open_variant
from support.values import SERDE, canon, values, vandalize

from pgcheckpoint import PostgresSaver
from pgcheckpoint.core.caches import DEFAULT_CACHE_BYTES
from pgcheckpoint.threadview.ops import checkpoint_values_op

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


# -- every read path, every kind of value, every edit --------------------------------


class Turns(TypedDict, total=False):
    plain: Any
    items: Annotated[list[Any], operator.add]
    notes: Annotated[list[Any], DeltaChannel(append, snapshot_frequency=2)]
    turn: int


def count_turn(state: Turns) -> Turns:
    return {"turn": state.get("turn", 0) + 1}


def turns_graph(checkpointer: Any) -> Any:
    builder = StateGraph(Turns)
    builder.add_node("count_turn", count_turn)
    builder.add_edge(START, "count_turn")
    builder.add_edge("count_turn", END)
    return builder.compile(checkpointer=checkpointer)


class Reader:
    """Every read of one thread, through a compiled graph and its saver, sync or async.

    `read_everything` records each value it is handed (`canon`) and edits it
    in place right away (`vandalize`), so a value shared with one read before
    it, in the same result or not, shows the edit.
    """

    def __init__(self, saver: Any, *, threadview: bool) -> None:
        self.saver = saver
        self.api = SaverApi(saver)
        self.graph = turns_graph(saver)
        self.is_async = not isinstance(saver, PostgresSaver | InMemorySaver)
        self.threadview = threadview

    async def call(self, method: str, *args: Any) -> Any:
        if self.is_async:
            return await getattr(self.graph, "a" + method)(*args)
        return getattr(self.graph, method)(*args)

    async def history(self, config: Any) -> list[Any]:
        if self.is_async:
            return [s async for s in self.graph.aget_state_history(config)]
        return list(self.graph.get_state_history(config))

    async def by_id(self, config: Any) -> Any:
        """The checkpoint by id, through the thread view's read if this is a pgcheckpoint saver."""
        if not self.threadview:
            return await self.api.get_tuple(config)
        conf = config["configurable"]
        op = checkpoint_values_op(self.saver, conf["thread_id"], "", conf["checkpoint_id"])
        found = self.saver.run(op)
        return await found if self.is_async else found

    async def read_everything(self, thread_id: str) -> list[Any]:
        seen: list[Any] = []

        def record(value: Any, handed: Any = None) -> None:
            seen.append(canon(value))
            vandalize(value if handed is None else handed)

        def record_tuple(tup: Any) -> None:
            record(tup.checkpoint["channel_values"])
            record([(c, v) for _, c, v in tup.pending_writes], tup)

        def thread() -> dict[str, Any]:  # a config of our own for each call
            return {"configurable": {"thread_id": thread_id}}

        state = await self.call("get_state", thread())
        record((state.values, state.next), state)
        for snapshot in await self.history(thread()):
            record((snapshot.values, snapshot.next), snapshot)
        listed = await self.api.list(thread())
        configs = [copy.deepcopy(tup.config) for tup in listed]
        for tup in listed:
            record_tuple(tup)
        record_tuple(await self.api.get_tuple(thread()))
        for read in (self.api.get_tuple, self.by_id):
            for at in configs:
                record_tuple(await read(copy.deepcopy(at)))
        for at in configs:
            history = await self.api.get_delta_channel_history(
                config=copy.deepcopy(at), channels=["notes"]
            )
            notes = history["notes"]
            record(([w[1:] for w in notes["writes"]], notes.get("seed")), history)
        return seen


@pytest.mark.parametrize("cache_bytes", BUDGETS)
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_no_edit_of_what_a_read_hands_out_reaches_another_read(
    db_dsn: str, driver: str, cache_bytes: int
) -> None:
    """Values of every kind, written by a graph turn by turn; after each turn every
    read path's values are compared with InMemorySaver's and edited in every way;
    at the end the same saver and a fresh one read what the graph wrote."""
    threads = itertools.count()

    async def play(turns: list[tuple[Any, Any, Any]]) -> None:
        thread_id = f"t{next(threads)}"
        reference = Reader(InMemorySaver(serde=SERDE), threadview=False)
        async with open_variant(
            f"{driver}-conn", db_dsn, serde=SERDE, cache_bytes=cache_bytes
        ) as saver:
            ours = Reader(saver, threadview=True)
            for turn, (plain, item, note) in enumerate(turns):
                values = {"plain": plain, "items": [item], "notes": [note], "turn": turn}
                for reader in (reference, ours):
                    await reader.call(
                        "invoke", copy.deepcopy(values), {"configurable": {"thread_id": thread_id}}
                    )
                expected = await reference.read_everything(thread_id)
                assert await ours.read_everything(thread_id) == expected
            assert await ours.read_everything(thread_id) == expected
        async with open_variant(f"{driver}-conn", db_dsn, serde=SERDE) as fresh:
            assert await Reader(fresh, threadview=True).read_everything(thread_id) == expected

    # no shrinking: an example takes a few hundred statements, and a failing one
    # is small already (three turns at most); it is printed as found
    @settings(
        max_examples=6,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(st.tuples(values(), values(), values()), min_size=1, max_size=3))
    def scenario(turns: list[tuple[Any, Any, Any]]) -> None:
        asyncio.run(play(turns))

    scenario()

"""A 200-turn chat whose history lives in a `DeltaChannel`, compared with InMemorySaver.

A `DeltaChannel` stores a full value only every `snapshot_frequency` updates;
in between, reading state replays the writes along the parent chain
(`get_delta_channel_history`). Three parallel nodes write every turn, named so
that code-point and linguistic orders differ ("Tool_B" < "agent" < "tool_a" by
code point, not in en_US): the replay must apply their writes in the order the
run did.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from support.chat import append

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

from .conftest import GraphRunner, describe

TURNS = 200
SNAPSHOT_EVERY = 10
CONFIG: RunnableConfig = {"configurable": {"thread_id": "chat"}}


class Chat(TypedDict, total=False):
    messages: Annotated[list[str], DeltaChannel(append, snapshot_frequency=SNAPSHOT_EVERY)]
    turn: int


def agent(state: Chat) -> Chat:
    return {"messages": [f"agent {state['turn']} (saw {len(state['messages'])})"]}


def tool_a(state: Chat) -> Chat:
    return {"messages": [f"tool_a {state['turn']}"]}


def tool_b(state: Chat) -> Chat:
    return {"messages": [f"Tool_B {state['turn']}"]}


def build() -> StateGraph[Any]:
    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tool_a", tool_a)
    builder.add_node("Tool_B", tool_b)
    for name in ("agent", "tool_a", "Tool_B"):
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    return builder


@pytest.mark.slow
async def test_200_turn_delta_channel_chat_equals_in_memory(
    runs: tuple[GraphRunner, GraphRunner], saver: PostgresSaver | AsyncPostgresSaver
) -> None:
    states = []
    histories = []
    for run in runs:
        run.compile(build())
        for turn in range(TURNS):
            result = await run.invoke({"messages": [f"human {turn}"], "turn": turn}, CONFIG)
            assert result["messages"][-4] == f"human {turn}"
        states.append(describe(await run.get_state(CONFIG)))
        histories.append([describe(s) for s in await run.history(CONFIG)])
    mine, reference = states
    assert len(mine["values"]["messages"]) == 4 * TURNS
    last = TURNS - 1
    assert mine["values"]["messages"][-4:] == [
        f"human {last}",
        f"Tool_B {last}",
        f"agent {last} (saw {4 * last + 1})",
        f"tool_a {last}",
    ]
    assert mine == reference
    # input, the three nodes, the end: three checkpoints a turn
    assert len(histories[0]) == len(histories[1]) == 3 * TURNS
    assert histories[0] == histories[1]

    # the saver stored snapshots only now and then, not the whole list every step
    mine_run = runs[0]
    if isinstance(saver, AsyncPostgresSaver):
        tuples = [t async for t in saver.alist(CONFIG)]
    else:
        tuples = list(saver.list(CONFIG))
    full_values = [
        t for t in tuples if isinstance(t.checkpoint["channel_values"].get("messages"), list)
    ]
    assert len(full_values) < len(tuples) / 2

    # a past state in the middle of the chat reads back the same
    middle = (await mine_run.history(CONFIG, limit=TURNS + 1))[-1]
    assert describe(await mine_run.get_state(middle.config)) == histories[1][TURNS]

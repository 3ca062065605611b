"""A chat on a DeltaChannel: the graph the maintenance and import tests run.

Each turn takes `{<channel>: [message], "turn": n}`; one node answers it, and
the channel keeps every message, stored as deltas between snapshots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph


def append(state: list[Any] | None, writes: Sequence[list[Any]]) -> list[Any]:
    """A DeltaChannel reducer: the state's items, then each write's, in order."""
    out = list(state or [])
    for write in writes:
        out.extend(write)
    return out


def default_reply(turn: int) -> str:
    return f"ai {turn}: " + "y" * 30


def chat_builder(
    *,
    snapshot_frequency: int = 3,
    channel: str = "messages",
    node: str = "agent",
    reply: Callable[[int], str] = default_reply,
) -> StateGraph[Any]:
    """The chat, uncompiled: `node` appends `reply(turn)` to `channel` each turn."""
    state = TypedDict(  # type: ignore[misc]
        "Chat",
        {
            channel: Annotated[list, DeltaChannel(append, snapshot_frequency=snapshot_frequency)],
            "turn": int,
        },
    )

    def answer(values: dict[str, Any]) -> dict[str, Any]:
        return {channel: [reply(values["turn"])], "turn": values["turn"]}

    builder = StateGraph(state)
    builder.add_node(node, answer)
    builder.add_edge(START, node)
    builder.add_edge(node, END)
    return builder


def chat_graph(checkpointer: Any, **options: Any) -> Any:
    """The chat compiled with a checkpointer; `options` as for `chat_builder`."""
    return chat_builder(**options).compile(checkpointer=checkpointer)

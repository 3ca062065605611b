"""Threads in every row format a database may hold, and what a saver reads of them.

`tests/migrations/format1/write_rows.py` writes them with pgcheckpoint 0.1.0;
`tests/migrations/test_format_upgrade.py` reads them back with this version.

Example:
    >>> what_reads(saver, "sealed")["checkpoints"][0]["metadata"]  # doctest: +SKIP
    {'source': 'loop', 'step': 8, 'user_id': 'user-sealed'}
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from support.checkpoints import config

KEY = bytes(range(32))
LANGGRAPH_KEY = b"0123456789abcdef0123456789abcdef"
FILTERABLE = ("source", "step", "user_id")
TABLES = ("pgc_checkpoints", "pgc_blobs", "pgc_writes")


class State(TypedDict, total=False):
    messages: Annotated[list[str], DeltaChannel(operator.add, snapshot_frequency=3)]
    items: Annotated[list[str], operator.add]
    turn: int
    answer: str


def graph(saver: Any) -> Any:
    def agent(state: State) -> dict[str, Any]:
        turn = state["turn"]
        return {"messages": [f"ai {turn}"], "items": [f"item {turn} " + "i" * 130]}

    def review(state: State) -> dict[str, Any]:
        if state["turn"] < 2:
            return {}
        return {"answer": interrupt({"question": f"approve turn {state['turn']}?"})}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("review", review)
    g.add_edge(START, "agent")
    g.add_edge("agent", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=saver)


def what_reads(saver: Any, thread_id: str) -> dict[str, Any]:
    """What the saver reads of a thread, as text that compares across versions."""
    tuples = list(saver.list(config(thread_id)))
    head = tuples[0].config["configurable"]["checkpoint_id"]
    history = saver.get_delta_channel_history(config=config(thread_id, head), channels=["messages"])
    return {
        "checkpoints": [
            {
                "checkpoint_id": t.config["configurable"]["checkpoint_id"],
                "parent": (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
                "values": repr(sorted(t.checkpoint["channel_values"].items())),
                "versions": t.checkpoint["channel_versions"],
                "metadata": {k: t.metadata.get(k) for k in ("source", "step", "user_id")},
                "writes": repr(t.pending_writes),
            }
            for t in tuples
        ],
        "history": repr(sorted(history.items())),
    }

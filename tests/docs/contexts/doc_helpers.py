"""What the contexts of the docs' code blocks share: the database, a graph, keys."""

from __future__ import annotations

import os
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from pgcheckpoint import PostgresSaver

DSN = os.environ["PGCHECKPOINT_DSN"]
# the keys `env=keys` sets (k2 active): tests/docs/test_doc_blocks.py KEY_ENV
K1 = bytes(range(32))
K2 = bytes(range(100, 132))


class State(TypedDict, total=False):
    order: str
    decision: str


def approve(state: State) -> State:
    return {"decision": interrupt(f"approve {state['order']}?")}


def approval_builder() -> StateGraph[Any]:
    """A graph that stops in `approve` until resumed."""
    builder = StateGraph(State)
    builder.add_node("approve", approve)
    builder.add_edge(START, "approve")
    builder.add_edge("approve", END)
    return builder


def interrupted_thread(thread_id: str = "order-1234") -> None:
    """Run the approval graph on `thread_id` up to its interrupt."""
    with PostgresSaver.from_conn_string(DSN) as saver:
        graph = approval_builder().compile(checkpointer=saver)
        graph.invoke({"order": thread_id}, {"configurable": {"thread_id": thread_id}})

"""A refund that a person approves: a review subgraph that stops on `interrupt()`, then pay.

The review records each decision in the long-term store, under the thread's
id. Compiled without a checkpointer or a store: the Agent Server gives the
graph the ones `langgraph.json` names (pgcheckpoint's), and refuses a graph
that has its own checkpointer.
"""

from __future__ import annotations

from typing import TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class Refund(TypedDict, total=False):
    amount: int
    risk: str
    decision: str
    paid: bool


def score(state: Refund) -> Refund:
    return {"risk": "high" if state["amount"] > 100 else "low"}


def ask(state: Refund, config: RunnableConfig) -> Refund:
    # above 100 EUR the run stops here until a client resumes it with Command(resume=...)
    decision = "approved" if state["risk"] == "low" else interrupt(f"refund {state['amount']} EUR?")
    # the server's store (pgcheckpoint's): what was decided, kept beyond the thread
    get_store().put(
        ("refunds",),
        config["configurable"]["thread_id"],
        {"amount": state["amount"], "risk": state["risk"], "decision": decision},
    )
    return {"decision": decision}


review = (
    StateGraph(Refund)
    .add_node("score", score)
    .add_node("ask", ask)
    .add_edge(START, "score")
    .add_edge("score", "ask")
    .add_edge("ask", END)
    .compile()
)


def pay(state: Refund) -> Refund:
    return {"paid": state["decision"] == "approved"}


graph = (
    StateGraph(Refund)
    .add_node("review", review)
    .add_node("pay", pay)
    .add_edge(START, "review")
    .add_edge("review", "pay")
    .add_edge("pay", END)
    .compile()
)

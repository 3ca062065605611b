"""A refund that a person approves: a review subgraph that stops on `interrupt()`, then pay.

Compiled without a checkpointer: the Agent Server gives the graph the one
`langgraph.json` names (pgcheckpoint's), and refuses a graph that has its own.
"""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class Refund(TypedDict, total=False):
    amount: int
    risk: str
    decision: str
    paid: bool


def score(state: Refund) -> Refund:
    return {"risk": "high" if state["amount"] > 100 else "low"}


def ask(state: Refund) -> Refund:
    if state["risk"] == "low":
        return {"decision": "approved"}
    # the run stops here until a client resumes it with Command(resume=...)
    return {"decision": interrupt(f"refund {state['amount']} EUR?")}


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

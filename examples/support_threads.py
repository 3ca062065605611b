"""The threads the inspection guide shows (docs/inspection.md), in your database.

Writes three support threads with real LangGraph graphs, then look at them:

    $ PGCHECKPOINT_DSN=postgresql://... python examples/support_threads.py
    $ pgcheckpoint threads --since 2d
    $ pgcheckpoint show support-981

- support-970: `plan` and `act`, finished;
- support-977: `plan`, the `research` subgraph, `review` asks for approval and
  is answered; then `act` fans out to `a` and `b`, and `b` raises once `a`'s
  writes are saved: the step stops part way, as in a crash;
- support-981: the same, then `update_state` on the checkpoint after `plan`
  forks the thread (a new topic), and the fork runs on to the question again.
"""

from __future__ import annotations

import contextlib
import operator
import os
import time
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from pgcheckpoint import PostgresSaver

DSN = os.environ.get("PGCHECKPOINT_DSN", "postgresql://postgres:postgres@localhost:5432/postgres")


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    topic: str
    findings: list[str]
    approved: str


class Research(TypedDict, total=False):
    topic: str
    findings: list[str]


def research_graph() -> Any:
    sub = StateGraph(Research)
    sub.add_node("search", lambda s: {"findings": [f"search {s['topic']}"]})
    sub.add_node("summarise", lambda s: {"findings": [*s["findings"], "summary"]})
    sub.add_edge(START, "search")
    sub.add_edge("search", "summarise")
    sub.add_edge("summarise", END)
    return sub.compile()


def plan(state: State) -> State:
    return {"log": [f"plan {state['topic']}"]}


def review(state: State) -> State:
    answer = interrupt({"question": "approve the plan?", "topic": state["topic"]})
    return {"approved": answer, "log": ["reviewed"]}


def a(state: State) -> State:
    return {"log": ["a done"]}


def support_graph(dsn: str) -> StateGraph[Any]:
    """plan, the research subgraph, review (asks), act, then a and b in parallel."""

    def b(state: State, config: RunnableConfig) -> State:
        # a tool that times out, once `a` saved its writes: they stay behind
        thread_id = config["configurable"]["thread_id"]
        deadline = time.monotonic() + 30
        with psycopg.connect(dsn, autocommit=True) as conn:
            while (
                time.monotonic() < deadline
                and not conn.execute(
                    "SELECT 1 FROM pgc_writes WHERE thread_id = %s"
                    " AND task_path = '~__pregel_pull, a'",
                    [thread_id],
                ).fetchone()
            ):
                time.sleep(0.02)
        raise RuntimeError("tool timed out")

    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("research", research_graph())
    g.add_node("review", review)
    g.add_node("act", lambda s: {"log": ["act"]})
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "plan")
    g.add_edge("plan", "research")
    g.add_edge("research", "review")
    g.add_edge("review", "act")
    g.add_edge("act", "a")
    g.add_edge("act", "b")
    g.add_edge("a", END)
    g.add_edge("b", END)
    return g


def quick_graph() -> StateGraph[Any]:
    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("act", lambda s: {"log": ["act"]})
    g.add_edge(START, "plan")
    g.add_edge("plan", "act")
    g.add_edge("act", END)
    return g


def crashed(graph: Any, thread_id: str, *, fork: bool) -> None:
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"topic": "llamas"}, config)
    with contextlib.suppress(RuntimeError):  # b's tool times out
        graph.invoke(Command(resume="yes"), config)
    if fork:
        history = list(graph.get_state_history(config))
        after_plan = next(s for s in history if s.next == ("research",))
        graph.invoke(None, graph.update_state(after_plan.config, {"topic": "alpacas"}))


def main() -> None:
    with PostgresSaver.from_conn_string(DSN) as saver:
        saver.setup()
        quick = quick_graph().compile(checkpointer=saver)
        quick.invoke({"topic": "refunds"}, {"configurable": {"thread_id": "support-970"}})
        graph = support_graph(DSN).compile(checkpointer=saver)
        crashed(graph, "support-977", fork=False)
        crashed(graph, "support-981", fork=True)
    print("wrote support-970, support-977 and support-981: try `pgcheckpoint threads`")


if __name__ == "__main__":
    main()

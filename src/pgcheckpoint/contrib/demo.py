"""`make demo`: a graph that stops for approval, then resumes from Postgres.

Runs against `PGCHECKPOINT_DSN` when set, else an embedded PostgreSQL (the
`pgserver` package) kept in `.pgcheckpoint/pgdata`. The thread stays in the
database; the last line printed is the `pgcheckpoint show` command that draws
it.

Example:
    $ python -m pgcheckpoint.demo
"""

# no `from __future__ import annotations`: LangGraph reads the State annotations
# at run time, and `add_messages` is only imported inside main()
import os
import shlex
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict


def main() -> int:
    """Run the demo and print each step, then the command to look at its thread.

    Example:
        >>> main()  # doctest: +SKIP
        0
    """
    try:
        from langgraph.graph import END, START, StateGraph
        from langgraph.graph.message import add_messages
        from langgraph.types import Command, interrupt
    except ImportError:
        print("the demo needs langgraph: pip install 'pgcheckpoint[demo]'", file=sys.stderr)
        return 2

    from pgcheckpoint import PostgresSaver

    dsn = os.environ.get("PGCHECKPOINT_DSN")
    if dsn and dsn != "embedded":  # `embedded` names what the demo falls back on
        print(f"database: PGCHECKPOINT_DSN ({dsn.split('@')[-1]})")
        dsn_option = ""
    else:
        from pgcheckpoint.contrib.embedded import embedded_dsn

        print("database: embedded PostgreSQL in .pgcheckpoint/pgdata")
        print("          (set PGCHECKPOINT_DSN to use your own server)")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            print(
                "          as root, pgserver runs it as the OS user 'pgserver' (created if "
                "missing) and makes the directories above it readable by everyone"
            )
        dsn = embedded_dsn()
        dsn_option = " --dsn embedded"

    class State(TypedDict):
        messages: Annotated[list[Any], add_messages]
        refund: int

    def plan(state: State) -> dict[str, Any]:
        print("  [plan]    agent proposes a refund of 40 EUR")
        return {"messages": [("ai", "I propose a refund of 40 EUR.")], "refund": 40}

    def approve(state: State) -> dict[str, Any]:
        decision = interrupt({"question": f"approve a refund of {state['refund']} EUR?"})
        print(f"  [approve] human said {decision!r}")
        return {"messages": [("human", f"decision: {decision}")]}

    def execute(state: State) -> dict[str, Any]:
        print(f"  [execute] refund of {state['refund']} EUR paid")
        return {"messages": [("ai", "Refund paid.")]}

    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("approve", approve)
    builder.add_node("execute", execute)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "approve")
    builder.add_edge("approve", "execute")
    builder.add_edge("execute", END)

    thread_id = f"demo-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread_id}}
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        print("schema: migrated to the newest revision")
        graph = builder.compile(checkpointer=saver)
        print(f"run 1, thread {thread_id!r}:")
        first: Any = {"messages": [("human", "my parcel never arrived")]}
        result = graph.invoke(first, config)
        question = result["__interrupt__"][0].value["question"]
        print(f"  paused: {question}  (next: {graph.get_state(config).next})")

    # A new saver and graph, as another process would have after a restart.
    with PostgresSaver.from_conn_string(dsn) as saver:
        graph = builder.compile(checkpointer=saver)
        print("run 2, resuming from the saved checkpoint with 'yes':")
        result = graph.invoke(Command(resume="yes"), config)
        saved = len(list(graph.get_state_history(config)))
        print(f"  finished with {len(result['messages'])} messages; {saved} checkpoints saved")
    print("the thread stays in the database; to see what it did, run:")
    print(f"  {_command()} show {shlex.quote(thread_id)}{dsn_option}")
    return 0


def _command() -> str:
    # the console script next to this interpreter (make demo's .venv), as a path
    # the user can paste from where they ran the demo
    script = Path(sys.executable).parent / "pgcheckpoint"
    if not script.exists():
        return "pgcheckpoint"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


if __name__ == "__main__":
    raise SystemExit(main())

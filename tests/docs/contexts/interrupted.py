# A thread waiting at an interrupt, the graph, and a pooled saver it runs on.
import contextlib

import psycopg
from doc_helpers import DSN, approval_builder, interrupted_thread
from langgraph.types import Command

from pgcheckpoint import PostgresSaver

interrupted_thread("order-1234")
builder = approval_builder()
thread_id = "order-1234"
config = {"configurable": {"thread_id": thread_id}}
DIRECT_DSN = DSN
_open = contextlib.ExitStack()  # kept open until the block ends
saver = _open.enter_context(PostgresSaver.from_conn_string(DSN, pool={"max_size": 4}))
graph = builder.compile(checkpointer=saver)
assert psycopg and Command

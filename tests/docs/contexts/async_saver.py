# An AsyncPostgresSaver (closed by tests/docs/run_async.py), its graph, a thread at an interrupt.
import contextlib

from doc_helpers import DSN, approval_builder, interrupted_thread
from langgraph.types import Command

from pgcheckpoint import AsyncPostgresSaver

interrupted_thread("order-1234")
config = {"configurable": {"thread_id": "order-1234"}}
_stack = contextlib.AsyncExitStack()
saver = await _stack.enter_async_context(  # noqa: F704
    AsyncPostgresSaver.from_conn_string(DSN, pool={"max_size": 4})
)
graph = approval_builder().compile(checkpointer=saver)
assert Command

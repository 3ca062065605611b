# A saver, a thread "t1" and the arguments of each BaseCheckpointSaver method.
import contextlib

from doc_helpers import DSN
from langgraph.checkpoint.base import empty_checkpoint

from pgcheckpoint import PostgresSaver

_open = contextlib.ExitStack()  # kept open until the block ends
saver = _open.enter_context(PostgresSaver.from_conn_string(DSN))
first = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
config = saver.put(first, empty_checkpoint(), {"source": "input", "step": -1}, {})
checkpoint = empty_checkpoint()
metadata = {"source": "loop", "step": 0, "user": "ada"}
new_versions: dict[str, str] = {}
writes = [("messages", ["hi"])]
task_id, task_path = "task-1", ""

"""Context: two threads written by langgraph-checkpoint-postgres, in its own tables."""

from doc_helpers import DSN
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver

with OfficialSaver.from_conn_string(DSN) as official:
    official.setup()
    for thread_id in ("from-official-1", "from-official-2"):
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        official.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})

"""Context: items written by langgraph-checkpoint-postgres's PostgresStore, in its own table."""

from doc_helpers import DSN
from langgraph.store.postgres import PostgresStore as OfficialStore

with OfficialStore.from_conn_string(DSN) as official:
    official.setup()
    official.put(("users", "u1", "memories"), "m1", {"text": "likes tea"})

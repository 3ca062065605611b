"""Context: an item in pgcheckpoint's store."""

from doc_helpers import DSN

from pgcheckpoint import PostgresStore

with PostgresStore.from_conn_string(DSN) as store:
    store.setup()
    store.put(("users", "u1", "memories"), "m1", {"text": "likes tea"})

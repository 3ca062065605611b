"""Context: three threads whose last checkpoint is 40 days old, and one written now;
store items, two of them past their TTL."""

import time

import psycopg
from doc_helpers import DSN, approval_builder

from pgcheckpoint import PostgresSaver, PostgresStore

with PostgresSaver.from_conn_string(DSN) as saver:
    saver.setup()
    graph = approval_builder().compile(checkpointer=saver)
    for n in range(4):
        graph.invoke({"order": f"order-{n}"}, {"configurable": {"thread_id": f"order-{n}"}})
with psycopg.connect(DSN, autocommit=True) as conn:
    conn.execute(
        "UPDATE pgc_checkpoints SET created_at = now() - interval '40 days'"
        " WHERE thread_id <> 'order-3'"
    )
with PostgresStore.from_conn_string(DSN) as store:
    store.put(("users", "u1"), "prefs", {"theme": "dark"})
    for n in range(2):
        store.put(("cache",), f"quote-{n}", {"total": n}, ttl=0.001)
time.sleep(0.2)

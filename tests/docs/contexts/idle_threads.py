"""Context: three threads whose last checkpoint is 40 days old, and one written now."""

import psycopg
from doc_helpers import DSN, approval_builder

from pgcheckpoint import PostgresSaver

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

"""Context: thread order-7 stopped at its interrupt, its latest checkpoint's versions edited."""

import psycopg
from doc_helpers import DSN, interrupted_thread

from pgcheckpoint import PostgresSaver

with PostgresSaver.from_conn_string(DSN) as saver:
    saver.setup()
interrupted_thread("order-7")
with psycopg.connect(DSN, autocommit=True) as conn:
    conn.execute(
        "UPDATE pgc_checkpoints SET channel_versions = '[1]' WHERE thread_id = 'order-7'"
        " AND checkpoint_id = (SELECT max(checkpoint_id) FROM pgc_checkpoints"
        " WHERE thread_id = 'order-7')"
    )

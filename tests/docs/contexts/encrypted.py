"""Context: a thread, and an item of the store, written with EncryptedSerde under key k1."""

from doc_helpers import DSN, K1, approval_builder

from pgcheckpoint import EncryptedSerde, PostgresSaver, PostgresStore

with PostgresSaver.from_conn_string(DSN, serde=EncryptedSerde(keys={"k1": K1})) as saver:
    graph = approval_builder().compile(checkpointer=saver)
    graph.invoke({"order": "order-1"}, {"configurable": {"thread_id": "order-1"}})
with PostgresStore.from_conn_string(DSN, serde=EncryptedSerde(keys={"k1": K1})) as store:
    store.put(("users", "u1"), "prefs", {"theme": "dark"})

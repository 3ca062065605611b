"""The store: LangGraph's long-term memory (`BaseStore`) on PostgreSQL, without I/O.

Written as the checkpointer is: every `BaseStore` operation once, as an op
(`pgcheckpoint.ops`) over the named statements of `sql/queries/store_*.sql`,
which `drivers.store_async.AsyncPostgresStore` and its generated sync twin
`drivers.store.PostgresStore` only run. A batch of `GetOp`, `PutOp`,
`SearchOp` and `ListNamespacesOp` is planned first (`plans`: every op
checked, so bad input fails before any statement runs and changes nothing),
then its embeddings are computed by the driver with no connection held, then
`batch.batch_op` runs it: all gets in one statement, all searches without a
query in one, all listings in one, each search with a query in one, and the
puts in one (two, in one transaction, when the batch also deletes). Reads see
the store as it was before the batch's writes, as `InMemoryStore` does.

The modules:
- `state`: `StoreState`, the store's settings: the value codec (the savers',
  so a key seals items as it seals checkpoints), TTLs, the index, the
  statements rendered for the vector type.
- `plans`: namespaces as stored (labels joined by `.`, matched byte for byte
  as a range of the primary key), the specs of searches and listings.
- `filters`: a filter as JSONB containment and typed conditions.
- `values`: an item's value as stored (JSON text, or the serializer's bytes
  for what JSON cannot hold), its filterable projection, and back.
- `vectors`: the index settings, the texts to embed, the vector table's DDL.
- `batch`: the batch op and the TTL sweep.

Example:
    >>> from pgcheckpoint.store.plans import namespace_text
    >>> namespace_text(("users", "u_1"))
    'users.u_1'
"""
